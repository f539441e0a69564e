package scheduler_test

import (
	"context"
	"encoding/json"
	"expvar"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Tests of observe.go: Scheduler.Var and Scheduler.DebugHandler.

// oQuiet is what oQuiescent leaves behind.
type oQuiet struct {
	s    *sched.Scheduler
	idle []sched.Handle // processes waiting for messages, until shutdown
}

// oQuiescent starts a scheduler with two workers and brings it to rest with
// known figures: three processes finished, one failed, and two waiting
// for messages (cancel ends them at cleanup), one of which has read a
// message. It returns once every worker is parked and the per-step
// counters show every step, so that nothing changes until the test acts.
func oQuiescent(t *testing.T) oQuiet {
	t.Helper()
	s := tNewScheduler(t, sched.WithWorkers(2))
	var done []sched.Handle
	for i := range 3 {
		done = append(done, tSubmit(t, s, &tProc{step: tDone(i)}))
	}
	done = append(done, tSubmit(t, s, &tProc{step: func(*tProc, int, []sched.Event, *sched.StepOutput) error {
		return tErr("boom")
	}}))
	for i, h := range done {
		_, err := tWait(t, s, h)
		if i < 3 {
			require.NoError(t, err, "process %d", i)
		} else {
			require.ErrorIs(t, err, tErr("boom"))
		}
	}
	q := oQuiet{s: s}
	for range 2 {
		q.idle = append(q.idle, tSubmit(t, s, &tProc{step: tUntilCancel}))
	}
	for _, h := range q.idle {
		tWaitState(t, s, h.PID(), sched.StateIdle)
	}
	require.NoError(t, s.Tell(q.idle[0].PID(), "hello"))
	// 4 finished after one step each, 2 idle with a first step, 1 message.
	const steps = 4 + 2 + 1
	tEventually(t, "the scheduler to come to rest", func() bool {
		st := s.Stats()
		return st.Steps == steps && st.Processes.Idle == 2 && st.Processes.Live == 2 &&
			st.Messages.Accepted == 1 && st.IdleWorkers == st.Workers
	})
	return q
}

// oGet serves one request with h and returns the response, body read.
func oGet(t *testing.T, h http.Handler, method, target string, header ...string) (*http.Response, string) {
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

// oRequireQuiescentEqual checks that got, decoded from the handler or the
// Var, matches want, a Stats taken right after, in every figure that
// cannot change while the scheduler is at rest; the work-finding counters
// a spurious wake-up could advance must only not go backwards.
func oRequireQuiescentEqual(t *testing.T, got, want sched.Stats) {
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

func TestDebugHandlerJSONMatchesStats(t *testing.T) {
	q := oQuiescent(t)
	res, body := oGet(t, q.s.DebugHandler(), http.MethodGet, "/debug/scheduler?format=json")
	want := q.s.Stats()
	require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
	require.Equal(t, "application/json", res.Header.Get("Content-Type"))

	var got sched.Stats
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&got), "body: %s", body)
	oRequireQuiescentEqual(t, got, want)

	// The figures oQuiescent arranged, so that a handler reporting zeros
	// for everything would not pass by matching a broken Stats.
	require.Equal(t, 2, got.Workers)
	require.Len(t, got.WorkerQueues, 2)
	require.Equal(t, sched.ProcessStats{
		Live: 2, Idle: 2, Submitted: 6, Completed: 4, Failed: 1,
	}, got.Processes)
	require.Equal(t, uint64(1), got.Messages.Accepted)
	require.Equal(t, uint64(7), got.Steps)
}

func TestDebugHandlerContentNegotiation(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(1))
	h := s.DebugHandler()
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
		{name: "format=html beats Accept", target: "/?format=html", accept: "application/json", json: false},
		{name: "format=json beats Accept", target: "/?format=json", accept: browser, json: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var header []string
			if tt.accept != "" {
				header = []string{"Accept", tt.accept}
			}
			res, body := oGet(t, h, http.MethodGet, tt.target, header...)
			require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
			require.Equal(t, "Accept", res.Header.Get("Vary"))
			require.Equal(t, "no-store", res.Header.Get("Cache-Control"))
			if tt.json {
				require.Equal(t, "application/json", res.Header.Get("Content-Type"))
				var st sched.Stats
				require.NoError(t, json.Unmarshal([]byte(body), &st), "body: %s", body)
				require.Equal(t, 1, st.Workers)
				return
			}
			require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
			require.True(t, strings.HasPrefix(body, "<!DOCTYPE html>"), "body starts with %.40q", body)
		})
	}
}

