package schedhttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"expvar"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/schedhttp"
)

// Tests of Handler and Var, served with httptest (browser_test.go shows
// the page in a real browser).

// get serves one request with h and returns the response, body read.
func get(t *testing.T, h http.Handler, method, target string, header ...string) (*http.Response, string) {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	res := rec.Result()
	body, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.NoError(t, res.Body.Close())
	return res, string(body)
}

// requireQuiescentEqual checks that got, decoded from the handler or the
// Var, matches want, a Stats taken right after, in every figure that
// cannot change while the scheduler is at rest; the work-finding counters
// a spurious wake-up could advance must only not go backwards.
func requireQuiescentEqual(t *testing.T, got, want scheduler.Stats) {
	t.Helper()
	require.Equal(t, want.Workers, got.Workers, "Workers")
	require.Equal(t, want.Processes, got.Processes, "Processes")
	require.Equal(t, want.Messages, got.Messages, "Messages")
	require.Equal(t, want.Steps, got.Steps, "Steps")
	require.Equal(t, want.Yields, got.Yields, "Yields")
	require.Equal(t, want.Requeues, got.Requeues, "Requeues")
	require.Equal(t, want.SlowSteps, got.SlowSteps, "SlowSteps")
	require.Equal(t, want.GlobalPops, got.GlobalPops, "GlobalPops")
	require.Equal(t, want.GlobalItems, got.GlobalItems, "GlobalItems")
	require.Equal(t, want.Steals, got.Steals, "Steals")
	require.Equal(t, want.Stolen, got.Stolen, "Stolen")
	require.Equal(t, want.GlobalQueue, got.GlobalQueue, "GlobalQueue")
	require.Equal(t, want.WorkerQueues, got.WorkerQueues, "WorkerQueues")
	require.Equal(t, want.Timers, got.Timers, "Timers")
	require.LessOrEqual(t, got.StealAttempts, want.StealAttempts, "StealAttempts went backwards")
	require.LessOrEqual(t, got.Spins, want.Spins, "Spins went backwards")
	require.LessOrEqual(t, got.Parks, want.Parks, "Parks went backwards")
	require.LessOrEqual(t, got.Wakes, want.Wakes, "Wakes went backwards")
}

func TestHandlerJSONMatchesStats(t *testing.T) {
	q := quiescent(t)
	res, body := get(t, schedhttp.Handler(q.s), http.MethodGet, "/debug/scheduler?format=json")
	want := q.s.Stats()
	require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))

	var got scheduler.Stats
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got), "body: %s", body)
	requireQuiescentEqual(t, got, want)

	// The figures quiescent arranged, so that a handler reporting zeros
	// for everything would not pass by matching a broken Stats.
	require.Equal(t, 2, got.Workers)
	require.Len(t, got.WorkerQueues, 2)
	require.Equal(t, scheduler.ProcessStats{
		Live: 2, Idle: 2, Submitted: 6, Ended: 4, Failed: 1,
	}, got.Processes)
	require.Equal(t, uint64(1), got.Messages.Accepted)
	require.Equal(t, uint64(7), got.Steps)
}

