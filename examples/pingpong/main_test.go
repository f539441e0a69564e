package main

import (
	"errors"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/procsched/scheduler/examples/internal/mainrun"
)

func TestMain(m *testing.M) {
	mainrun.IfChild("pingpong", main)
	goleak.VerifyTestMain(m)
}

// TestRun runs the example at a small size; run checks its own result.
func TestRun(t *testing.T) {
	if err := run(10_000); err != nil {
		t.Fatal(err)
	}
}

// TestRunRefusesNoMessages: a rally of no messages (or fewer) cannot be
// played; run refuses it with errUsage.
func TestRunRefusesNoMessages(t *testing.T) {
	for _, n := range []int{0, -5} {
		if err := run(n); !errors.Is(err, errUsage) {
			t.Errorf("run(%d) = %v, want errUsage", n, err)
		}
	}
}

// TestMainOutput: the program prints how many messages went back and
// forth and the cost of each, and exits 0; a bad -n is refused with a
// message and exit status 2.
func TestMainOutput(t *testing.T) {
	for _, n := range []string{"1", "1000"} {
		code, stdout, stderr := mainrun.Run(t, "-n", n)
		if code != 0 {
			t.Fatalf("-n %s: exit %d, stderr:\n%s", n, code, stderr)
		}
		if !strings.HasPrefix(stdout, n+" messages in ") || !strings.HasSuffix(stdout, " per message\n") || strings.Count(stdout, "\n") != 1 {
			t.Errorf("-n %s printed %q, want one line \"%s messages in ...: ... per message\"", n, stdout, n)
		}
	}
	for _, n := range []string{"0", "-3", "many"} {
		mainrun.Refused(t, "-n", "-n", n)
	}

	mainrun.Refused(t, "extra", "extra")
}
