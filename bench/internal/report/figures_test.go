package report

import (
	"bytes"
	"strings"
	"testing"

	"github.com/procsched/scheduler/bench/internal/stats"
)

// markdown renders rows (local or remote) and returns the output.
func markdown(t *testing.T, rows ...Row) string {
	t.Helper()
	var b bytes.Buffer
	if err := WriteMarkdown(&b, Table{Scale: 1, Rounds: 1, Rows: rows}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// requireLine fails unless out has a line equal to want.
func requireLine(t *testing.T, out, want string) {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if l == want {
			return
		}
	}
	t.Errorf("no line\n%s\nin\n%s", want, out)
}

// TestWriteMarkdownFailedRowHasNoFigures: a row whose every round failed
// measured nothing, so every figure cell is "–"; zero allocations would
// read as a measurement. A row that did measure zero allocations says
// so.
func TestWriteMarkdownFailedRowHasNoFigures(t *testing.T) {
	failed := Row{Workload: "ring", Impl: "hollywood", Runs: 2, Failed: 2, Error: "hops: got 1, want 2"}
	requireLine(t, markdown(t, failed),
		"| **ring** | hollywood | – | – | – | – | – | – | – | – | 2/2 FAILED: hops: got 1, want 2 |")
	failed.Remote, failed.Workload = true, "remote-echo"
	requireLine(t, markdown(t, failed),
		"| **remote-echo** | hollywood | – | – | – | – | – | – | – | – | – | – | 2/2 FAILED: hops: got 1, want 2 |")

	zero := Row{Workload: "ring", Impl: "goroutines", Baseline: true, Primary: stats.Summarize([]float64{1000}), PerOpNS: 1, OpUnit: "hop", Runs: 1}
	requireLine(t, markdown(t, zero),
		"| **ring** | goroutines | 1 µs | 1 µs – 1 µs | 1 ns/hop | – | 1 (baseline) | 0.00 | 0.00 | – | 1 ok |")
}
