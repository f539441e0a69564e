// Package schedhttp serves a [scheduler.Scheduler]'s statistics over HTTP:
// a debug page, as HTML for people and as JSON for programs, and a value
// to publish with expvar at /debug/vars.
//
// [Handler] is related to [expvar.Handler], but shows one scheduler, adds a
// page a browser can read and an optional listing of its live processes.
//
// It lives apart from package scheduler so that a program that runs
// processes without serving debug endpoints links neither net/http nor
// html/template, and so that no import registers anything on
// [http.DefaultServeMux]: this package does not import expvar either
// (whose import registers /debug/vars), and registers nothing itself. The
// program wires what it wants, on the mux it chooses:
//
//	mux.Handle("/debug/scheduler", schedhttp.Handler(s))
//	expvar.Publish("scheduler", schedhttp.Var(s))
package schedhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/procsched/scheduler"
)

// StatsVar is an [expvar.Var] whose String is the JSON of
// [scheduler.Scheduler.Stats], taken afresh each time it is read. Make one
// with [Var]; the zero StatsVar has no scheduler and reads as JSON null,
// so that publishing one by mistake leaves /debug/vars readable.
type StatsVar struct {
	s *scheduler.Scheduler
}

// Var returns the [expvar.Var] of s's statistics. Reading it costs what a
// Stats call costs, a few loads per worker, plus the encoding; nothing is
// counted for it while nobody reads it. A service publishes its scheduler
// with one line:
//
//	expvar.Publish("scheduler", schedhttp.Var(s))
//
// after which the figures appear under "scheduler" at /debug/vars, in the
// same JSON as [Handler]'s. The expvar package cannot unpublish a name and
// panics on a duplicate one, so publish once per name and program: the
// value keeps the scheduler reachable, and after
// [scheduler.Scheduler.Shutdown] it reports the final figures.
//
// Var panics if s is nil. Any goroutine.
func Var(s *scheduler.Scheduler) StatsVar {
	if s == nil {
		panic("schedhttp: Var of a nil *scheduler.Scheduler")
	}
	return StatsVar{s}
}

// String returns the JSON of a fresh [scheduler.Scheduler.Stats]: exactly
// what [encoding/json.Marshal] makes of it; null for the zero StatsVar.
// Any goroutine.
func (v StatsVar) String() string {
	if v.s == nil {
		return "null"
	}
	body, err := json.Marshal(v.s.Stats())
	if err != nil { // Stats holds only integers: cannot happen
		// Still valid JSON, so that /debug/vars stays readable.
		return strconv.Quote("schedhttp: encoding stats: " + err.Error())
	}
	return string(body)
}

// Handler returns an [http.Handler] for a service's debug mux that renders
// s's [scheduler.Stats]: as JSON, exactly what [encoding/json.Marshal]
// makes of a Stats, when the request asks for ?format=json or prefers
// application/json in its Accept header; otherwise as a plain HTML page
// with no external assets and no scripts (?format=html forces it). The
// page shows every figure of the Stats: the workers and their queues,
// processes by state, totals, messages, dead letters, the blocking pool,
// steps and yields, the work-finding counters and timers; html/template
// escapes every value.
//
// With ?processes=N the page also lists the first N processes by PID
// that [scheduler.Scheduler.Processes] lists: those between Init and
// Close. N above 1000 is capped at 1000; a value that is not a whole
// number is refused with 400 Bad Request, even when asking for JSON, as
// are an unknown format, either parameter given more than once, and a
// query that does not parse (a bad %-escape, a semicolon). The JSON has
// no listing.
//
// It answers GET and HEAD only (405 Method Not Allowed, with an Allow
// header, otherwise), and marks every response, refusals included, not to
// be cached nor sniffed for another content type. A request costs a Stats call and the encoding,
// except with a process listing, which walks the whole process table
// whatever N is: its cost grows with the number of live processes, so keep
// it for debugging. Wire it with, for example:
//
//	mux.Handle("/debug/scheduler", schedhttp.Handler(s))
//
// and serve that mux on a port of its own, not the public one. Handler
// panics if s is nil. Any goroutine; the handler serves requests
// concurrently, and after s is shut down it shows the final figures.
func Handler(s *scheduler.Scheduler) http.Handler {
	if s == nil {
		panic("schedhttp: Handler of a nil *scheduler.Scheduler")
	}
	return handler{s}
}

// maxListed is the most processes the debug page lists; ?processes= above
// it is capped.
const maxListed = 1000

// handler is what Handler returns; it keeps no state of its own.
type handler struct {
	s *scheduler.Scheduler
}

