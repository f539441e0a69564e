//go:build !stress

package deque

// stressScale multiplies the sizes of the concurrent tests; `make stress`
// builds with the stress tag, which raises it.
const stressScale = 1
