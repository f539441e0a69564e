package scheduler_test

// The code that docs/dispatch.md and docs/process-model.md show, as code
// that builds and runs: the documents mark each of their snippets as an
// excerpt of this file, so TestDocSnippets fails when one no longer
// matches it, and the tests here fail when it no longer does what the
// documents say.

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

const cmdGet = scheduler.FirstUserCommand

func get(c scheduler.Call) error {
	url, ok := c.Arg.(string)
	if !ok {
		return fmt.Errorf("get: want a URL, got %T", c.Arg)
	}
	done := c.Completion()
	go func() {
		req, err := http.NewRequestWithContext(c.Context(), http.MethodGet, url, nil)
		if err != nil {
			done.Complete(nil, err)
			return
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done.Complete(nil, err)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		done.Complete(body, err)
	}()
	return nil
}

// getter yields cmdGet with its argument and finishes with the
// completion's data, or fails with its error.
type getter struct{ arg any }

func (g *getter) Init(context.Context, string, payload.Payloads) error { return nil }
func (g *getter) Close()                                               {}

func (g *getter) Step(events []scheduler.Event, out *scheduler.StepOutput) error {
	if len(events) == 0 {
		out.Yield(1, cmdGet, g.arg)
		return nil
	}
	for _, ev := range events {
		if ev.Type == scheduler.EventYieldComplete && ev.Tag == 1 {
			if ev.Error != nil {
				return ev.Error
			}
			out.Done(payload.Of(ev.Data))
		}
	}
	return nil
}

// TestDocsGetHandler: dispatch.md's HTTP handler, registered as it shows,
// completes the yield from its goroutine with the body it fetched, and
// fails a yield whose argument is not a URL.
func TestDocsGetHandler(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "the page")
	}))
	defer srv.Close()
	s, err := scheduler.New(scheduler.WithHandler(cmdGet, get))
	require.NoError(t, err)
	// or, at any time:
	err = s.SetHandler(cmdGet, get)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Shutdown(context.Background())) }()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	h, err := s.Submit(ctx, &getter{arg: srv.URL}, "run", nil)
	require.NoError(t, err)
	res, err := h.Wait(ctx)
	require.NoError(t, err)
	assert.Equal(t, []byte("the page"), res.Value())

	h, err = s.Submit(ctx, &getter{arg: 42}, "run", nil)
	require.NoError(t, err)
	_, err = h.Wait(ctx)
	require.ErrorContains(t, err, "get: want a URL, got int")
}

// order is process-model.md's process with two entry points.
type order struct {
	id         string
	items      []string
	cancelOnly bool
}

func (o *order) Init(ctx context.Context, method string, in payload.Payloads) error {
	switch method {
	case "place":
		return in.Decode(&o.id, &o.items)
	case "cancel":
		o.cancelOnly = true
		return in.Decode(&o.id)
	}
	return fmt.Errorf("%w: %q", scheduler.ErrUnknownMethod, method)
}

// Step finishes at once with what Init read.
func (o *order) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(fmt.Sprintf("%s %v cancel=%v", o.id, o.items, o.cancelOnly)))
	return nil
}

func (o *order) Close() {}

// indexer is process-model.md's process started with Spawn: it counts
// its documents and ends.
type indexer struct{ docs []string }

func (x *indexer) Init(context.Context, string, payload.Payloads) error { return nil }
func (x *indexer) Close()                                               {}

func (x *indexer) Step(_ []scheduler.Event, out *scheduler.StepOutput) error {
	out.Done(payload.Of(len(x.docs)))
	return nil
}

// TestDocsProcessModel runs the sketches of process-model.md: the
// order's entry points, its Handle, a Spawn, and a Shutdown with a
// deadline.
func TestDocsProcessModel(t *testing.T) {
	s, err := scheduler.New()
	require.NoError(t, err)
	ctx, cancelWait := context.WithTimeout(context.Background(), testTimeout)
	defer cancelWait()
	id, items := "o-1", []string{"tea"}

	h, err := s.Submit(ctx, &order{}, "place", payload.Values(id, items))
	require.NoError(t, err)
	res, err := h.Wait(ctx) // blocks until the end or ctx is done
	require.NoError(t, err)
	assert.Equal(t, "o-1 [tea] cancel=false", res.Value(), "Wait's result")
	<-h.Done()            // or select on it
	res, err = h.Result() // or look without blocking (ErrNotEnded while it runs)
	require.NoError(t, err)
	assert.Equal(t, "o-1 [tea] cancel=false", res.Value())

	_, err = s.Submit(ctx, &order{}, "refund", payload.Values(id))
	require.ErrorIs(t, err, scheduler.ErrUnknownMethod)
	require.ErrorIs(t, err, scheduler.ErrInit)

	batch := []string{"a", "b"}
	pid, err := s.Spawn(ctx, &indexer{docs: batch}, "run", nil)
	require.NoError(t, err)
	assert.NotZero(t, pid.ID)

	shutdown(s)
	require.NoError(t, s.Shutdown(context.Background()), "a Shutdown after the stop: the same result, nothing forced")
	_, err = s.Spawn(context.Background(), &indexer{}, "run", nil)
	require.ErrorIs(t, err, scheduler.ErrClosed, "Spawn once the scheduler has stopped")
}

// shutdown stops s as process-model.md shows.
func shutdown(s *scheduler.Scheduler) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		log.Printf("shutdown: %v", err) // wraps ErrForced: some processes were forced
	}
}
