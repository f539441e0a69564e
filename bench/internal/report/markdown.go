package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/procsched/scheduler/bench/internal/stats"
)

// Machine describes where a set of results was measured.
type Machine struct {
	CPU       string    // CPU model name
	Cores     int       // logical CPUs
	Memory    string    // total memory, formatted
	OS        string    // operating system, architecture and kernel
	GoVersion string    // toolchain that built the benchmark binaries
	Revision  string    // the library's source revision, e.g. "fc7c94c" or "fc7c94c-dirty"
	Date      time.Time // when the run started
	Load      string    // load average when the run started
	Busy      int       // busy-loop goroutines another process ran during each run (-load)
	PGO       []string  // with -pgo: each binary and the runs its profile came from, as "sched: spawn/forget, skynet"
	// Transfer summarises how long a cache line took to move between two
	// cores, in nanoseconds, measured once before each round of each
	// workload (N is 0 if it was not); SlowRounds lists the workloads
	// with rounds measured at more than twice the fastest, as "spawn 2
	// of 5".
	Transfer   stats.Summary
	SlowRounds []string
}

// Row is one implementation's result on one workload.
type Row struct {
	Workload string // workload name
	Size     string // what the workload did, e.g. "1,000,000 msg"
	Impl     string // implementation name
	Variant  string // the variant kept, "" when the implementation has one

	// Memory marks the idle-memory workload, whose primary figure is
	// bytes per process rather than time.
	Memory bool
	// Primary summarises the rounds' primary figure: nanoseconds for a
	// timed workload, bytes per process for the idle-memory one.
	Primary stats.Summary
	PerOpNS float64 // median nanoseconds per operation
	// CPUPerOpNS is the median CPU time per operation, every thread of
	// the process counted; 0 when the runs did not record it.
	CPUPerOpNS float64
	OpUnit     string // what one operation is, e.g. "msg"
	// Ratio is the baseline's median primary figure divided by this
	// row's: above 1 is faster (or smaller) than the baseline,
	// goroutines for a local workload and raw NATS for a remote one. 0
	// when there is no baseline.
	Ratio    float64
	Baseline bool // this row is the baseline (goroutines, or raw NATS for a remote workload)

	AllocsPerOp float64 // median heap allocations per operation
	BytesPerOp  float64 // median bytes allocated per operation
	PeakRSS     float64 // median peak resident set of the process, bytes

	Runs   int    // rounds run
	Failed int    // rounds that failed (wrong answer, crash, timeout)
	Error  string // the first failure, if any

	// Remote marks a remote workload (two nodes over loopback): its row
	// goes in a table of its own, with the figures below, and its ratio
	// is to raw NATS.
	Remote bool
	// Rate is the workload's messages, counted both ways, divided by
	// the median time, per second.
	Rate float64
	// P50NS, P99NS and MeanNS are the medians over the rounds of each
	// round's round-trip percentiles and mean, for a workload that
	// records round trips; 0 otherwise.
	P50NS, P99NS, MeanNS float64
}

// Table is a full report.
type Table struct {
	Title   string
	Machine Machine
	Scale   float64 // the size factor of the run
	Rounds  int
	Rows    []Row    // in the order to print, grouped by workload
	Notes   []string // printed as a list under the table
}

