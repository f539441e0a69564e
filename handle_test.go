package scheduler_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// Tests of the Handle (handle.go).

func TestHandleBeforeEnd(t *testing.T) {
	s := newScheduler(t)
	p := &probe{step: untilMessage}
	h := submit(t, s, p)

	_, err := h.Result()
	require.ErrorIs(t, err, sched.ErrNotEnded, "Result while the process waits for a message")
	assert.False(t, isClosed(h.Done()), "Done closed while the process waits for a message")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = h.Wait(ctx)
	require.ErrorIs(t, err, context.Canceled, "Wait with a done context returns its error")

	require.NoError(t, s.Tell(h.PID(), 42))
	res, err := waitEnd(t, s, h)
	require.NoError(t, err)
	assert.Equal(t, 42, res.Value())
}

func TestZeroHandle(t *testing.T) {
	var h sched.Handle
	assert.True(t, h.PID().IsZero())
	assert.True(t, isClosed(h.Done()), "zero Handle's Done is closed")
	_, err := h.Wait(context.Background())
	require.ErrorIs(t, err, sched.ErrProcessNotFound)
	_, err = h.Result()
	require.ErrorIs(t, err, sched.ErrProcessNotFound)
}

// TestWaitAfterEndIgnoresDoneContext: once the process has ended, Wait
// gives its result whatever the context, every time: a caller with a
// deadline that has passed still collects what is there.
func TestWaitAfterEndIgnoresDoneContext(t *testing.T) {
	s := newScheduler(t)
	h := submit(t, s, &probe{step: untilMessage})
	require.NoError(t, s.Tell(h.PID(), 7))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 200 {
		res, err := h.Wait(ctx)
		require.NoError(t, err, "Wait on an ended process with a done context")
		require.Equal(t, 7, res.Value())
	}
}

// TestHandleKeepsOutcome: a Handle reports the result and the error a
// process ended with, whatever their kind and however long it is kept
// (the record keeps them where its mailbox and process value were: see
// proc.outcomeValue), through garbage collections that would free them
// if the record did not hold them: a Go value, bytes and JSON with their
// formats, an error, a result kept with the panic of a Close after Done,
// and nothing at all.
func TestHandleKeepsOutcome(t *testing.T) {
	type point struct{ X, Y int }
	jsonResult, err := payload.JSON(point{3, 4})
	require.NoError(t, err)
	failure := testError("failed")
	cases := []struct {
		name     string
		step     func(*probe, int, []sched.Event, *sched.StepOutput) error
		close    func()
		result   payload.Payload
		wantErr  error
		panicked bool
	}{
		{name: "go value", step: doneWith(&point{1, 2}), result: payload.Of(&point{1, 2})},
		{name: "bytes", step: doneWith(payload.Bytes([]byte("a few bytes"))), result: payload.Bytes([]byte("a few bytes"))},
		{name: "json", step: doneWith(jsonResult), result: jsonResult},
		{name: "error", step: func(*probe, int, []sched.Event, *sched.StepOutput) error { return failure }, wantErr: failure},
		{name: "close panics after done", step: doneWith("kept"), close: func() { panic("in Close") }, result: payload.Of("kept"), panicked: true},
		{name: "nothing", step: doneWith(nil)},
	}
	s := newScheduler(t)
	hs := make([]sched.Handle, len(cases))
	for i, c := range cases {
		hs[i] = submit(t, s, &probe{step: c.step, close: c.close})
		_, _ = waitEnd(t, s, hs[i])
	}
	// Garbage over whatever the records did not hold, collected twice.
	for i := range 1000 {
		runtime.KeepAlive(bytes.Repeat([]byte{byte(i)}, 64))
	}
	runtime.GC()
	runtime.GC()
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := hs[i].Result()
			switch {
			case c.panicked:
				var perr *sched.PanicError
				require.ErrorAs(t, err, &perr)
			case c.wantErr != nil:
				require.ErrorIs(t, err, c.wantErr)
			default:
				require.NoError(t, err)
			}
			assert.Equal(t, c.result.Format(), res.Format(), "format")
			assert.Equal(t, c.result.Value(), res.Value(), "value")
		})
	}
}

