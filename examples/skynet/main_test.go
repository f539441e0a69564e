package main

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example at a small size; run checks its own result.
func TestRun(t *testing.T) {
	if err := run(10_000, 2); err != nil {
		t.Fatal(err)
	}
}
