//go:build stress

package spin

// stressScale multiplies the iteration counts of the stress tests; see
// scale_test.go.
const stressScale = 20
