package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

func TestNames(t *testing.T) {
	t.Run("register, look up, send by name", func(t *testing.T) {
		s := newScheduler(t)
		p := &probe{step: untilMessage}
		h := submit(t, s, p)
		require.NoError(t, s.Register("db", h.PID()))
		require.NoError(t, s.Register("db", h.PID()), "the same process again")
		require.NoError(t, s.Register("store", h.PID()), "a second name")
		got, err := s.Lookup("db")
		require.NoError(t, err)
		assert.Equal(t, h.PID(), got)
		require.NoError(t, s.TellName("store", "hi"))
		res, err := waitEnd(t, s, h)
		require.NoError(t, err)
		assert.Equal(t, "hi", res.Value())
	})

	t.Run("clear errors", func(t *testing.T) {
		s := newScheduler(t)
		a := submit(t, s, &probe{step: untilCancel})
		b := submit(t, s, &probe{step: untilCancel})
		require.NoError(t, s.Register("x", a.PID()))
		err := s.Register("x", b.PID())
		require.ErrorIs(t, err, sched.ErrNameTaken)
		assert.Contains(t, err.Error(), a.PID().String(), "says who has it")
		require.ErrorIs(t, s.Register("", a.PID()), sched.ErrInvalidName)
		require.ErrorIs(t, s.Register("y", relay.PID{ID: 1<<32 | 5}), sched.ErrProcessNotFound)
		_, err = s.Lookup("nobody")
		require.ErrorIs(t, err, sched.ErrNameNotFound)
		require.ErrorIs(t, s.TellName("nobody", 1), sched.ErrNameNotFound)
		require.ErrorIs(t, s.Unregister("nobody"), sched.ErrNameNotFound)
		require.NoError(t, s.Unregister("x"))
		require.NoError(t, s.Register("x", b.PID()), "free again after Unregister")
	})

	t.Run("refused once the scheduler has stopped", func(t *testing.T) {
		s := newScheduler(t)
		h := submit(t, s, &probe{step: untilCancel})
		require.NoError(t, s.Register("before", h.PID()))
		require.NoError(t, s.Shutdown(context.Background()))
		require.ErrorIs(t, s.Register("after", h.PID()), sched.ErrClosed)
		// The names were released with their processes, but what a caller
		// learns is that the scheduler is closed, not that a name is free.
		_, err := s.Lookup("before")
		require.ErrorIs(t, err, sched.ErrClosed)
		_, err = s.Lookup("never")
		require.ErrorIs(t, err, sched.ErrClosed)
		require.ErrorIs(t, s.Unregister("before"), sched.ErrClosed)
		require.ErrorIs(t, s.Unregister("never"), sched.ErrClosed)
		require.ErrorIs(t, s.Register("", h.PID()), sched.ErrInvalidName, "bad input is named first")
		// A send by name is a send: refused as Tell is after Shutdown.
		require.ErrorIs(t, s.TellName("before", 1), sched.ErrClosed)
		require.ErrorIs(t, s.TellName("never", 1), sched.ErrClosed)
	})

	t.Run("released when the process ends", func(t *testing.T) {
		s := newScheduler(t)
		first := submit(t, s, &probe{step: untilCancel})
		require.NoError(t, s.Register("svc", first.PID()))
		require.NoError(t, s.Terminate(first.PID()))
		_, err := waitEnd(t, s, first)
		require.NoError(t, err)
		_, err = s.Lookup("svc")
		require.ErrorIs(t, err, sched.ErrNameNotFound)
		second := submit(t, s, &probe{step: untilCancel})
		require.NoError(t, s.Register("svc", second.PID()), "the name is free for the next one")
	})

	t.Run("a process tells by name; an unknown name bounces", func(t *testing.T) {
		s := newScheduler(t)
		target := submit(t, s, &probe{step: untilMessage})
		require.NoError(t, s.Register("target", target.PID()))
		p := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
			if n == 0 {
				out.TellName("target", "by name")
				out.TellName("nobody", "lost")
				return nil
			}
			for _, ev := range evs {
				if ev.Type == sched.EventMessage && ev.Error != nil {
					out.Done(payload.Of(ev))
				}
			}
			return nil
		}}
		h := submit(t, s, p)
		res, err := waitEnd(t, s, target)
		require.NoError(t, err)
		assert.Equal(t, "by name", res.Value())
		res, err = waitEnd(t, s, h)
		require.NoError(t, err)
		ev := res.Value().(sched.Event)
		assert.ErrorIs(t, ev.Error, sched.ErrNameNotFound)
		assert.Equal(t, "lost", ev.Data)
	})
}