// ServeHTTP serves one request; see [Handler]. Any goroutine.
func (h handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Set before anything can be refused: a 405 may be cached unless
	// marked otherwise, and so keep refusing once the method is right.
	hdr := w.Header()
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("Vary", "Accept")
	hdr.Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "schedhttp: method "+r.Method+" not allowed; use GET or HEAD", http.StatusMethodNotAllowed)
		return
	}
	// Parsed here rather than by URL.Query, which leaves out the pairs
	// it cannot parse without a word.
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		http.Error(w, "schedhttp: malformed query: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, name := range [...]string{"format", "processes"} {
		if vs := q[name]; len(vs) > 1 {
			http.Error(w, fmt.Sprintf("schedhttp: %s given more than once (%q): give it once", name, vs), http.StatusBadRequest)
			return
		}
	}
	asJSON, err := wantsJSON(q.Get("format"), r.Header.Values("Accept"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	limit, err := processLimit(q.Get("processes"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	if asJSON {
		body, err := json.Marshal(h.s.Stats())
		if err != nil { // Stats holds only integers: cannot happen
			http.Error(w, "schedhttp: encoding stats: "+err.Error(), http.StatusInternalServerError)
			return
		}
		hdr.Set("Content-Type", "application/json")
		hdr.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body) // an error means the client went away
		return
	}

	page := debugPage{Stats: h.s.Stats(), Limit: limit, Max: maxListed}
	if limit > 0 {
		all := h.s.Processes()
		page.Listed = len(all)
		page.Processes = all[:min(limit, len(all))]
	}
	// Rendered into a buffer first, so that a template error is a 500
	// rather than half a page.
	var buf bytes.Buffer
	buf.Grow(4 << 10) // the page without a listing is about 3 KB
	if err := debugTemplate.Execute(&buf, &page); err != nil {
		http.Error(w, "schedhttp: rendering debug page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Content-Length", strconv.Itoa(buf.Len()))
	_, _ = w.Write(buf.Bytes()) // an error means the client went away
}

// wantsJSON decides the format: the format parameter if given, else JSON
// when the Accept header rates application/json above zero and at least
// as high as text/html (wildcards are not counted, so a browser's
// "*/*" gets the page). A malformed entry, or one whose weight is not a
// number from 0 to 1, is ignored.
func wantsJSON(format string, accept []string) (bool, error) {
	switch format {
	case "json":
		return true, nil
	case "html":
		return false, nil
	case "":
	default:
		return false, fmt.Errorf("schedhttp: format=%q: want json or html", format)
	}
	var qJSON, qHTML float64
	for _, line := range accept {
		for part := range strings.SplitSeq(line, ",") {
			mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err != nil {
				continue // a malformed entry says nothing; ignore it
			}
			q := 1.0
			if v, ok := params["q"]; ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || !(f >= 0 && f <= 1) {
					continue // a weight that is no weight (NaN too): the entry says nothing
				}
				q = f
			}
			switch mt {
			case "application/json":
				qJSON = max(qJSON, q)
			case "text/html":
				qHTML = max(qHTML, q)
			}
		}
	}
	return qJSON > 0 && qJSON >= qHTML, nil
}

// processLimit parses the processes parameter: empty is 0, a whole number
// is capped at maxListed, and anything else is an error.
func processLimit(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return maxListed, nil // a huge number: capped like any other
		}
		return 0, fmt.Errorf("schedhttp: processes=%q: want a whole number from 0 to %d (larger is capped)", v, maxListed)
	}
	return int(min(n, maxListed)), nil
}

// debugPage is what the debug page's template renders.
type debugPage struct {
	Stats     scheduler.Stats
	Limit     int                     // processes asked for, after the cap; 0: no listing
	Max       int                     // maxListed
	Listed    int                     // processes the listing found (see Scheduler.Processes)
	Processes []scheduler.ProcessInfo // the first Limit of them, by PID
}

