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

// TestSmallRatiosKeepTheirDigits: a ratio below 0.01 (the baseline 100
// times faster or more) keeps two significant digits in the table, the
// bar's label and its title, instead of rounding to zero.
func TestSmallRatiosKeepTheirDigits(t *testing.T) {
	row := func(ratio float64) Row {
		return Row{Workload: "ring", Impl: "protoactor", Ratio: ratio, Primary: stats.Summarize([]float64{1e9}), PerOpNS: 1000, Runs: 1}
	}
	for _, tt := range []struct {
		ratio float64
		want  string
	}{
		{0.0043, "0.0043×"},
		{0.004, "0.0040×"},
		{0.00012, "0.00012×"},
		{0.06, "0.06×"},
		{0.5, "0.50×"},
		{1, "**1.00×**"},
		{22.84, "**22.84×**"},
	} {
		out := markdown(t, row(tt.ratio))
		if !strings.Contains(out, "| "+tt.want+" |") {
			t.Errorf("ratio %v: the row lacks %q:\n%s", tt.ratio, tt.want, out)
		}
	}
	for _, tt := range []struct {
		got, want string
	}{
		{valueLabel(0.0043), "0.0043"},
		{valueLabel(0.004), "0.004"},
		{valueLabel(0.06), "0.06"},
		{valueLabel(0.456), "0.46"},
		{ratioLabel(0.0043), "0.0043×"},
		{ratioLabel(0.0037), "0.0037×"},
		{ratioLabel(0.004), "1/250×"},
		{ratioLabel(0.37), "0.37×"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestFormattersAtUnitBoundaries: a figure that rounds up to the next
// unit is printed in it ("1 µs", not "1000 ns"), and a count that rounds
// to 10 or more has no decimals, as every other such figure.
func TestFormattersAtUnitBoundaries(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{Duration(999.94), "999.9 ns"},
		{Duration(999.96), "1 µs"},
		{Duration(999_940), "999.9 µs"},
		{Duration(999_960), "1 ms"},
		{Duration(999_940_000), "999.9 ms"},
		{Duration(999_960_000), "1 s"},
		{Duration(1_004_000_000), "1 s"},
		{Duration(0), "0 ns"},
		{Bytes(1023.4), "1023 B"},
		{Bytes(1023.6), "1 KiB"},
		{Bytes(1024*1024 - 10), "1 MiB"},
		{Bytes(1024*1024*1024 - 10), "1 GiB"},
		{Rate(999.4), "999"},
		{Rate(999.6), "1 k"},
		{Rate(99_960), "100 k"},
		{Rate(999_600), "1 M"},
		{Rate(999_600_000), "1 G"},
		{num(9.994), "9.99"},
		{num(9.996), "10"},
		{num(0), "0.00"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestWriteSVGGeometry: on the default axis (1/4× to 4×, 300 units
// high from y = 96) a bar runs from the baseline at y = 246 to its
// value, 75 units per doubling, up for above 1 and down for below; bars
// of a group sit side by side in series order; every power of two has
// a grid line and a label, and each bar is labelled with its value.
func TestWriteSVGGeometry(t *testing.T) {
	c := Chart{
		Groups: []string{"g1", "g2"},
		Series: []string{"a", "b"},
		Points: []Point{{"g1", "a", 2}, {"g2", "b", 0.5}, {"g2", "a", 1}},
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	got := bars(t, b.Bytes())
	if len(got) != 3 {
		t.Fatalf("drew %d bars, want 3:\n%s", len(got), out)
	}
	// A group is 2 bars of 22 and a gap of 26: 70 wide, from x = 64;
	// its bars start 13 in, and a bar is drawn 1 in from its slot.
	for i, want := range []map[string]string{
		{"x": "78.0", "y": "171.0", "height": "75.0", "width": "20", "data-value": "2"},    // g1, a: up one doubling
		{"x": "170.0", "y": "246.0", "height": "75.0", "width": "20", "data-value": "0.5"}, // g2, b: down one
		{"x": "148.0", "y": "246.0", "height": "1.0", "width": "20", "data-value": "1"},    // g2, a: at the baseline
	} {
		for k, v := range want {
			if got[i][k] != v {
				t.Errorf("bar %d (%s/%s): %s = %q, want %q", i, got[i]["data-group"], got[i]["data-series"], k, got[i][k], v)
			}
		}
	}
	for _, want := range []string{
		`<line x1="64" y1="246.0" x2="464.0" y2="246.0" stroke="#333333" stroke-width="1.5"/>`, // the baseline, heavier
		`<line x1="64" y1="96.0" x2="464.0" y2="96.0" stroke="#dddddd" stroke-width="1.0"/>`,
		`<text x="58.0" y="100.0" font-size="10" text-anchor="end">4×</text>`,
		`<text x="58.0" y="175.0" font-size="10" text-anchor="end">2×</text>`,
		`<text x="58.0" y="250.0" font-size="10" text-anchor="end">1×</text>`,
		`<text x="58.0" y="325.0" font-size="10" text-anchor="end">1/2×</text>`,
		`<text x="58.0" y="400.0" font-size="10" text-anchor="end">1/4×</text>`,
		`<text x="99.0" y="426.0" font-size="11" text-anchor="middle" font-weight="bold">g1</text>`, // centred under its two slots
		`<text x="169.0" y="426.0" font-size="11" text-anchor="middle" font-weight="bold">g2</text>`,
		`<text x="88.0" y="168.0" font-size="8" text-anchor="middle">2</text>`,    // above a bar that rises
		`<text x="180.0" y="330.0" font-size="8" text-anchor="middle">0.5</text>`, // below one that hangs
		`<title>g2, b: 1/2×</title>`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the chart lacks %s:\n%s", want, out)
		}
	}
}

// TestWriteMarkdownTransferUnits: the header's cache-line figures are
// times like the table's, in the unit that suits each: a reading of
// 2.4 ms among ones of 25 ns is not printed as 2371901 ns.
func TestWriteMarkdownTransferUnits(t *testing.T) {
	var b bytes.Buffer
	m := Machine{Transfer: stats.Summarize([]float64{25, 2_371_901, 28.4}), SlowRounds: []string{"fib 1 of 3"}}
	if err := WriteMarkdown(&b, Table{Machine: m, Scale: 1, Rounds: 3}); err != nil {
		t.Fatal(err)
	}
	requireLine(t, b.String(), "- A cache line moved between two cores in 28.4 ns (median of 3 rounds; 25 ns – 2.4 ms). Rounds measured at more than twice the fastest: fib 1 of 3")
}
