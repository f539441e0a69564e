//go:build stress

package scheduler_test

// stressScale multiplies the sizes of the scheduler's stress tests; see
// scale_test.go.
const stressScale = 20
