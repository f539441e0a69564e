package main

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/procsched/scheduler/examples/internal/mainrun"
)

func TestMain(m *testing.M) {
	mainrun.IfChild("skynet", main)
	goleak.VerifyTestMain(m)
}

// TestRun runs the example at a small size; run checks its own result.
func TestRun(t *testing.T) {
	if err := run(10_000, 2); err != nil {
		t.Fatal(err)
	}
}

// TestRunRefusesBadSizes: a number of leaves that is not a power of ten
// (or not positive) cannot be split ten ways down to single leaves, the
// sum of ten billion leaves does not fit an int64, a negative number of
// workers is no count, and more workers than the scheduler can have are
// refused by scheduler.New; run refuses them all at once with errUsage
// instead of starting anything.
func TestRunRefusesBadSizes(t *testing.T) {
	// Ten billion leaves where an int holds it; where it does not, the
	// largest int, which is no power of ten.
	const tenBillion = int(min(1e10, math.MaxInt))
	for _, tt := range []struct{ leaves, workers int }{
		{500, 1}, {0, 1}, {-10, 1}, {20, 1}, {tenBillion, 1}, {1000, -1}, {1000, 1 << 20},
	} {
		done := make(chan error, 1)
		go func() { done <- run(tt.leaves, tt.workers) }()
		select {
		case err := <-done:
			if !errors.Is(err, errUsage) {
				t.Errorf("run(%d, %d) = %v, want errUsage", tt.leaves, tt.workers, err)
			}
		case <-time.After(500 * time.Millisecond):
			t.Fatalf("run(%d, %d) did not return: it started the tree instead of refusing it", tt.leaves, tt.workers)
		}
	}
}

// TestMainOutput: the program prints the sum and the size of the tree
// and exits 0; a bad flag value is refused with a message and exit
// status 2.
func TestMainOutput(t *testing.T) {
	code, stdout, stderr := mainrun.Run(t, "-leaves", "100", "-workers", "1")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != 2 || lines[0] != "sum 4950" || !strings.HasPrefix(lines[1], "111 processes on 1 workers in ") {
		t.Errorf("printed:\n%s\nwant the line \"sum 4950\", then \"111 processes on 1 workers in ...\"", stdout)
	}

	for _, args := range [][]string{{"-leaves", "500"}, {"-leaves", "10000000000"}, {"-workers", "-2"}, {"-workers", "1048576"}, {"-leaves", "x"}} {
		mainrun.Refused(t, args[0], args...)
	}

	mainrun.Refused(t, "extra", "extra")
}
