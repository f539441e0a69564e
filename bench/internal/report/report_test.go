package report

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/procsched/scheduler/bench/internal/stats"
)

func sampleTable() Table {
	return Table{
		Machine: Machine{CPU: "Test CPU", Cores: 2, Memory: "1 GiB", OS: "linux/amd64", GoVersion: "go1.26", Revision: "abc1234-dirty", Date: time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC), Load: "0.10 0.20 0.30"},
		Scale:   1,
		Rounds:  3,
		Rows: []Row{
			{Workload: "pingpong", Size: "1,000 msg", Impl: "goroutines", Variant: "unbuffered", Baseline: true,
				Primary: stats.Summarize([]float64{2e6, 2.1e6, 1.9e6}), PerOpNS: 2000, CPUPerOpNS: 3000, OpUnit: "msg", Runs: 3, PeakRSS: 3 << 20},
			{Workload: "pingpong", Impl: "sched", Ratio: 2.5,
				Primary: stats.Summarize([]float64{8e5, 8.2e5, 7.9e5}), PerOpNS: 800, OpUnit: "msg", Runs: 3, AllocsPerOp: 0.001, BytesPerOp: 12},
			{Workload: "idle", Size: "1,000 proc", Impl: "sched", Memory: true, Ratio: 10,
				Primary: stats.Summarize([]float64{250, 260, 255}), PerOpNS: 450, OpUnit: "proc", Runs: 3},
			{Workload: "idle", Impl: "broken", Memory: true, Runs: 3, Failed: 3, Error: "sum | wrong\nagain"},
		},
		Notes: []string{"goroutines: unbuffered kept"},
	}
}