// TestNameRegistrationRacingTheEnd: a registration racing its process's
// end either fails or is released by the end; a name never outlives its
// process.
func TestNameRegistrationRacingTheEnd(t *testing.T) {
	s := newScheduler(t)
	for i := range 500 {
		name := fmt.Sprint("n", i)
		h := submit(t, s, &probe{step: untilCancel})
		var wg sync.WaitGroup
		var regErr error
		wg.Go(func() { regErr = s.Register(name, h.PID()) })
		wg.Go(func() { _ = s.Terminate(h.PID()) })
		wg.Wait()
		_, err := waitEnd(t, s, h)
		require.NoError(t, err)
		if regErr != nil {
			require.ErrorIs(t, regErr, sched.ErrProcessNotFound)
		}
		_, err = s.Lookup(name)
		require.ErrorIs(t, err, sched.ErrNameNotFound, "iteration %d: the name outlived its process", i)
	}
	_ = context.Background
}

// TestNameOutlivesOnlyItsHolder: a name released by Unregister and taken
// by another process stays that process's when the first one ends: a
// process's end releases only the names it still holds. Register refuses
// a PID that is no live process of this scheduler: one that has ended,
// or one of another node that has the ID of a live one.
func TestNameOutlivesOnlyItsHolder(t *testing.T) {
	s := newScheduler(t, sched.WithNode(1))
	first := submit(t, s, &probe{step: untilCancel})
	second := submit(t, s, &probe{step: untilMessage})
	require.NoError(t, s.Register("svc", first.PID()))
	require.NoError(t, s.Unregister("svc"))
	require.NoError(t, s.Register("svc", second.PID()))
	require.NoError(t, s.Terminate(first.PID()))
	_, err := waitEnd(t, s, first)
	require.NoError(t, err)
	got, err := s.Lookup("svc")
	require.NoError(t, err, "the name, the second process's, released by the first one's end")
	assert.Equal(t, second.PID(), got)

	err = s.Register("other", first.PID())
	assert.ErrorIs(t, err, sched.ErrProcessNotFound, "an ended process")
	err = s.Register("other", relay.PID{Node: 2, ID: second.PID().ID})
	assert.ErrorIs(t, err, sched.ErrProcessNotFound, "another node's PID with a live process's ID")
	_, err = s.Lookup("other")
	assert.ErrorIs(t, err, sched.ErrNameNotFound, "a refused registration registered the name")

	require.NoError(t, s.TellName("svc", "by name"))
	res, err := waitEnd(t, s, second)
	require.NoError(t, err)
	assert.Equal(t, "by name", res.Value())
	_, err = s.Lookup("svc")
	assert.ErrorIs(t, err, sched.ErrNameNotFound, "released by its holder's end")
}

// incarnation is a child of a supervisor: its first step registers
// "service" for it, and it ends at once: with fail if not nil, with
// Register's error if the name was taken.
func incarnation(s *sched.Scheduler, fail error) sched.Process {
	return stepFunc(func(_ []sched.Event, out *sched.StepOutput) error {
		if err := s.Register("service", out.Self()); err != nil {
			return err
		}
		if fail != nil {
			return fail
		}
		out.Done(payload.Payload{})
		return nil
	})
}

// TestNameFreeForTheNextIncarnation: the name a child registered is free
// by the time the end of the child reaches the parent that awaits it, as
// docs/patterns.md says of a supervisor: a parent that restarts its
// failed child in the step that reads its end finds the name unheld,
// and the next incarnation takes it.
func TestNameFreeForTheNextIncarnation(t *testing.T) {
	s := newScheduler(t)
	failed := testError("failed")
	var lookups []error
	sv := &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		if n == 0 {
			out.SpawnAwait(1, incarnation(s, failed), "run", nil)
			return nil
		}
		ev, ok := completionOf(evs, 1)
		if !ok {
			return nil
		}
		_, err := s.Lookup("service")
		lookups = append(lookups, err)
		if len(lookups) == 1 {
			if !errors.Is(ev.Error, failed) {
				return fmt.Errorf("the first incarnation ended with %v", ev.Error)
			}
			out.SpawnAwait(1, incarnation(s, nil), "run", nil) // at once, with no pause
			return nil
		}
		if ev.Error != nil {
			return ev.Error
		}
		out.Done(payload.Payload{})
		return nil
	}}
	_, err := waitEnd(t, s, submit(t, s, sv))
	require.NoError(t, err, "the next incarnation registered the name")
	require.Len(t, lookups, 2)
	for i, err := range lookups {
		assert.ErrorIs(t, err, sched.ErrNameNotFound, "Lookup at the end of incarnation %d", i)
	}
}

// TestRegisterAgainDuringClose: once a process's final step has
// returned, Register refuses it with ErrProcessNotFound even for a name
// it holds until its Close has returned, as it refuses it for any other
// name: registering a process again under its own name succeeds only
// while the process is alive.
func TestRegisterAgainDuringClose(t *testing.T) {
	s := newScheduler(t)
	closing, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failure below must not leave Close blocked
	h := submit(t, s, &probe{
		step:  untilMessage,
		close: func() { close(closing); <-release },
	})
	require.NoError(t, s.Register("svc", h.PID()))
	require.NoError(t, s.Register("svc", h.PID()), "the same process again, while it is alive")
	require.NoError(t, s.Tell(h.PID(), "end"))
	receive(t, closing, "Close")
	assert.ErrorIs(t, s.Register("svc", h.PID()), sched.ErrProcessNotFound, "its own name, during its Close")
	assert.ErrorIs(t, s.Register("other", h.PID()), sched.ErrProcessNotFound, "another name, during its Close")
	unblock()
	_, err := waitEnd(t, s, h)
	require.NoError(t, err)
	_, err = s.Lookup("svc")
	assert.ErrorIs(t, err, sched.ErrNameNotFound, "released by its end")
}

