package schedtest

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/procsched/scheduler"
	"github.com/procsched/scheduler/relay"
)

// Probe is a PID of the simulation that is not a process: the messages
// sent to it are kept for the test to assert on. A request sent to it is
// kept too (its Data is a [scheduler.Request]); answer it with
// [Sim.Reply]. A probe never ends: a Monitor of it waits until its
// deadline or a Cancel. Create one with [Sim.Probe].
type Probe struct {
	s        *Sim
	pid      relay.PID
	received []scheduler.Event // guarded by s.mu
	next     int               // the first message not yet expected
}

// Probe returns a new probe.
func (s *Sim) Probe() *Probe {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	p := &Probe{s: s, pid: relay.PID{ID: s.nextID}}
	s.probes[p.pid] = p
	return p
}

// PID returns the probe's PID.
func (p *Probe) PID() relay.PID { return p.pid }

// Send sends msg to the process to with the probe as its sender, so that
// what the process sends back comes to the probe.
func (p *Probe) Send(to relay.PID, msg any) error {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return p.s.deliver(p.pid, to, msg)
}

// Received returns every message the probe has received, in order.
func (p *Probe) Received() []scheduler.Event {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	return append([]scheduler.Event(nil), p.received...)
}

// Expect runs the simulation until idle (unless it is running already),
// then checks that the probe's next message not yet expected carries
// want (compared with reflect.DeepEqual; for a request, its Body is
// compared). It returns that message; on a mismatch, or with no message
// left, it reports the failure with everything the probe received.
func (p *Probe) Expect(want any) scheduler.Event {
	p.s.tb.Helper()
	return p.ExpectFunc(fmt.Sprintf("%#v", want), func(ev scheduler.Event) bool {
		if req, ok := ev.Data.(scheduler.Request); ok {
			if _, wantReq := want.(scheduler.Request); !wantReq {
				return reflect.DeepEqual(req.Body, want)
			}
		}
		return reflect.DeepEqual(ev.Data, want)
	})
}

// ExpectFunc is [Probe.Expect] with a match function of the test's own;
// what describes the expected message in the failure report.
func (p *Probe) ExpectFunc(what string, match func(scheduler.Event) bool) scheduler.Event {
	p.s.tb.Helper()
	p.settle()
	s := p.s
	s.mu.Lock()
	if p.next >= len(p.received) {
		report := p.report()
		s.mu.Unlock()
		s.tb.Errorf("schedtest: probe %v: want a message %s, got none\n%s", p.pid, what, report)
		return scheduler.Event{}
	}
	ev := p.received[p.next]
	p.next++
	s.mu.Unlock()
	if !match(ev) {
		s.mu.Lock()
		report := p.report()
		s.mu.Unlock()
		s.tb.Errorf("schedtest: probe %v: want a message %s, got %v\n%s", p.pid, what, ev, report)
	}
	return ev
}

// ExpectNone runs the simulation until idle (unless it is running
// already) and checks that no message arrived since the last one
// expected.
func (p *Probe) ExpectNone() {
	p.s.tb.Helper()
	p.settle()
	s := p.s
	s.mu.Lock()
	if p.next < len(p.received) {
		report := p.report()
		extra := len(p.received) - p.next
		s.mu.Unlock()
		s.tb.Errorf("schedtest: probe %v: want no message, got %d more\n%s", p.pid, extra, report)
		return
	}
	s.mu.Unlock()
}

// settle runs the simulation until idle unless it runs already.
func (p *Probe) settle() {
	p.s.mu.Lock()
	driving := p.s.driving
	p.s.mu.Unlock()
	if !driving {
		p.s.RunUntilIdle()
	}
}

// report lists what the probe received, marking the expected ones.
// Called with s.mu held.
func (p *Probe) report() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  the probe received %d messages:", len(p.received))
	for i, ev := range p.received {
		mark := "  "
		if i < p.next {
			mark = "ok"
		}
		fmt.Fprintf(&b, "\n  %s %d: %v", mark, i+1, ev)
	}
	return b.String()
}