func TestDebugHandlerBadFormat(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(1))
	res, body := oGet(t, s.DebugHandler(), http.MethodGet, "/?format=xml")
	require.Equal(t, http.StatusBadRequest, res.StatusCode)
	require.Contains(t, body, `format="xml": want json or html`)
}

// oRow is how the page renders one figure.
func oRow(label string, v any) string {
	return fmt.Sprintf(`<th scope="row">%s</th><td>%v</td>`, label, v)
}

func TestDebugHandlerHTMLFigures(t *testing.T) {
	q := oQuiescent(t)
	res, body := oGet(t, q.s.DebugHandler(), http.MethodGet, "/debug/scheduler")
	require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
	require.Equal(t, "text/html; charset=utf-8", res.Header.Get("Content-Type"))
	st := q.s.Stats()

	require.Contains(t, body, "2 workers")
	for _, want := range []string{
		oRow("global", 0), oRow("worker 0", 0), oRow("worker 1", 0), oRow("timers", 0),
		oRow("live", 2), oRow("ready", 0), oRow("running", 0), oRow("blocked", 0), oRow("idle", 2),
		oRow("submitted", 6), oRow("completed", 4), oRow("failed", 1), oRow("forced", 0),
		oRow("init failed", 0), oRow("rejected", 0), oRow("panics", 0),
		oRow("accepted", 1), oRow("dropped", 0), oRow("sent", 0), oRow("bounced", 0), oRow("unread", 0),
		oRow("steps", 7), oRow("yields", 0), oRow("requeues", 0), oRow("slow steps", 0),
		oRow("global pops", st.GlobalPops), oRow("global items", st.GlobalItems),
		oRow("steals", st.Steals), oRow("stolen", st.Stolen),
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

func TestDebugHandlerProcessListEscaped(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(1))
	const method = `<script>alert("x")</script>`
	h, err := s.Submit(context.Background(), &tProc{step: tUntilCancel}, method, payload.Payloads{})
	require.NoError(t, err)
	tWaitState(t, s, h.PID(), sched.StateIdle)

	res, body := oGet(t, s.DebugHandler(), http.MethodGet, "/?processes=10")
	require.Equal(t, http.StatusOK, res.StatusCode, "status; body: %s", body)
	require.NotContains(t, body, "<script")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;")
	require.Contains(t, body, ">"+html.EscapeString(h.PID().String())+"<")
	require.Contains(t, body, ">Idle<")
	require.Equal(t, 1, strings.Count(body, `class="proc"`), "listed rows")
	require.Contains(t, body, "1 of 1 live processes")
}

// oMaxProcesses is the most processes the debug page lists.
const oMaxProcesses = 1000

func TestDebugHandlerProcessesParam(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(2))
	const live = oMaxProcesses + 1
	handles := make([]sched.Handle, live)
	for i := range handles {
		handles[i] = tSubmit(t, s, &tProc{step: tUntilCancel})
	}
	tEventually(t, "every process to be idle", func() bool {
		return s.Stats().Processes.Idle == live
	})
	h := s.DebugHandler()

	tests := []struct {
		query string
		rows  int // listed rows; -1: 400 Bad Request
	}{
		{query: "", rows: 0},
		{query: "processes=", rows: 0},
		{query: "processes=0", rows: 0},
		{query: "processes=1", rows: 1},
		{query: "processes=3", rows: 3},
		{query: fmt.Sprint("processes=", oMaxProcesses), rows: oMaxProcesses},
		{query: fmt.Sprint("processes=", oMaxProcesses+1), rows: oMaxProcesses},
		{query: "processes=99999999999999999999999", rows: oMaxProcesses},
		{query: "processes=-1", rows: -1},
		{query: "processes=abc", rows: -1},
		{query: "processes=1.5", rows: -1},
		{query: "processes=+3", rows: -1},
		{query: "processes=%203", rows: -1},
		{query: "processes=abc&format=json", rows: -1},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			res, body := oGet(t, h, http.MethodGet, "/?"+tt.query)
			if tt.rows < 0 {
				require.Equal(t, http.StatusBadRequest, res.StatusCode, "body: %s", body)
				require.Contains(t, body, "want a whole number from 0 to 1000")
				return
			}
			require.Equal(t, http.StatusOK, res.StatusCode, "body: %s", body)
			require.Equal(t, tt.rows, strings.Count(body, `class="proc"`), "listed rows")
			if tt.rows > 0 {
				require.Contains(t, body, fmt.Sprintf("%d of %d live processes", tt.rows, live))
				// Ordered by PID: the first row is the first submitted.
				first := strings.Index(body, `class="proc"`)
				require.Contains(t, body[first:], ">"+html.EscapeString(handles[0].PID().String())+"<")
			}
		})
	}
}