// BenchmarkWaitEnded: Wait on the Handle of a process that has ended, the
// common case when a batch is submitted and then collected.
func BenchmarkWaitEnded(b *testing.B) {
	s := newScheduler(b)
	h, err := s.Submit(context.Background(), oneStep, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := h.Wait(ctx); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := h.Wait(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDoneComesAfterTheEndIsReported: Done's doc says that by the time
// the channel is closed, Close has returned, the process's names are
// free, its monitors have been told and its unread messages have gone
// to the DeadLetter hook. The DeadLetter hook looks at Done as it runs,
// so a Done closed before the unread messages were reported is seen
// every time; the name and the monitor are looked at once Done is
// closed.
func TestDoneComesAfterTheEndIsReported(t *testing.T) {
	const unread = 2
	var (
		mu      sync.Mutex
		letters int
		h       sched.Handle
	)
	doneEarly := make(chan bool, unread)
	s := newScheduler(t, sched.WithHooks(sched.Hooks{DeadLetter: func(d sched.DeadLetter) {
		if d.Reason != sched.DeadUnread {
			return
		}
		mu.Lock()
		letters++
		hd := h
		mu.Unlock()
		doneEarly <- isClosed(hd.Done())
	}}))
	gate := make(chan struct{})
	p := &probe{step: func(_ *probe, n int, _ []sched.Event, out *sched.StepOutput) error {
		<-gate // the messages queue while the only step runs
		out.Done(payload.Of("end"))
		return nil
	}}
	mu.Lock()
	h = submit(t, s, p)
	mu.Unlock()
	require.NoError(t, s.Register("claimed", h.PID()))
	watcher := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.Monitor(1, h.PID())
			return nil
		}
		if _, ok := completionOf(evs, 1); ok {
			out.Done(payload.Payload{})
		}
		return nil
	}})
	waitState(t, s, watcher.PID(), sched.StateBlocked)
	for i := range unread {
		require.NoError(t, s.Tell(h.PID(), i))
	}
	close(gate)

	select {
	case <-h.Done():
	case <-time.After(testTimeout):
		t.Fatalf("the process did not end\n%s", dumpState(s))
	}
	for range unread {
		assert.False(t, receive(t, doneEarly, "the DeadLetter hook"), "Done closed before an unread message reached the DeadLetter hook")
	}
	mu.Lock()
	assert.Equal(t, unread, letters, "unread messages reported by the time Done is closed")
	mu.Unlock()
	assert.Equal(t, 1, p.Closes(), "Close returned by the time Done is closed")
	_, err := s.Lookup("claimed")
	assert.ErrorIs(t, err, sched.ErrNameNotFound, "the name is free by the time Done is closed")
	// The watcher was woken by the monitor's event before Done: it is
	// no longer waiting for it.
	if info, ok := findProcess(s, watcher.PID()); ok {
		assert.NotEqual(t, sched.StateBlocked, info.State, "the monitor was told by the time Done is closed")
	}
	_, err = waitEnd(t, s, watcher)
	require.NoError(t, err)
}

// TestHandleAfterShutdown: a Handle keeps answering after Shutdown
// returned, for a process that ended before and one that the shutdown
// deadline forced; Submit after Shutdown gives the zero Handle and
// ErrClosed.
func TestHandleAfterShutdown(t *testing.T) {
	s := newScheduler(t)
	finished := submit(t, s, &probe{step: doneWith("kept")})
	_, err := waitEnd(t, s, finished)
	require.NoError(t, err)
	forced := submit(t, s, &probe{step: ignoreAll})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.Shutdown(ctx), sched.ErrForced)

	for _, wait := range []func(sched.Handle) (payload.Payload, error){
		func(h sched.Handle) (payload.Payload, error) { return h.Result() },
		func(h sched.Handle) (payload.Payload, error) { return h.Wait(context.Background()) },
		func(h sched.Handle) (payload.Payload, error) { return h.Wait(ctx) }, // ended: ctx does not matter
	} {
		res, err := wait(finished)
		require.NoError(t, err)
		assert.Equal(t, "kept", res.Value())
		_, err = wait(forced)
		require.ErrorIs(t, err, sched.ErrForced)
	}
	assert.True(t, isClosed(forced.Done()))
	assert.False(t, forced.PID().IsZero(), "the PID outlives the process")

	h, err := s.Submit(context.Background(), &probe{step: ignoreAll}, "run", nil)
	require.ErrorIs(t, err, sched.ErrClosed)
	assert.Equal(t, sched.Handle{}, h, "Submit refused gives the zero Handle")
}

// TestWaitInItsOwnStep pins what Wait's doc says of a process that waits
// for its own end: it cannot end while its step waits, so Wait gives
// ctx's error (here a ctx done already, so that the test cannot hang),
// and the process goes on as if it had not asked.
func TestWaitInItsOwnStep(t *testing.T) {
	s := newScheduler(t)
	handles := make(chan sched.Handle, 1)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	h := submit(t, s, stepFunc(func(evs []sched.Event, out *sched.StepOutput) error {
		if len(evs) == 0 {
			return nil // waits for its Handle
		}
		own := <-handles
		_, err := own.Wait(done)
		_, result := own.Result()
		out.Done(payload.Payload{})
		if !errors.Is(err, context.Canceled) || !errors.Is(result, sched.ErrNotEnded) {
			return fmt.Errorf("Wait gave %v and Result %v in the process's own step", err, result)
		}
		return nil
	}))
	handles <- h
	require.NoError(t, s.Tell(h.PID(), "your Handle is there"))
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
}
