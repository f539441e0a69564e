//go:build race

package scheduler_test

// raceEnabled reports whether the tests run under the race detector, whose
// instrumentation may allocate where a normal build does not.
const raceEnabled = true
