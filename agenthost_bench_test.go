package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// BenchmarkAgentHost is the shape of an agent host: many sessions, each
// of which, for every user message, calls a slow service with a timeout,
// answers, and waits for the user's next message. One call in ten is
// slower than the timeout. The service completes each call from a runtime
// timer, as a client library's callback would; the user's think time
// between messages is a timer of the session's own, so that sessions are
// not in step with each other.
//
// Two ways to write the session are measured side by side:
//
//   - twoTags: the fetch on one tag and a Sleep on another as its
//     timeout; whichever completes second wakes the session for nothing
//     (the session has to remember to ignore it).
//   - timeout: the fetch with StepOutput.Timeout on its own tag: one
//     completion, and the timer is released when the fetch wins.
//
// It reports steps per session, the figure the second shape improves: a
// session of ahRounds rounds needs 2 per round (the answer, the user's
// next message). The two-tag shape's leftover completions cost a step
// when they arrive while the session waits for its user; when the
// machine is overloaded they arrive together with other events and
// cost no step of their own, but still an event each.
func BenchmarkAgentHost(b *testing.B) {
	sessions := 100_000
	if testing.Short() {
		sessions = 10_000
	}
	for _, shape := range []string{"twoTags", "timeout"} {
		b.Run(fmt.Sprintf("sessions=%d/shape=%s", sessions, shape), func(b *testing.B) {
			benchAgentHost(b, sessions, shape)
		})
	}
}

// Agent-host figures: the fetch's usual and slow latencies and the
// timeout between them, the user's think time, and the rounds (user
// messages) per session.
const (
	ahFast    = 2 * time.Millisecond
	ahSlow    = 60 * time.Millisecond
	ahTimeout = 30 * time.Millisecond
	ahThink   = 5 * time.Millisecond
	ahRounds  = 6
	ahFetch   = sched.FirstUserCommand + 30
)

// ahFetchHandler is the slow service: it answers after ahFast, or ahSlow
// for one call in ten.
func ahFetchHandler(c sched.Call) error {
	d := ahFast
	if c.Arg.(int)%10 == 0 {
		d = ahSlow
	}
	done := c.Completion()
	time.AfterFunc(d, func() { _ = done.Complete("answer", nil) })
	return nil
}

// ahThinkTime is a user's pause before the next message, spread so that
// sessions drift apart.
func ahThinkTime(id, round int) time.Duration {
	return ahThink + time.Duration((id*7+round*13)%10)*time.Millisecond/2
}

func benchAgentHost(b *testing.B, sessions int, shape string) {
	b.ReportAllocs()
	var steps, n float64
	for b.Loop() {
		s, err := sched.New(sched.WithHandler(ahFetch, ahFetchHandler))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		hs := make([]sched.Handle, sessions)
		for i := range hs {
			var p sched.Process = &ahTwoTags{id: i}
			if shape == "timeout" {
				p = &ahTimeoutSession{id: i}
			}
			if hs[i], err = s.Submit(ctx, p, "session", nil); err != nil {
				b.Fatal(err)
			}
		}
		for _, h := range hs {
			if _, err := h.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		steps += float64(s.Stats().Steps)
		n += float64(sessions)
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		if err := s.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
		cancel()
	}
	b.ReportMetric(steps/n, "steps/session")
}

// Tags of the agent-host sessions: the user's next message, and the
// fetch. The two-tag shape gives each round's fetch and timer tags of
// their own (ahTagRound + 2*round and the one after it), as it must: the
// loser of one round is still outstanding when the next round starts.
const (
	ahTagThink = 1
	ahTagFetch = 2
	ahTagRound = 16
)

// ahTwoTags is a session that bounds its fetch with a second timer.
type ahTwoTags struct {
	stepOnly
	id, round int
	fetching  bool
}

func (a *ahTwoTags) Step(events []sched.Event, out *sched.StepOutput) error {
	if len(events) == 0 {
		a.fetch(out) // the first message
	}
	for _, ev := range events {
		switch {
		case ev.Tag == ahTagThink:
			a.fetch(out)
		case a.fetching && ev.Tag >= ahTagRound+2*uint64(a.round):
			// This round's answer or timer, whichever came first: the
			// round is over. The other one still comes, later, for
			// nothing, as do the losers of earlier rounds.
			a.fetching = false
			if a.round == ahRounds {
				out.Done(payload.Payload{})
				return nil
			}
			out.Sleep(ahTagThink, ahThinkTime(a.id, a.round))
		}
	}
	return nil
}

func (a *ahTwoTags) fetch(out *sched.StepOutput) {
	a.round++
	a.fetching = true
	tag := ahTagRound + 2*uint64(a.round)
	out.Yield(tag, ahFetch, a.id+a.round)
	out.Sleep(tag+1, ahTimeout)
}

// ahTimeoutSession is a session that bounds its fetch with Timeout.
type ahTimeoutSession struct {
	stepOnly
	id, round int
}

func (a *ahTimeoutSession) Step(events []sched.Event, out *sched.StepOutput) error {
	if len(events) == 0 {
		a.fetch(out)
	}
	for _, ev := range events {
		switch ev.Tag {
		case ahTagThink:
			a.fetch(out)
		case ahTagFetch: // the answer, or ErrTimeout
			if a.round == ahRounds {
				out.Done(payload.Payload{})
				return nil
			}
			out.Sleep(ahTagThink, ahThinkTime(a.id, a.round))
		}
	}
	return nil
}

func (a *ahTimeoutSession) fetch(out *sched.StepOutput) {
	a.round++
	out.Yield(ahTagFetch, ahFetch, a.id+a.round)
	out.Timeout(ahTagFetch, ahTimeout)
}
