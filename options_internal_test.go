package scheduler

import (
	"runtime"
	"testing"

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