// debugTemplate is the debug page. html/template escapes every value,
// method names included, for its context.
var debugTemplate = template.Must(template.New("scheduler").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>scheduler</title>
<style>
body { font-family: sans-serif; margin: 1em 2em; }
table { border-collapse: collapse; margin: 0 2em 1em 0; display: inline-table; vertical-align: top; }
caption { text-align: left; font-weight: bold; padding: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.15em 0.6em; }
th { text-align: left; font-weight: normal; }
td { text-align: right; font-variant-numeric: tabular-nums; }
td.text { text-align: left; }
</style>
</head>
<body>
{{- with .Stats}}
<h1>scheduler</h1>
<p>{{.Workers}} workers, {{.IdleWorkers}} idle. <a href="?format=json">JSON</a></p>

<table>
<caption>Queues</caption>
<tr><th scope="row">global</th><td>{{.GlobalQueue}}</td></tr>
{{- range $i, $n := .WorkerQueues}}
<tr><th scope="row">worker {{$i}}</th><td>{{$n}}</td></tr>
{{- end}}
<tr><th scope="row">timers</th><td>{{.Timers}}</td></tr>
</table>

{{with .Processes -}}
<table>
<caption>Processes</caption>
<tr><th scope="row">live</th><td>{{.Live}}</td></tr>
<tr><th scope="row">ready</th><td>{{.Ready}}</td></tr>
<tr><th scope="row">running</th><td>{{.Running}}</td></tr>
<tr><th scope="row">blocked</th><td>{{.Blocked}}</td></tr>
<tr><th scope="row">idle</th><td>{{.Idle}}</td></tr>
</table>

<table>
<caption>Totals</caption>
<tr><th scope="row">submitted</th><td>{{.Submitted}}</td></tr>
<tr><th scope="row">ended</th><td>{{.Ended}}</td></tr>
<tr><th scope="row">failed</th><td>{{.Failed}}</td></tr>
<tr><th scope="row">forced</th><td>{{.Forced}}</td></tr>
<tr><th scope="row">init failed</th><td>{{.InitFailed}}</td></tr>
<tr><th scope="row">rejected</th><td>{{.Rejected}}</td></tr>
<tr><th scope="row">panics</th><td>{{.Panics}}</td></tr>
</table>
{{- end}}

{{with .Messages -}}
<table>
<caption>Messages</caption>
<tr><th scope="row">accepted</th><td>{{.Accepted}}</td></tr>
<tr><th scope="row">dropped</th><td>{{.Dropped}}</td></tr>
<tr><th scope="row">rejected</th><td>{{.Rejected}}</td></tr>
<tr><th scope="row">sent</th><td>{{.Sent}}</td></tr>
<tr><th scope="row">bounced</th><td>{{.Bounced}}</td></tr>
<tr><th scope="row">forwarded</th><td>{{.Forwarded}}</td></tr>
<tr><th scope="row">unread</th><td>{{.Unread}}</td></tr>
</table>
{{- end}}

{{with .DeadLetters -}}
<table>
<caption>Dead letters</caption>
<tr><th scope="row">unread</th><td>{{.Unread}}</td></tr>
<tr><th scope="row">bounces</th><td>{{.Bounces}}</td></tr>
<tr><th scope="row">dropped</th><td>{{.Dropped}}</td></tr>
<tr><th scope="row">late replies</th><td>{{.LateReplies}}</td></tr>
</table>
{{- end}}

{{with .Pool -}}
<table>
<caption>Blocking pool</caption>
<tr><th scope="row">size</th><td>{{.Size}}</td></tr>
<tr><th scope="row">running</th><td>{{.Running}}</td></tr>
<tr><th scope="row">queued</th><td>{{.Queued}}</td></tr>
<tr><th scope="row">waiting</th><td>{{.Waiting}}</td></tr>
<tr><th scope="row">done</th><td>{{.Done}}</td></tr>
<tr><th scope="row">rejected</th><td>{{.Rejected}}</td></tr>
<tr><th scope="row">skipped</th><td>{{.Skipped}}</td></tr>
</table>
{{- end}}

<table>
<caption>Steps</caption>
<tr><th scope="row">steps</th><td>{{.Steps}}</td></tr>
<tr><th scope="row">yields</th><td>{{.Yields}}</td></tr>
<tr><th scope="row">yields cancelled</th><td>{{.Cancelled}}</td></tr>
<tr><th scope="row">requeues</th><td>{{.Requeues}}</td></tr>
<tr><th scope="row">slow steps</th><td>{{.SlowSteps}}</td></tr>
</table>

<table>
<caption>Finding work</caption>
<tr><th scope="row">global pops</th><td>{{.GlobalPops}}</td></tr>
<tr><th scope="row">global items</th><td>{{.GlobalItems}}</td></tr>
<tr><th scope="row">steal attempts</th><td>{{.StealAttempts}}</td></tr>
<tr><th scope="row">steals</th><td>{{.Steals}}</td></tr>
<tr><th scope="row">stolen</th><td>{{.Stolen}}</td></tr>
<tr><th scope="row">spins</th><td>{{.Spins}}</td></tr>
<tr><th scope="row">parks</th><td>{{.Parks}}</td></tr>
<tr><th scope="row">wakes</th><td>{{.Wakes}}</td></tr>
<tr><th scope="row">caller helps</th><td>{{.Helps}}</td></tr>
<tr><th scope="row">run by callers</th><td>{{.Helped}}</td></tr>
</table>
{{- end}}

<p>Counters are read one by one, not at one instant; while workers are busy
the per-step figures may trail by a few dozen steps.</p>

<h2>Processes</h2>
{{- if .Limit}}
<p>{{len .Processes}} of {{.Listed}} processes, by PID: those whose Init has returned and whose Close has not begun (Live above counts those in Init or Close too).
Listing walks the whole process table, so its cost grows with the number of processes.</p>
<table>
<tr><th scope="col">PID</th><th scope="col">method</th><th scope="col">state</th><th scope="col">queued</th><th scope="col">pending</th></tr>
{{- range .Processes}}
<tr class="proc"><td class="text">{{.PID}}</td><td class="text">{{.Method}}</td><td class="text">{{.State}}{{if .Woken}} (woken){{end}}</td><td>{{.Queued}}</td><td>{{.Pending}}</td></tr>
{{- end}}
</table>
{{- else}}
<p>Not listed. Add ?processes=N (at most {{.Max}}) to list the first N live
processes by PID, as <a href="?processes=100">here for 100</a>;
listing walks the whole process table, so its cost grows with the number of processes.</p>
{{- end}}
</body>
</html>
`))