func TestWriteMarkdown(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, sampleTable()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	var tableLines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			tableLines = append(tableLines, l)
		}
	}
	if got, want := len(tableLines), 2+4; got != want {
		t.Fatalf("table has %d lines, want %d (header, rule, 4 rows):\n%s", got, want, out)
	}
	cols := strings.Count(tableLines[0], "|")
	for i, l := range tableLines {
		// Escaped pipes inside a cell do not separate columns.
		if got := strings.Count(l, "|") - strings.Count(l, `\|`); got != cols {
			t.Errorf("line %d has %d separators, want %d: %s", i, got, cols, l)
		}
	}
	for _, want := range []string{
		"Test CPU, 2 logical CPUs, 1 GiB memory, linux/amd64",
		"go1.26",
		"- Library revision: abc1234-dirty",
		"2025-01-02 03:04 UTC",
		"| **pingpong** (1,000 msg) | goroutines (unbuffered) | 2 ms | 1.9 ms – 2.1 ms | 2 µs/msg | 3 µs | 1 (baseline) |",
		"|  | sched | 800 µs |",
		"| 800 ns/msg | – | **2.50×** |", // no CPU time recorded (a run saved before it was)
		"| **idle** (1,000 proc) | sched | 255 B/proc | 250 – 260 B |",
		"3/3 FAILED: sum \\| wrong again",
		"- goroutines: unbuffered kept",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// tableLines returns the lines of out that are table rows.
func tableLines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "|") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestWriteMarkdownRemote(t *testing.T) {
	remote := []Row{
		{Workload: "remote-pingpong", Size: "20,000 round trips", Impl: "sched", Remote: true, Ratio: 0.8,
			Primary: stats.Summarize([]float64{1.2e9, 1.3e9, 1.25e9}), Rate: 32_000, P50NS: 58_400, P99NS: 249_000, MeanNS: 78_000,
			OpUnit: "msg", Runs: 3, AllocsPerOp: 7, BytesPerOp: 410, PeakRSS: 22 << 20},
		{Workload: "remote-pingpong", Impl: "nats", Remote: true, Baseline: true,
			Primary: stats.Summarize([]float64{1e9, 1e9, 1e9}), Rate: 40_000, P50NS: 37_000, P99NS: 99_000, MeanNS: 44_000, Runs: 3},
		{Workload: "remote-echo", Size: "1,000,000 messages each way, window 1,000", Impl: "sched", Remote: true, Ratio: 1.5,
			Primary: stats.Summarize([]float64{9.5e8}), Rate: 2_105_000, Runs: 1, AllocsPerOp: 1.02},
		{Workload: "remote-echo", Impl: "hollywood", Remote: true, Runs: 1, Failed: 1, Error: "echo number: got 3, want 2"},
	}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, Table{Scale: 1, Rounds: 3, Rows: remote}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := tableLines(out)
	if len(lines) != 2+len(remote) {
		t.Fatalf("table has %d lines, want %d (header, rule, %d rows):\n%s", len(lines), 2+len(remote), len(remote), out)
	}
	for i, l := range lines {
		if got, want := strings.Count(l, "|"), strings.Count(lines[0], "|"); got != want {
			t.Errorf("line %d has %d separators, want %d: %s", i, got, want, l)
		}
	}
	for _, want := range []string{
		"| workload | implementation | median | min – max | msgs/s | round trip p50 | p99 | mean | × nats | allocs/msg | B/msg | peak RSS | runs |",
		"| **remote-pingpong** (20,000 round trips) | sched | 1.25 s | 1.2 s – 1.3 s | 32 k | 58.4 µs | 249 µs | 78 µs | 0.80× | 7.00 | 410 | 22 MiB | 3 ok |",
		"|  | nats | 1 s | 1 s – 1 s | 40 k | 37 µs | 99 µs | 44 µs | 1 (baseline) |",
		"| **remote-echo** (1,000,000 messages each way, window 1,000) | sched | 950 ms | 950 ms – 950 ms | 2.1 M | – | – | – | **1.50×** | 1.02 |",
		"|  | hollywood | – | – | – | – | – | – | – | – | – | – | 1/1 FAILED: echo number: got 3, want 2 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, unwanted := range []string{"× goroutines", "## Remote workloads"} {
		if strings.Contains(out, unwanted) {
			t.Errorf("a table of remote rows alone has %q:\n%s", unwanted, out)
		}
	}

	b.Reset()
	mixed := sampleTable()
	mixed.Rows = append(mixed.Rows, remote...)
	if err := WriteMarkdown(&b, mixed); err != nil {
		t.Fatal(err)
	}
	out = b.String()
	local, rest, ok := strings.Cut(out, "## Remote workloads")
	if !ok {
		t.Fatalf("a mixed table has no remote section:\n%s", out)
	}
	if n := len(tableLines(local)); n != 2+4 {
		t.Errorf("the local table has %d lines, want 6:\n%s", n, local)
	}
	if n := len(tableLines(rest)); n != 2+len(remote) {
		t.Errorf("the remote table has %d lines, want %d:\n%s", n, 2+len(remote), rest)
	}
	if !strings.Contains(rest, "- goroutines: unbuffered kept") {
		t.Errorf("the notes come after both tables:\n%s", out)
	}
}

func TestFormatters(t *testing.T) {
	for _, tt := range []struct {
		got, want string
	}{
		{Duration(812), "812 ns"},
		{Duration(63_640), "63.6 µs"},
		{Duration(1_250_000_000), "1.25 s"},
		{Duration(2_000_000), "2 ms"},
		{Bytes(0), "–"},
		{Bytes(512), "512 B"},
		{Bytes(3.5 * (1 << 20)), "3.5 MiB"},
		{Bytes(2.75 * (1 << 30)), "2.75 GiB"},
		{num(0.5), "0.50"},
		{num(1234.4), "1234"},
		{ratioLabel(0.25), "1/4×"},
		{ratioLabel(0.37), "0.37×"},
		{ratioLabel(16), "16×"},
		{valueLabel(12.4), "12"},
		{valueLabel(2.46), "2.5"},
		{valueLabel(0.456), "0.46"},
		{Rate(812), "812"},
		{Rate(1000), "1 k"},
		{Rate(63_640), "63.6 k"},
		{Rate(146_300), "146 k"},
		{Rate(2_094_000), "2.09 M"},
		{Rate(3.2e9), "3.2 G"},
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// bars parses an SVG document, failing on malformed XML, and returns the
// attributes of every bar.
func bars(t *testing.T, doc []byte) []map[string]string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var out []map[string]string
	sawRoot := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v\n%s", err, doc)
		}
		se, ok := tok.(xml.StartElement)
		if !ok {
			continue
		}
		if !sawRoot {
			if se.Name.Local != "svg" || se.Name.Space != "http://www.w3.org/2000/svg" {
				t.Fatalf("root element is %v, want svg in the SVG namespace", se.Name)
			}
			sawRoot = true
		}
		if se.Name.Local != "rect" {
			continue
		}
		attrs := map[string]string{}
		for _, a := range se.Attr {
			attrs[a.Name.Local] = a.Value
		}
		if attrs["class"] == "bar" {
			out = append(out, attrs)
		}
	}
	if !sawRoot {
		t.Fatal("no svg element")
	}
	return out
}