func TestHandlerContentNegotiation(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	h := schedhttp.Handler(s)
	const browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
	tests := []struct {
		name   string
		target string
		accept string
		json   bool
	}{
		{name: "default", target: "/", json: false},
		{name: "format=json", target: "/?format=json", json: true},
		{name: "format=html", target: "/?format=html", json: false},
		{name: "Accept json", target: "/", accept: "application/json", json: true},
		{name: "Accept json with charset", target: "/", accept: "application/json; charset=utf-8", json: true},
		{name: "Accept browser", target: "/", accept: browser, json: false},
		{name: "Accept wildcard", target: "/", accept: "*/*", json: false},
		{name: "Accept json preferred", target: "/", accept: "text/html;q=0.5, application/json", json: true},
		{name: "Accept html preferred", target: "/", accept: "application/json;q=0.5, text/html", json: false},
		{name: "Accept json refused", target: "/", accept: "application/json;q=0", json: false},
		{name: "Accept malformed", target: "/", accept: "application/json;;;=, ???", json: false},
		{name: "Accept json with a weight not a number", target: "/", accept: "application/json;q=abc", json: false},
		{name: "Accept json with a weight above 1", target: "/", accept: "text/html;q=0.5, application/json;q=2", json: false},
		{name: "Accept json with a weight NaN", target: "/", accept: "application/json;q=NaN", json: false},
		{name: "format=html beats Accept", target: "/?format=html", accept: "application/json", json: false},
		{name: "format=json beats Accept", target: "/?format=json", accept: browser, json: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var header []string
			if tt.accept != "" {
				header = []string{"Accept", tt.accept}
			}
			res, body := get(t, h, http.MethodGet, tt.target, header...)
			require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
			require.Equal(t, "Accept", res.Header.Get("Vary"))
			require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
			if tt.json {
				require.Equal(t, "application/json", res.Header.Get("Content-Type"))
				var st scheduler.Stats
				require.NoError(t, json.Unmarshal([]byte(body), &st), "body: %s", body)
				require.Equal(t, 1, st.Workers)
				return
			}
			require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
			require.True(t, strings.HasPrefix(body, "<!DOCTYPE html>"), "body starts with %.40q", body)
		})
	}
}

func TestHandlerBadFormat(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	res, body := get(t, schedhttp.Handler(s), http.MethodGet, "/?format=xml")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, `format="xml": want json or html`)
}

// TestHandlerMalformedQuery: a query that does not parse is refused
// with 400 Bad Request and says why, rather than served as if its
// malformed parts were not there: "processes=abc;x" is no more a whole
// number than "processes=abc".
func TestHandlerMalformedQuery(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	h := schedhttp.Handler(s)
	tests := []struct {
		query string
		why   string
	}{
		{query: "processes=%zz", why: `invalid URL escape "%zz"`},
		{query: "format=%zz", why: `invalid URL escape "%zz"`},
		{query: "format=json&processes=%", why: `invalid URL escape "%"`},
		{query: "processes=abc;x", why: "semicolon"},
		{query: "format=json;processes=abc", why: "semicolon"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res, body := get(t, h, http.MethodGet, "/?"+tt.query)
			require.Equal(t, http.StatusBadRequest, res.StatusCode, "body: %.60q", body)
			require.Contains(t, body, "schedhttp: malformed query")
			require.Contains(t, body, tt.why)
		})
	}
}

// TestHandlerRepeatedParameter: format or processes given more than once
// is refused with 400 Bad Request, whichever value comes first, rather
// than served by one of the values while the other is dropped.
func TestHandlerRepeatedParameter(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	h := schedhttp.Handler(s)
	for _, query := range []string{
		"processes=5&processes=abc",
		"processes=abc&processes=5",
		"processes=5&format=json&processes=0",
		"format=json&format=html",
		"format=json&format=xml",
		"format=html&format=html",
	} {
		t.Run(query, func(t *testing.T) {
			res, body := get(t, h, http.MethodGet, "/?"+query)
			require.Equal(t, http.StatusBadRequest, res.StatusCode, "body: %.60q", body)
			require.Contains(t, body, "given more than once")
		})
	}
}

// row is how the page renders one figure.
func row(label string, v any) string {
	return fmt.Sprintf(`<th scope="row">%s</th><td>%v</td>`, label, v)
}

func TestHandlerHTMLFigures(t *testing.T) {
	q := quiescent(t)
	res, body := get(t, schedhttp.Handler(q.s), http.MethodGet, "/debug/scheduler")
	require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	st := q.s.Stats()

	require.Contains(t, body, "2 workers")
	for _, want := range []string{
		row("global", 0), row("worker 0", 0), row("worker 1", 0), row("timers", 0),
		row("live", 2), row("ready", 0), row("running", 0), row("blocked", 0), row("idle", 2),
		row("submitted", 6), row("ended", 4), row("failed", 1), row("forced", 0),
		row("init failed", 0), row("rejected", 0), row("panics", 0),
		row("accepted", 1), row("dropped", 0), row("sent", 0), row("bounced", 0), row("unread", 0),
		row("steps", 7), row("yields", 0), row("requeues", 0), row("slow steps", 0),
		row("global pops", st.GlobalPops), row("global items", st.GlobalItems),
		row("steals", st.Steals), row("stolen", st.Stolen),
		`<th scope="row">steal attempts</th>`, `<th scope="row">spins</th>`,
		`<th scope="row">parks</th>`, `<th scope="row">wakes</th>`,
	} {
		require.Contains(t, body, want)
	}
	// No listing unless asked for, and no scripts or external assets.
	require.NotContains(t, body, `class="proc"`)
	require.Contains(t, body, "walks the whole process table")
	for _, bad := range []string{"<script", "src=", "http://", "https://", "<link"} {
		require.NotContains(t, body, bad)
	}
}

