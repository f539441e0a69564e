//go:build stress

package deque

const stressScale = 20
