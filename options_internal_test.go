package scheduler

import (
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The default number of workers is GOMAXPROCS, but no more than
// WithWorkers accepts: on a machine with more processors, New with no
// options must not start more workers than the limit allows.
func TestDefaultWorkersAtMostTheLimit(t *testing.T) {
	old := runtime.GOMAXPROCS(maxWorkers + 1)
	defer runtime.GOMAXPROCS(old)
	require.Equal(t, maxWorkers, defaultConfig().workers, "the default with GOMAXPROCS %d", maxWorkers+1)
	runtime.GOMAXPROCS(3)
	require.Equal(t, 3, defaultConfig().workers, "the default with GOMAXPROCS 3")
}

// The watchdog's sampling interval stays a positive duration at every
// threshold WithWatchdog accepts, the longest included: while every
// worker is idle it doubles up to maxIdleBackoff times the base, and
// that bound must not wrap around to a negative duration, which would
// make the watchdog's timer fire at once, every time.
func TestWatchdogIntervalAtEveryThreshold(t *testing.T) {
	for _, threshold := range []time.Duration{time.Nanosecond, DefaultWatchdogThreshold, time.Hour, math.MaxInt64 / 16, math.MaxInt64 / 4, math.MaxInt64} {
		wd := newWatchdog(&Scheduler{}, threshold, nil)
		base := wd.interval
		require.Equal(t, max(threshold/4, time.Millisecond), base, "threshold %v: the base interval, a quarter of it but at least a millisecond", threshold)
		interval := base
		for i := range 2 * maxIdleBackoff {
			next := wd.nextInterval(interval, false)
			require.GreaterOrEqual(t, next, interval, "threshold %v: idle sample %d shortened the interval from %v", threshold, i, interval)
			require.LessOrEqual(t, next/maxIdleBackoff, base, "threshold %v: idle sample %d: %v is beyond %d times the base %v", threshold, i, next, maxIdleBackoff, base)
			interval = next
		}
		require.Equal(t, base, wd.nextInterval(interval, true), "threshold %v: a busy sample goes back to the base", threshold)
	}
}