func TestWriteSVG(t *testing.T) {
	c := Chart{
		Title:    "ratio <to> goroutines & co",
		Subtitle: "higher is better",
		Groups:   []string{"pingpong", "skynet", "idle"},
		Series:   []string{"sched", "ants", `"quoted"`},
		Points: []Point{
			{"pingpong", "sched", 2.5},
			{"pingpong", `"quoted"`, 0.1},
			{"skynet", "sched", 1},
			{"skynet", "ants", 40},
			{"idle", "sched", 10.5},
		},
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	got := bars(t, b.Bytes())
	if len(got) != len(c.Points) {
		t.Fatalf("drew %d bars, want one per point (%d)", len(got), len(c.Points))
	}
	for i, p := range c.Points {
		a := got[i]
		if a["data-group"] != p.Group || a["data-series"] != p.Series {
			t.Errorf("bar %d is %s/%s, want %s/%s", i, a["data-group"], a["data-series"], p.Group, p.Series)
		}
	}
	// The axis reaches the powers of two around the extremes, 40 and 0.1.
	if !strings.Contains(b.String(), ">64×<") || !strings.Contains(b.String(), ">1/8×<") {
		t.Errorf("axis does not extend to the data:\n%s", b.String())
	}
}

// TestWriteSVGFitsSubtitle: a chart of few groups is still wide enough
// for its subtitle.
func TestWriteSVGFitsSubtitle(t *testing.T) {
	sub := strings.Repeat("a subtitle of some length, ", 6)
	var b bytes.Buffer
	if err := WriteSVG(&b, Chart{Title: "t", Subtitle: sub, Groups: []string{"g"}, Series: []string{"s"}, Points: []Point{{"g", "s", 2}}}); err != nil {
		t.Fatal(err)
	}
	var width float64
	if _, err := fmt.Sscanf(b.String()[strings.Index(b.String(), `width="`):], `width="%g"`, &width); err != nil {
		t.Fatal(err)
	}
	if want := 5.5 * float64(len(sub)); width < want {
		t.Errorf("width %v, want at least %v for a subtitle of %d characters", width, want, len(sub))
	}
}

func TestWriteSVGSkipsUndrawablePoints(t *testing.T) {
	c := Chart{
		Groups: []string{"g"},
		Series: []string{"s"},
		Points: []Point{
			{"g", "s", 1.5},
			{"g", "s", 0},
			{"g", "s", -2},
			{"g", "s", math.NaN()},
			{"g", "s", math.Inf(1)},
			{"other", "s", 2},
			{"g", "other", 2},
		},
	}
	var b bytes.Buffer
	if err := WriteSVG(&b, c); err != nil {
		t.Fatal(err)
	}
	if got := bars(t, b.Bytes()); len(got) != 1 {
		t.Errorf("drew %d bars, want 1", len(got))
	}
}

func TestWriteSVGEmpty(t *testing.T) {
	var b bytes.Buffer
	if err := WriteSVG(&b, Chart{}); err != nil {
		t.Fatal(err)
	}
	if got := bars(t, b.Bytes()); len(got) != 0 {
		t.Errorf("drew %d bars, want none", len(got))
	}
}