// WriteMarkdown writes t as a markdown document: a title, the machine,
// how to read the figures, the table and the notes.
func WriteMarkdown(w io.Writer, t Table) error {
	var b strings.Builder
	title := t.Title
	if title == "" {
		title = "Benchmark results"
	}
	fmt.Fprintf(&b, "# %s\n\n", title)
	m := t.Machine
	fmt.Fprintf(&b, "- Machine: %s, %d logical CPUs, %s memory, %s\n", orDash(m.CPU), m.Cores, orDash(m.Memory), orDash(m.OS))
	fmt.Fprintf(&b, "- Go: %s\n", orDash(m.GoVersion))
	if m.Revision != "" {
		fmt.Fprintf(&b, "- Library revision: %s\n", m.Revision)
	}
	if !m.Date.IsZero() {
		fmt.Fprintf(&b, "- Date: %s\n", m.Date.UTC().Format("2006-01-02 15:04 MST"))
	}
	if m.Busy > 0 {
		fmt.Fprintf(&b, "- CPU contention: %d busy-looping goroutines in another process during every run (-load %d)\n", m.Busy, m.Busy)
	}
	if len(m.PGO) > 0 {
		fmt.Fprintf(&b, "- Built with profile-guided optimisation (-pgo), each binary from CPU profiles of one run of each of its workloads: %s\n", strings.Join(m.PGO, "; "))
	}
	if m.Load != "" {
		fmt.Fprintf(&b, "- Load average at start: %s\n", m.Load)
	}
	if m.Transfer.N > 0 {
		slow := "none"
		if len(m.SlowRounds) > 0 {
			slow = strings.Join(m.SlowRounds, ", ")
		}
		fmt.Fprintf(&b, "- A cache line moved between two cores in %s (median of %d rounds; %s – %s). Rounds measured at more than twice the fastest: %s\n",
			Duration(m.Transfer.Median), m.Transfer.N, Duration(m.Transfer.Min), Duration(m.Transfer.Max), slow)
	}
	fmt.Fprintf(&b, "- Scale %g, %d round(s); each round runs every implementation once, interleaved, each run in a fresh process\n\n", t.Scale, t.Rounds)
	var local, remote []Row
	for _, r := range t.Rows {
		if r.Remote {
			remote = append(remote, r)
		} else {
			local = append(local, r)
		}
	}
	if len(local) > 0 || len(remote) == 0 {
		writeLocal(&b, local)
	}
	if len(remote) > 0 {
		if len(local) > 0 {
			b.WriteString("\n## Remote workloads\n\n")
		}
		writeRemote(&b, remote)
	}
	if len(t.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLocal writes the table of the local workloads.
func writeLocal(b *strings.Builder, rows []Row) {
	b.WriteString("Median of the rounds, with the fastest and slowest round. " +
		"**× goroutines** is the goroutine baseline's median divided by this one's: above 1 is faster " +
		"(for idle memory: fewer bytes per process) than goroutines with channels. " +
		"**CPU per op** is the CPU time of the whole process (every thread, the collector's included) " +
		"during the measured part, per operation: what the work costs, which sets the speed when other " +
		"processes take the cores. " +
		"Allocations are per operation during the measured part; peak RSS is the whole process's.\n\n")
	b.WriteString("| workload | implementation | median | min – max | per op | CPU per op | × goroutines | allocs/op | B/op | peak RSS | runs |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for i, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			workloadCell(rows, i), implName(r), primary(r, r.Primary.Median), spread(r), perOp(r), cpuPerOp(r), ratio(r),
			count(r, r.AllocsPerOp), count(r, r.BytesPerOp), Bytes(r.PeakRSS), runs(r))
	}
}

// writeRemote writes the table of the remote workloads.
func writeRemote(b *strings.Builder, rows []Row) {
	b.WriteString("Two nodes in one process, talking over loopback. Median of the rounds, with the fastest and slowest round. " +
		"**msgs/s** counts messages both ways: the workload's messages divided by the median time. " +
		"The round-trip columns are the medians over the rounds of each round's percentile and mean. " +
		"**× nats** is raw NATS's median time divided by this one's: above 1 is faster than raw NATS. " +
		"Allocations are per message during the measured part, over the whole process (both nodes, and the NATS server where there is one); " +
		"peak RSS is the whole process's.\n\n")
	b.WriteString("| workload | implementation | median | min – max | msgs/s | round trip p50 | p99 | mean | × nats | allocs/msg | B/msg | peak RSS | runs |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for i, r := range rows {
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			workloadCell(rows, i), implName(r), primary(r, r.Primary.Median), spread(r), rate(r),
			latency(r, r.P50NS), latency(r, r.P99NS), latency(r, r.MeanNS), ratio(r),
			count(r, r.AllocsPerOp), count(r, r.BytesPerOp), Bytes(r.PeakRSS), runs(r))
	}
}

// workloadCell names the workload (in bold, with its size) on the first
// of its rows, and leaves the others empty.
func workloadCell(rows []Row, i int) string {
	r := rows[i]
	if i > 0 && rows[i-1].Workload == r.Workload {
		return ""
	}
	wl := "**" + r.Workload + "**"
	if r.Size != "" {
		wl += " (" + r.Size + ")"
	}
	return wl
}

func rate(r Row) string {
	if r.Primary.N == 0 || r.Rate == 0 {
		return "–"
	}
	return Rate(r.Rate)
}

func latency(r Row, ns float64) string {
	if r.Primary.N == 0 || ns == 0 {
		return "–"
	}
	return Duration(ns)
}

// Rate formats a count per second with a unit that keeps three
// significant digits: "812", "63.6 k", "2.09 M". A count that rounds up
// to the next unit is printed in it: "1 M", not "1000 k".
func Rate(v float64) string {
	if s := trim(v, 0); parse(s) < 1e3 {
		return s
	}
	for _, u := range []struct {
		size float64
		name string
	}{{1e3, " k"}, {1e6, " M"}} {
		if s := trim3(v / u.size); parse(s) < 1e3 {
			return s + u.name
		}
	}
	return trim3(v/1e9) + " G"
}

