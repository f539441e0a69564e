package main

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example at a small size; run checks its own result.
func TestRun(t *testing.T) {
	if err := run(500, 30*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
