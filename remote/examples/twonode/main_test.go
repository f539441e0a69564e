package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestRun runs the example and checks every line it prints: the
// counter on node b adds the ten numbers node a sent it, the awaited
// square answers, the monitor sees the counter end with its total, and
// the message sent after the end comes back as not found.
func TestRun(t *testing.T) {
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"a: started a counter on node b",
		"a: the counter's total of 1..10 is 55",
		"a: a square awaited on b says 7*7 = 49",
		"a: the counter ended (done) with json:55",
		`a: "too late" came back: process not found: true`,
	}
	got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("printed %d lines, want %d:\n%s", len(got), len(want), out.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %q, want %q", i+1, got[i], want[i])
		}
	}
}
