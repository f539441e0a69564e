//go:build !stress

package globalq

// stressScale multiplies the iteration counts of the stress tests. The
// default keeps `go test -race` of the package to a few seconds on two
// cores; `-tags stress` (make stress) runs them twenty times longer.
const stressScale = 1
