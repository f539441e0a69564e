//go:build !stress

package scheduler_test

// stressScale multiplies the sizes of the scheduler's stress tests. The
// default keeps `go test -race` of all of them to about a minute on two
// cores; `-tags stress` (make stress) runs them twenty times larger.
const stressScale = 1