func TestDebugHandlerMethods(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(1))
	h := s.DebugHandler()
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		t.Run(method, func(t *testing.T) {
			res, body := oGet(t, h, method, "/?format=json")
			require.Equal(t, http.StatusMethodNotAllowed, res.StatusCode, "body: %s", body)
			require.Equal(t, "GET, HEAD", res.Header.Get("Allow"))
			require.Contains(t, body, "not allowed")
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

// TestDebugHandlerServeMux serves the handler as docs/observability.md
// wires it, through a real server.
func TestDebugHandlerServeMux(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(1))
	mux := http.NewServeMux()
	mux.Handle("/debug/scheduler", s.DebugHandler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/debug/scheduler", nil)
	require.NoError(t, err)
	req.Header.Set("Accept", "application/json")
	res, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var st sched.Stats
	require.NoError(t, json.NewDecoder(res.Body).Decode(&st))
	require.Equal(t, 1, st.Workers)
}

func TestVarMatchesStats(t *testing.T) {
	q := oQuiescent(t)
	v := q.s.Var()
	text := v.String()
	want := q.s.Stats()
	var got sched.Stats
	require.NoError(t, json.Unmarshal([]byte(text), &got), "Var: %s", text)
	oRequireQuiescentEqual(t, got, want)
	require.Equal(t, uint64(6), got.Processes.Submitted)
}

// oVarSeq makes expvar names unique across tests and -count runs: expvar
// panics when a name is published twice.
var oVarSeq atomic.Int64

func TestVarPublish(t *testing.T) {
	q := oQuiescent(t)
	name := fmt.Sprintf("scheduler_test_%d", oVarSeq.Add(1))
	expvar.Publish(name, q.s.Var())
	require.NotNil(t, expvar.Get(name))

	// As a service would see it, at /debug/vars.
	_, body := oGet(t, expvar.Handler(), http.MethodGet, "/debug/vars")
	var vars map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(body), &vars), "/debug/vars: %s", body)
	raw, ok := vars[name]
	require.True(t, ok, "%s not in /debug/vars", name)
	var got sched.Stats
	require.NoError(t, json.Unmarshal(raw, &got))
	oRequireQuiescentEqual(t, got, q.s.Stats())
}

// TestVarAfterShutdown: a published Var outlives its scheduler, and
// every later read of /debug/vars reads it.
func TestVarAfterShutdown(t *testing.T) {
	s := tNewScheduler(t, sched.WithWorkers(1))
	h := tSubmit(t, s, &tProc{step: tDone(1)})
	_, err := tWait(t, s, h)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), tTimeout)
	defer cancel()
	require.NoError(t, s.Shutdown(ctx))

	var got sched.Stats
	require.NoError(t, json.Unmarshal([]byte(s.Var().String()), &got))
	require.Equal(t, uint64(1), got.Processes.Submitted)
	require.Equal(t, uint64(1), got.Processes.Completed)
	res, body := oGet(t, s.DebugHandler(), http.MethodGet, "/?processes=5")
	require.Equal(t, http.StatusOK, res.StatusCode, "body: %s", body)
	require.Contains(t, body, oRow("completed", 1))
}

func ExampleScheduler_DebugHandler() {
	s, err := sched.New(sched.WithWorkers(2))
	if err != nil {
		panic(err)
	}
	defer s.Shutdown(context.Background())

	mux := http.NewServeMux()
	mux.Handle("/debug/scheduler", s.DebugHandler())
	// A service would also publish the figures at /debug/vars:
	//	expvar.Publish("scheduler", s.Var())

	req := httptest.NewRequest(http.MethodGet, "/debug/scheduler?format=json", nil)
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, req)
	var st sched.Stats
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		panic(err)
	}
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println("workers:", st.Workers, "live:", st.Processes.Live)
	// Output:
	// 200 application/json
	// workers: 2 live: 0
}
