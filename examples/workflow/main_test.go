package main

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/procsched/scheduler/examples/internal/mainrun"
)

func TestMain(m *testing.M) {
	mainrun.IfChild("workflow", main)
	goleak.VerifyTestMain(m)
}

// TestRun runs the example at a small size: every workflow ends quoted or
// timed out, and each made between one call and three.
func TestRun(t *testing.T) {
	const n = 500
	r, err := run(n, 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.quoted+r.timedOut != n {
		t.Errorf("%d quoted + %d timed out, want %d workflows", r.quoted, r.timedOut, n)
	}
	if r.quoted == 0 {
		t.Error("no workflow was quoted")
	}
	if r.calls < n || r.calls > 3*n {
		t.Errorf("%d calls for %d workflows, want between 1 and 3 each", r.calls, n)
	}
}

// TestRunRefusesBadFlags: a negative number of workflows, more than the
// program can hold at once, or a timeout that every call would miss
// before it starts, is refused with errUsage.
func TestRunRefusesBadFlags(t *testing.T) {
	for _, tt := range []struct {
		n       int
		timeout time.Duration
	}{{-1, time.Second}, {maxWorkflows + 1, time.Second}, {math.MaxInt, time.Second}, {10, 0}, {10, -time.Second}} {
		if _, err := run(tt.n, tt.timeout); !errors.Is(err, errUsage) {
			t.Errorf("run(%d, %v) = %v, want errUsage", tt.n, tt.timeout, err)
		}
	}
}

// TestMainOutput: the program prints one line, how many workflows ran,
// how they ended and how many calls they made, and exits 0; a bad flag
// value is refused with a message and exit status 2.
func TestMainOutput(t *testing.T) {
	code, stdout, stderr := mainrun.Run(t, "-n", "50", "-timeout", "1m")
	if code != 0 {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
	var took string
	var quoted, timedOut, calls int
	if _, err := fmt.Sscanf(stdout, "50 workflows in %s %d quoted, %d timed out after 3 attempts; %d calls made\n", &took, &quoted, &timedOut, &calls); err != nil {
		t.Fatalf("printed %q: %v", stdout, err)
	}
	// With a minute to answer, every call is answered in time.
	if quoted != 50 || timedOut != 0 || calls != 50 {
		t.Errorf("printed %q, want 50 quoted, 0 timed out, 50 calls", stdout)
	}

	for _, args := range [][]string{{"-n", "-1"}, {"-n", "9223372036854775807"}, {"-timeout", "0s"}, {"-timeout", "-1ms"}, {"-n", "x"}} {
		mainrun.Refused(t, args[0], args...)
	}

	mainrun.Refused(t, "extra", "extra")
}
