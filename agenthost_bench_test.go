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
// session of agentRounds rounds needs 2 per round (the answer, the user's
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
	agentFast    = 2 * time.Millisecond
	agentSlow    = 60 * time.Millisecond
	agentTimeout = 30 * time.Millisecond
	agentThink   = 5 * time.Millisecond
	agentRounds  = 6
	agentFetch   = sched.FirstUserCommand + 30
)

// agentFetchHandler is the slow service: it answers after agentFast, or agentSlow
// for one call in ten.
func agentFetchHandler(c sched.Call) error {
	d := agentFast
	if c.Arg.(int)%10 == 0 {
		d = agentSlow
	}
	done := c.Completion()
	time.AfterFunc(d, func() { _ = done.Complete("answer", nil) })
	return nil
}

// agentThinkTime is a user's pause before the next message, spread so that
// sessions drift apart.
func agentThinkTime(id, round int) time.Duration {
	return agentThink + time.Duration((id*7+round*13)%10)*time.Millisecond/2
}

func benchAgentHost(b *testing.B, sessions int, shape string) {
	b.ReportAllocs()
	var steps, n float64
	for b.Loop() {
		s, err := sched.New(sched.WithHandler(agentFetch, agentFetchHandler))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		hs := make([]sched.Handle, sessions)
		for i := range hs {
			var p sched.Process = &agentTwoTags{id: i}
			if shape == "timeout" {
				p = &agentTimeoutSession{id: i}
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
// their own (agentTagRound + 2*round and the one after it), as it must: the
// loser of one round is still outstanding when the next round starts.
const (
	agentTagThink = 1
	agentTagFetch = 2
	agentTagRound = 16
)

// agentTwoTags is a session that bounds its fetch with a second timer.
type agentTwoTags struct {
	stepOnly
	id, round int
	fetching  bool
}

func (a *agentTwoTags) Step(events []sched.Event, out *sched.StepOutput) error {
	if len(events) == 0 {
		a.fetch(out) // the first message
	}
	for _, ev := range events {
		switch {
		case ev.Tag == agentTagThink:
			a.fetch(out)
		case a.fetching && ev.Tag >= agentTagRound+2*uint64(a.round):
			// This round's answer or timer, whichever came first: the
			// round is over. The other one still comes, later, for
			// nothing, as do the losers of earlier rounds.
			a.fetching = false
			if a.round == agentRounds {
				out.Done(payload.Payload{})
				return nil
			}
			out.Sleep(agentTagThink, agentThinkTime(a.id, a.round))
		}
	}
	return nil
}

func (a *agentTwoTags) fetch(out *sched.StepOutput) {
	a.round++
	a.fetching = true
	tag := agentTagRound + 2*uint64(a.round)
	out.Yield(tag, agentFetch, a.id+a.round)
	out.Sleep(tag+1, agentTimeout)
}

// agentTimeoutSession is a session that bounds its fetch with Timeout.
type agentTimeoutSession struct {
	stepOnly
	id, round int
}

func (a *agentTimeoutSession) Step(events []sched.Event, out *sched.StepOutput) error {
	if len(events) == 0 {
		a.fetch(out)
	}
	for _, ev := range events {
		switch ev.Tag {
		case agentTagThink:
			a.fetch(out)
		case agentTagFetch: // the answer, or ErrTimeout
			if a.round == agentRounds {
				out.Done(payload.Payload{})
				return nil
			}
			out.Sleep(agentTagThink, agentThinkTime(a.id, a.round))
		}
	}
	return nil
}

func (a *agentTimeoutSession) fetch(out *sched.StepOutput) {
	a.round++
	out.Yield(agentTagFetch, agentFetch, a.id+a.round)
	out.Timeout(agentTagFetch, agentTimeout)
}
