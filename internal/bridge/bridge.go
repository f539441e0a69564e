// Package bridge lets the test kit (package schedtest) read what a step
// wrote into a scheduler.StepOutput without widening the scheduler's
// public API. It holds plain data types and function variables; the
// scheduler package fills the variables in its init, and only the test kit
// calls them. No other package may depend on it.
package bridge

import (
	"context"
	"time"

	"github.com/procsched/scheduler/payload"
	"github.com/procsched/scheduler/relay"
)

// Kind says which StepOutput method wrote a [Yield].
type Kind uint8

// The yield kinds, one per StepOutput method that writes a yield.
const (
	KindCommand    Kind = iota + 1 // Yield: a user command
	KindTell                       // Tell
	KindSpawn                      // Spawn
	KindSpawnAwait                 // SpawnAwait
	KindSleep                      // Sleep, SleepUntil
	KindTellName                   // TellName
	KindMonitor                    // Monitor
	KindRequest                    // Request, RequestName
	KindReply                      // Reply
	KindCancel                     // Cancel
	KindTimeout                    // Timeout of a yield written in an earlier step
)

// Yield is one yield of a step, copied out of the StepOutput.
type Yield struct {
	Kind Kind
	Tag  uint64
	Cmd  uint32    // KindCommand: the command ID
	Arg  any       // the command's argument, the message, the request body, the reply's data
	To   relay.PID // Tell, Monitor, Request: the other process; Reply: the asker
	Name string    // TellName, RequestName: the name
	// ByName: a RequestName, whose replier is the process named Name
	// (which may be empty), not To.
	ByName bool

	Child  any              // Spawn, SpawnAwait: the child Process (nil for a nil Process)
	Method string           // Spawn, SpawnAwait: the entry point
	Input  payload.Payloads // Spawn, SpawnAwait: the input

	// When is a Sleep's deadline, as time since the clock origin the
	// output was made with (see NewOutput).
	When time.Duration
	// Deadline, if not 0, is when the yield completes with the timeout
	// error unless it completed before, on the same clock as When.
	Deadline time.Duration

	ReplySeq uint64 // Reply: the asking yield's sequence number
	Err      error  // Reply: the error answered
}

// Status is what a step asked for.
type Status uint8

// The step statuses.
const (
	StatusWait     Status = iota // wait for events (the default)
	StatusContinue               // step again even with no events
	StatusDone                   // the process has finished
)

// Step is what one step wrote: its status, result, how much of its batch
// it read (with StatusDone; -1 for all), and its yields in order.
type Step struct {
	Status Status
	Result payload.Payload
	Read   int
	Yields []Yield
}

// The functions the scheduler package provides. They are set before any
// test code runs (in the scheduler package's init) and never change.
var (
	// NewOutput returns a fresh *scheduler.StepOutput (as any, since this
	// package cannot name the type) whose Sleep and Timeout read the clock
	// now and measure deadlines from origin.
	NewOutput func(now func() time.Time, origin time.Time) any
	// ResetOutput prepares out, made by NewOutput, for a step of self.
	ResetOutput func(out any, self relay.PID)
	// ReadOutput copies what the step wrote into out into st, reusing
	// st.Yields.
	ReadOutput func(out any, st *Step)
	// Unpack makes ev (a *scheduler.Event) carry its data as the
	// scheduler delivers it: a payload in Data is unpacked, its value in
	// Data and its format kept for Event.Result.
	Unpack func(ev any)
	// WithSelf returns a context that carries the values of parent and
	// answers scheduler.Self with pid.
	WithSelf func(parent context.Context, pid relay.PID) context.Context
	// CheckHandler returns the error Scheduler.SetHandler refuses a
	// handler for cmd with (nilHandler: a nil one), or nil.
	CheckHandler func(cmd uint32, nilHandler bool) error
)