func TestHandlerProcessListEscaped(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	const method = `<script>alert("x")</script>`
	h := submit(t, s, waiter{}, method)
	waitIdle(t, s, h.PID())

	res, body := get(t, schedhttp.Handler(s), http.MethodGet, "/?processes=10")
	require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
	require.NotContains(t, body, "<script")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
	require.Contains(t, body, ">"+html.EscapeString(h.PID().String())+"<")
	require.Contains(t, body, ">Idle<")
	require.Equal(t, 1, strings.Count(body, `class="proc"`), "listed rows")
	require.Contains(t, body, "1 of 1 processes, by PID")
}

// maxListed is the most processes the debug page lists.
const maxListed = 1000

func TestHandlerProcessesParam(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(2))
	const live = maxListed + 1
	handles := make([]scheduler.Handle, live)
	for i := range handles {
		handles[i] = submit(t, s, waiter{}, "run")
	}
	eventually(t, "every process to be idle", func() bool {
		return s.Stats().Processes.Idle == live
	})
	h := schedhttp.Handler(s)

	tests := []struct {
		query string
		rows  int // listed rows; -1: 400 Bad Request
	}{
		{query: "", rows: 0},
		{query: "processes=", rows: 0},
		{query: "processes=0", rows: 0},
		{query: "processes=1", rows: 1},
		{query: "processes=3", rows: 3},
		{query: fmt.Sprint("processes=", maxListed), rows: maxListed},
		{query: fmt.Sprint("processes=", maxListed+1), rows: maxListed},
		{query: "processes=99999999999999999999999", rows: maxListed},
		{query: "processes=-1", rows: -1},
		{query: "processes=abc", rows: -1},
		{query: "processes=1.5", rows: -1},
		{query: "processes=+3", rows: -1},
		{query: "processes=%203", rows: -1},
		{query: "processes=abc&format=json", rows: -1},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res, body := get(t, h, http.MethodGet, "/?"+tt.query)
			if tt.rows < 0 {
				require.Equal(t, http.StatusBadRequest, res.StatusCode, "body: %s", body)
				require.Contains(t, body, "want a whole number from 0 to 1000")
				return
			}
			require.Equal(t, http.StatusOK, res.StatusCode, "body: %s", body)
			require.Equal(t, tt.rows, strings.Count(body, `class="proc"`), "listed rows")
			if tt.rows > 0 {
				require.Contains(t, body, fmt.Sprintf("%d of %d processes, by PID", tt.rows, live))
				// Ordered by PID: the first row is the first submitted.
				first := strings.Index(body, `class="proc"`)
				require.Contains(t, body[first:], ">"+html.EscapeString(handles[0].PID().String())+"<")
			}
		})
	}
}

func TestHandlerMethods(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	h := schedhttp.Handler(s)
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		t.Run(method, func(t *testing.T) {
			res, body := get(t, h, method, "/?format=json")
			require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "body: %s", body)
			require.Equal(t, "GET, HEAD", res.Header.Get("Allow"))
			require.Contains(t, body, "not allowed")
			require.Contains(t, body, "use GET or HEAD", "the refusal names every method the handler answers")
		})
	}
	t.Run(http.MethodHead, func(t *testing.T) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		res, err := srv.Client().Head(srv.URL + "/?format=json")
		require.NoError(t, err)
		defer res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode)
		require.Equal(t, "application/json", res.Header.Get("Content-Type"))
		body, err := io.ReadAll(res.Body)
		require.NoError(t, err)
		require.Empty(t, body)
	})
}