// TestUnregisterReleasesWhoeverHoldsIt: Unregister goes by the name, not
// by a process: once the name has passed to another process, an
// Unregister meant for the first one releases the second's. A process
// that gives up its own name from its step releases its own, and may take
// it again.
func TestUnregisterReleasesWhoeverHoldsIt(t *testing.T) {
	s := newScheduler(t)
	first := submit(t, s, &probe{step: untilCancel})
	require.NoError(t, s.Register("svc", first.PID()))
	require.NoError(t, s.Terminate(first.PID()))
	_, err := waitEnd(t, s, first)
	require.NoError(t, err)

	lookups := make(chan error, 2)
	second := submit(t, s, &probe{step: func(_ *probe, n int, evs []sched.Event, out *sched.StepOutput) error {
		switch n {
		case 0:
			return s.Register("svc", out.Self())
		case 1: // told "give up"
			if err := s.Unregister("svc"); err != nil {
				return err
			}
			_, err := s.Lookup("svc")
			lookups <- err
			return s.Register("svc", out.Self())
		}
		return untilMessage(nil, n, evs, out)
	}})
	eventually(t, "the second process to register the name", func() bool {
		pid, err := s.Lookup("svc")
		return err == nil && pid == second.PID()
	})
	require.NoError(t, s.Unregister("svc"), "an Unregister late for the first holder")
	_, err = s.Lookup("svc")
	require.ErrorIs(t, err, sched.ErrNameNotFound, "the late Unregister released the second holder's name")

	require.NoError(t, s.Register("svc", second.PID()))
	require.NoError(t, s.Tell(second.PID(), "give up"))
	require.ErrorIs(t, receive(t, lookups, "the second process's Lookup after its own Unregister"), sched.ErrNameNotFound)
	eventually(t, "the second process to take the name again", func() bool {
		pid, err := s.Lookup("svc")
		return err == nil && pid == second.PID()
	})
	require.NoError(t, s.Tell(second.PID(), "end"))
	_, err = waitEnd(t, s, second)
	require.NoError(t, err)
	_, err = s.Lookup("svc")
	require.ErrorIs(t, err, sched.ErrNameNotFound, "released by its holder's end")
}

// TestNameFreeFromItsHoldersEnd: from the return of a process's final
// step, when Register starts refusing it with ErrProcessNotFound, its
// names are free to every call, though its Close is still running and
// its end has not yet released them: Lookup, TellName and Unregister
// find no holder, and another process may take the name. Its end then
// leaves the new holder's name alone. Otherwise a caller told that the
// process had ended could still find it by name afterwards.
func TestNameFreeFromItsHoldersEnd(t *testing.T) {
	s := newScheduler(t)
	closing, release := make(chan struct{}), make(chan struct{})
	var released sync.Once
	unblock := func() { released.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failure below must not leave Close blocked
	first := submit(t, s, &probe{
		step:  untilMessage,
		close: func() { close(closing); <-release },
	})
	second := submit(t, s, &probe{step: untilMessage})
	require.NoError(t, s.Register("svc", first.PID()))
	require.NoError(t, s.Register("spare", first.PID()))
	require.NoError(t, s.Tell(first.PID(), "end"))
	receive(t, closing, "Close")

	require.ErrorIs(t, s.Register("other", first.PID()), sched.ErrProcessNotFound, "the process has ended")
	_, err := s.Lookup("svc")
	assert.ErrorIs(t, err, sched.ErrNameNotFound, "Lookup after Register found the process ended")
	assert.ErrorIs(t, s.TellName("svc", "lost"), sched.ErrNameNotFound, "TellName after its end")
	assert.ErrorIs(t, s.Unregister("spare"), sched.ErrNameNotFound, "Unregister after its end")
	require.NoError(t, s.Register("svc", second.PID()), "the name is free for another process")

	unblock()
	_, err = waitEnd(t, s, first)
	require.NoError(t, err)
	got, err := s.Lookup("svc")
	require.NoError(t, err, "the first process's end released the second's name")
	assert.Equal(t, second.PID(), got)
	_, err = s.Lookup("spare")
	assert.ErrorIs(t, err, sched.ErrNameNotFound)
	require.NoError(t, s.TellName("svc", "by name"))
	res, err := waitEnd(t, s, second)
	require.NoError(t, err)
	assert.Equal(t, "by name", res.Value())
}
