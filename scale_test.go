//go:build !stress

package scheduler_test

// stressScale multiplies the sizes of the scheduler's stress tests. The
// default keeps `go test -race` of all of them to well under a minute on
// two cores; `-short` runs only the first two configurations of each
// (see stressConfigs); `-tags stress` (make stress) runs every
// configuration twenty times larger.
const stressScale = 1
