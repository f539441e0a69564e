package scheduler_test

import (
	"context"
	"testing"

	sched "github.com/procsched/scheduler"
	"github.com/procsched/scheduler/payload"
)

// nameSink reads its messages and ends when asked to: the receiver of
// the names benchmarks.
type nameSink struct{ _ int }

func (*nameSink) Init(context.Context, string, payload.Payloads) error { return nil }
func (*nameSink) Close()                                               {}

func (*nameSink) Step(evs []sched.Event, out *sched.StepOutput) error {
	for _, ev := range evs {
		if ev.Type == sched.EventCancel {
			out.Done(payload.Payload{})
		}
	}
	return nil
}

// benchNamed starts a nameSink registered under "sink" on a new
// scheduler.
func benchNamed(b *testing.B) *sched.Scheduler {
	s := newScheduler(b)
	h, err := s.Submit(context.Background(), &nameSink{}, "run", nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Register("sink", h.PID()); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkLookup: Lookup of a name held by a live process, from as many
// goroutines as GOMAXPROCS at once: the read side of the registry.
func BenchmarkLookup(b *testing.B) {
	s := benchNamed(b)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Lookup("sink"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkTellName: TellName from outside any process to a process that
// reads what it gets, one caller.
func BenchmarkTellName(b *testing.B) {
	s := benchNamed(b)
	for b.Loop() {
		if err := s.TellName("sink", 1); err != nil {
			b.Fatal(err)
		}
	}
}
