package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
