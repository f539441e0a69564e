package scheduler

import (
	"context"
	"time"

	"github.com/procsched/scheduler/internal/bridge"
	"github.com/procsched/scheduler/relay"
)

// The bridge to the test kit. Package schedtest runs processes without
// workers, so it must read what a step wrote into its StepOutput, whose
// yields are unexported. Rather than export them, this file fills the
// function variables of internal/bridge, which only schedtest calls. Every
// function here is called by the test kit only, on the goroutine driving
// its simulation; the scheduler itself never calls them.

// init fills the bridge's function variables. Runs once, at program start.
func init() {
	bridge.NewOutput = bridgeNewOutput
	bridge.ResetOutput = func(out any, self relay.PID) { out.(*StepOutput).reset(self) }
	bridge.ReadOutput = bridgeReadOutput
	bridge.Unpack = func(ev any) {
		if e := ev.(*Event); e.packed == 0 {
			e.setData(e.Data)
		}
	}
	bridge.WithSelf = func(parent context.Context, pid relay.PID) context.Context {
		return context.WithValue(parent, selfKey{}, pid)
	}
	bridge.CheckHandler = func(cmd uint32, nilHandler bool) error {
		h := Handler(func(Call) error { return nil })
		if nilHandler {
			h = nil
		}
		return checkHandler(CommandID(cmd), h)
	}
}

// bridgeNewOutput returns a StepOutput whose Sleep and Timeout read now
// and measure from origin. Test kit only.
func bridgeNewOutput(now func() time.Time, origin time.Time) any {
	return &StepOutput{now: now, clock: origin}
}

// bridgeReadOutput copies the step written into out into st. Test kit
// only, after the step returned.
func bridgeReadOutput(out any, st *bridge.Step) {
	o := out.(*StepOutput)
	st.Status = bridge.Status(o.status)
	st.Result = o.result
	st.Read = o.read
	st.Yields = st.Yields[:0]
	for i := range o.yields {
		y := &o.yields[i]
		b := bridge.Yield{Tag: y.tag, Arg: y.arg, Deadline: time.Duration(y.deadline)}
		switch y.kind {
		case yieldGeneric:
			b.Kind, b.Cmd = bridge.KindCommand, uint32(y.cmd)
		case yieldTell:
			b.Kind, b.To = bridge.KindTell, y.to
		case yieldSpawn, yieldSpawnAwait:
			b.Kind = bridge.KindSpawn
			if y.kind == yieldSpawnAwait {
				b.Kind = bridge.KindSpawnAwait
			}
			b.Child, b.Arg, b.Method, b.Input = y.arg, nil, y.method, y.input
		case yieldTimer:
			b.Kind, b.When = bridge.KindSleep, time.Duration(y.when)
		case yieldTellName:
			b.Kind, b.Name = bridge.KindTellName, y.method
		case yieldMonitor:
			b.Kind, b.To = bridge.KindMonitor, y.to
		case yieldRequest:
			b.Kind, b.To = bridge.KindRequest, y.to
		case yieldRequestName:
			b.Kind, b.Name, b.ByName = bridge.KindRequest, y.method, true
		case yieldReply:
			b.Kind, b.To, b.ReplySeq, b.Err = bridge.KindReply, y.to, uint64(y.when), y.err
		case yieldCancel:
			b.Kind = bridge.KindCancel
		case yieldTimeout:
			b.Kind = bridge.KindTimeout
		}
		st.Yields = append(st.Yields, b)
	}
}