// TestHandlerResponseHeaders: every response, a refusal as much as a
// page, carries the headers the docs list: a 405 is cacheable unless
// marked otherwise, and a cache that kept one would refuse the next GET.
func TestHandlerResponseHeaders(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	h := schedhttp.Handler(s)
	for _, tt := range []struct {
		method, target string
		status         int
	}{
		{http.MethodGet, "/", http.StatusOK},
		{http.MethodGet, "/?format=json", http.StatusOK},
		{http.MethodHead, "/?processes=3", http.StatusOK},
		{http.MethodPost, "/", http.StatusMethodNotAllowed},
		{http.MethodDelete, "/?format=json", http.StatusMethodNotAllowed},
		{http.MethodGet, "/?format=xml", http.StatusBadRequest},
		{http.MethodGet, "/?processes=abc", http.StatusBadRequest},
		{http.MethodGet, "/?processes=1&processes=2", http.StatusBadRequest},
		{http.MethodGet, "/?processes=%zz", http.StatusBadRequest},
	} {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			res, body := get(t, h, tt.method, tt.target)
			require.Equal(t, tt.status, res.StatusCode, "body: %.60q", body)
			require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
			require.Equal(t, "Accept", res.Header.Get("Vary"))
			require.Equal(t, "nosniff", res.Header.Get("X-Content-Type-Options"))
		})
	}
}

// TestHandlerServeMux serves the handler as docs/observability.md
// wires it, through a real server.
func TestHandlerServeMux(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	mux := http.NewServeMux()
	mux.Handle("/debug/scheduler", schedhttp.Handler(s))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/debug/scheduler", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var st scheduler.Stats
	require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
	require.Equal(t, 1, st.Workers)
}

func TestVarMatchesStats(t *testing.T) {
	q := quiescent(t)
	v := schedhttp.Var(q.s)
	text := v.String()
	want := q.s.Stats()
	var got scheduler.Stats
	require.NoError(t, json.Unmarshal([]byte(text), &got), "Var: %s", text)
	requireQuiescentEqual(t, got, want)
	require.Equal(t, uint64(6), got.Processes.Submitted)
}

// varSeq makes expvar names unique across tests and -count runs: expvar
// panics when a name is published twice.
var varSeq atomic.Int64

func TestVarPublish(t *testing.T) {
	q := quiescent(t)
	name := fmt.Sprintf("scheduler_test_%d", varSeq.Add(1))
	expvar.Publish(name, schedhttp.Var(q.s))
	require.NotNil(t, expvar.Get(name))

	// As a service would see it, at /debug/vars.
	_, body := get(t, expvar.Handler(), http.MethodGet, "/debug/vars")
	var vars map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &vars), "/debug/vars: %s", body)
	raw, ok := vars[name]
	require.True(t, ok, "%s not in /debug/vars", name)
	var got scheduler.Stats
	require.NoError(t, json.Unmarshal(raw, &got))
	requireQuiescentEqual(t, got, q.s.Stats())
}

// TestVarAfterShutdown: a published Var outlives its scheduler, and
// every later read of /debug/vars reads it.
func TestVarAfterShutdown(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	h := submit(t, s, finisher{}, "run")
	require.NoError(t, wait(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))

	var got scheduler.Stats
	require.NoError(t, json.Unmarshal([]byte(schedhttp.Var(s).String()), &got))
	require.Equal(t, uint64(1), got.Processes.Submitted)
	require.Equal(t, uint64(1), got.Processes.Ended)
	res, body := get(t, schedhttp.Handler(s), http.MethodGet, "/?processes=5")
	require.Equal(t, http.StatusOK, res.StatusCode, "body: %s", body)
	require.Contains(t, body, row("ended", 1))
}

// StatsVar is published with expvar.Publish, so it must be an expvar.Var
// although this package does not import expvar.
var _ expvar.Var = schedhttp.StatsVar{}