// trim3 formats v (at least 1) with three significant digits and no
// trailing zeros.
func trim3(v float64) string {
	switch {
	case v >= 100:
		return trim(v, 0)
	case v >= 10:
		return trim(v, 1)
	}
	return trim(v, 2)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}

func implName(r Row) string {
	name := r.Impl
	if r.Variant != "" {
		name += " (" + r.Variant + ")"
	}
	return name
}

func primary(r Row, v float64) string {
	if r.Primary.N == 0 {
		return "–"
	}
	if r.Memory {
		return fmt.Sprintf("%.0f B/proc", v)
	}
	return Duration(v)
}

func spread(r Row) string {
	if r.Primary.N == 0 {
		return "–"
	}
	if r.Memory {
		return fmt.Sprintf("%.0f – %.0f B", r.Primary.Min, r.Primary.Max)
	}
	return Duration(r.Primary.Min) + " – " + Duration(r.Primary.Max)
}

func perOp(r Row) string {
	if r.Primary.N == 0 || r.PerOpNS == 0 {
		return "–"
	}
	unit := r.OpUnit
	if unit == "" {
		unit = "op"
	}
	return fmt.Sprintf("%s/%s", Duration(r.PerOpNS), unit)
}

// cpuPerOp formats the CPU time per operation, "–" when not recorded.
func cpuPerOp(r Row) string {
	if r.Primary.N == 0 || r.CPUPerOpNS == 0 {
		return "–"
	}
	return Duration(r.CPUPerOpNS)
}

func ratio(r Row) string {
	switch {
	case r.Baseline:
		return "1 (baseline)"
	case r.Ratio == 0:
		return "–"
	case r.Ratio >= 1:
		return fmt.Sprintf("**%.2f×**", r.Ratio)
	}
	return fmt.Sprintf("%.*f×", ratioDecimals(r.Ratio), r.Ratio)
}

// ratioDecimals returns how many decimals print ratio v: two, or below
// 0.01 as many as keep two significant digits, so that a ratio of
// 0.004 (the baseline 250 times faster) does not print as zero.
func ratioDecimals(v float64) int {
	if v > 0 && v < 0.01 {
		return 1 - int(math.Floor(math.Log10(v)))
	}
	return 2
}

func runs(r Row) string {
	if r.Failed == 0 {
		return fmt.Sprintf("%d ok", r.Runs)
	}
	msg := fmt.Sprintf("%d/%d FAILED", r.Failed, r.Runs)
	if r.Error != "" {
		msg += ": " + strings.NewReplacer("|", "\\|", "\n", " ").Replace(r.Error)
	}
	return msg
}

// count formats a per-operation count of r, such as its allocations:
// "–" when no round of r succeeded, since then nothing was counted and
// a zero would read as a measurement.
func count(r Row, v float64) string {
	if r.Primary.N == 0 {
		return "–"
	}
	return num(v)
}

// num formats a count that may be fractional: two decimals below 10,
// none from 10 on (9.996 is "10").
func num(v float64) string {
	if s := fmt.Sprintf("%.2f", v); parse(s) < 10 {
		return s
	}
	return fmt.Sprintf("%.0f", v)
}

// Duration formats nanoseconds with a unit that keeps three or four
// significant digits: "812 ns", "63.6 µs", "1.25 s". A time that rounds
// up to the next unit is printed in it: "1 ms", not "1000 µs".
func Duration(ns float64) string {
	return scaled(ns, []unit{{1, "ns", 1}, {1e3, "µs", 1}, {1e6, "ms", 1}, {1e9, "s", 2}})
}

// Bytes formats a byte count in binary units: "512 B", "3.4 MiB"; "–"
// for 0, which is what a run that did not measure it records.
func Bytes(b float64) string {
	if b == 0 {
		return "–"
	}
	return scaled(b, []unit{{1, "B", 0}, {1 << 10, "KiB", 1}, {1 << 20, "MiB", 1}, {1 << 30, "GiB", 2}})
}

// unit is one unit of a figure: its size in the figure's base unit, its
// name and how many decimals (at most) it is printed with.
type unit struct {
	size     float64
	name     string
	decimals int
}

// scaled formats v in the first of units, smallest first, in which it
// rounds to less than one of the next, or in the last.
func scaled(v float64, units []unit) string {
	for i, u := range units[:len(units)-1] {
		if s := trim(v/u.size, u.decimals); parse(s) < units[i+1].size/u.size {
			return s + " " + u.name
		}
	}
	last := units[len(units)-1]
	return trim(v/last.size, last.decimals) + " " + last.name
}

// parse returns the value of a number s formatted here.
func parse(s string) float64 {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// trim formats v with at most decimals decimals and no trailing zeros.
func trim(v float64, decimals int) string {
	s := fmt.Sprintf("%.*f", decimals, v)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
