package pooltask

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/procsched/scheduler/bench/internal/workload"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// goSubmit runs every task on a goroutine of its own: the simplest pool.
func goSubmit(task func()) { go task() }

// inlineSubmit runs every task at once, on the caller's goroutine.
func inlineSubmit(task func()) { task() }

func TestFib(t *testing.T) {
	for _, submit := range []Submit{goSubmit, inlineSubmit} {
		for _, n := range []int{0, 1, 2, 10, 15} {
			if got, want := Fib(submit, n), workload.FibValue(n); got != want {
				t.Errorf("Fib(%d) = %d, want %d", n, got, want)
			}
		}
	}
}

func TestSkynet(t *testing.T) {
	for _, submit := range []Submit{goSubmit, inlineSubmit} {
		for _, leaves := range []int{1, 10, 1000} {
			if got, want := Skynet(submit, leaves), workload.SkynetSum(leaves); got != want {
				t.Errorf("Skynet(%d) = %d, want %d", leaves, got, want)
			}
		}
	}
}