// TestZeroVarReadsAsNull: the zero StatsVar, which has no scheduler,
// reads as JSON null rather than panicking: expvar's handler writes every
// published variable in one response, and one that panicked would take
// /debug/vars down for all of them.
func TestZeroVarReadsAsNull(t *testing.T) {
	var v schedhttp.StatsVar
	require.NotPanics(t, func() { _ = v.String() })
	require.Equal(t, "null", v.String())
	name := fmt.Sprintf("scheduler_test_%d", varSeq.Add(1))
	expvar.Publish(name, v)
	res, body := get(t, expvar.Handler(), http.MethodGet, "/debug/vars")
	require.Equal(t, http.StatusOK, res.StatusCode)
	var vars map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &vars), "/debug/vars: %s", body)
	require.Equal(t, "null", string(vars[name]))
}

func TestNilScheduler(t *testing.T) {
	require.PanicsWithValue(t, "schedhttp: Handler of a nil *scheduler.Scheduler", func() { schedhttp.Handler(nil) })
	require.PanicsWithValue(t, "schedhttp: Var of a nil *scheduler.Scheduler", func() { schedhttp.Var(nil) })
}

// TestNoHTTPInScheduler: package scheduler, and this one, must not pull
// in what they keep out. A program that imports the scheduler links none
// of net/http, expvar and html/template, and, since registering a handler
// takes net/http, has nothing registered on http.DefaultServeMux by the
// import; one that imports schedhttp gets no /debug/vars by the import,
// because expvar registers it when imported.
func TestNoHTTPInScheduler(t *testing.T) {
	gocmd, err := exec.LookPath("go") // go test puts its own go first on PATH
	require.NoError(t, err)
	tests := []struct {
		pkg    string
		banned []string
	}{
		{pkg: "github.com/procsched/scheduler", banned: []string{"net/http", "expvar", "html/template"}},
		{pkg: "github.com/procsched/scheduler/schedhttp", banned: []string{"expvar"}},
	}
	for _, tt := range tests {
		t.Run(tt.pkg, func(t *testing.T) {
			out, err := exec.Command(gocmd, "list", "-deps", tt.pkg).Output()
			var exitErr *exec.ExitError
			if errors.As(err, &exitErr) {
				t.Fatalf("go list -deps %s: %v\n%s", tt.pkg, err, exitErr.Stderr)
			}
			require.NoError(t, err)
			deps := strings.Fields(string(out))
			require.Contains(t, deps, tt.pkg, "go list printed no such package")
			for _, bad := range tt.banned {
				if slices.Contains(deps, bad) {
					t.Errorf("%s depends on %s", tt.pkg, bad)
				}
			}
		})
	}
}

// initBlocker's Init waits until release is closed: a process that
// Live counts and the listing does not show.
type initBlocker struct {
	waiter
	entered chan struct{}
	release chan struct{}
}

func (b initBlocker) Init(context.Context, string, payload.Payloads) error {
	close(b.entered)
	<-b.release
	return nil
}

// TestHandlerListingSaysHowManyItFound: the listing says how many
// processes Processes found, those between Init and Close, which may be
// fewer than Live: here one of two is still in its Init.
func TestHandlerListingSaysHowManyItFound(t *testing.T) {
	s := newScheduler(t, scheduler.WithWorkers(1))
	listed := submit(t, s, waiter{}, "listed")
	b := initBlocker{entered: make(chan struct{}), release: make(chan struct{})}
	submitted := make(chan error, 1)
	go func() {
		_, err := s.Submit(context.Background(), b, "starting", payload.Payloads{})
		submitted <- err
	}()
	within := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(timeout):
			t.Fatalf("%s did not come within %v", what, timeout)
		}
	}
	within(b.entered, "the second process's Init")
	res, body := get(t, schedhttp.Handler(s), http.MethodGet, "/?processes=10")
	close(b.release)
	select {
	case err := <-submitted:
		require.NoError(t, err)
	case <-time.After(timeout):
		t.Fatalf("Submit did not return within %v", timeout)
	}
	require.Equal(t, http.StatusOK, res.StatusCode, "body: %s", body)
	require.Contains(t, body, row("live", 2))
	require.Contains(t, body, "1 of 1 processes, by PID")
	require.Equal(t, 1, strings.Count(body, `class="proc"`))
	require.Contains(t, body, ">"+html.EscapeString(listed.PID().String())+"<")
}
