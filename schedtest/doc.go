// Package schedtest is a test kit for processes written for package
// scheduler: it runs them deterministically in the test's goroutine, on a
// virtual clock, with fakes for user commands, probes for messages, and
// seeded exploration of interleavings that replays by seed.
//
// [Sim] is related to [scheduler.Scheduler] as a recorded script is to a
// live performance: the same [scheduler.Process] values run with the same
// semantics (mailboxes with per-sender FIFO, events batched per step,
// yields completed exactly once by tag, duplicate tags, Cancel, Timeout,
// Sleep, bounces, names, monitors, request and reply, spawns, Terminate,
// Shutdown, Close exactly once, panics turned into errors, the same
// errors, process contexts with the values given at the start
// ([Sim.StartContext]) and passed on to children), but nothing happens
// until the test says so. The test steps one process ([Sim.Step]), runs
// until nothing is ready ([Sim.RunUntilIdle], [Sim.RunUntil]), and moves
// the clock ([Sim.Advance], [Sim.RunUntilIdleAdvancing]); a one-hour
// timeout passes in microseconds. No timer or wall clock is used, and the
// only goroutines the kit starts are the one [Explore] runs each seed in
// and the ones that run the functions given to context.AfterFunc on a
// call's context, as context.AfterFunc does; so the kit also runs inside
// testing/synctest.
//
// # The model
//
// A step is atomic: the kit drains the process's mailbox, calls Step, and
// then carries out the step's yields in the order written, as a worker
// does. Without a seed, ready processes step in the order they became
// ready and a step's yields are carried out at once. With [WithSeed], each
// scheduling decision is drawn from a random source: which ready process
// steps next, which process's next yield is carried out (so the messages
// and completions of different processes interleave one yield at a time),
// and when a due timer fires. A process's own yields are always carried
// out in order and before it steps again, so per-sender FIFO and the
// causal order the scheduler guarantees hold under every seed; what
// changes is only what the scheduler leaves open. [Explore] runs a
// scenario under many seeds and reports the first that fails, with the
// command that replays it; [Faults] add failures drawn from the same
// seed.
//
// User commands go to fakes ([Sim.Fake], [Reply], [Fail], [Never],
// [Sim.FakeLater]); a fake's [Call.Context] is a handler's call context,
// with the yield's deadline on the virtual clock. Every yield a process
// made is listed by [Sim.Yields]. A [Probe] is a PID whose messages the
// test asserts on.
//
// The kit shares the scheduler's definitions (Process, StepOutput, Event,
// Exit, Request, the sentinel errors) and reads a step's output through
// an internal bridge; it re-implements the scheduling itself. A
// conformance suite in this package runs the same scenarios on both and
// checks that the processes observe the same events and results.
//
// # Concurrency
//
// A Sim is driven from one goroutine at a time. The methods that act as
// code outside any process acts on a scheduler ([Sim.Send],
// [Sim.Reply], [Sim.Terminate], [Sim.TerminateAtStep], [Sim.Register],
// [Sim.Unregister], [Sim.Lookup], [Probe.Send], [Token.Complete] and
// [Call.Complete]), the [Held] methods and the accessors (Now, Result,
// Ended, Steps, Unread, Yields, Injected, Trace, [Probe.Received]) may
// be called from any goroutine, and from a step, a fake, an Init or a
// Close, where they take effect at once; the Run methods, Step, Advance
// and Shutdown may not be called from a step, a fake, or a process's
// Init or Close: such a call fails the test.
//
// Unlike a worker, the kit runs a process's methods on the goroutine
// that drives it, most often the test's: a runtime.Goexit there (from
// t.FailNow or t.Fatal, say) ends that goroutine, which for the test's
// own is the testing package's meaning of FailNow. The Sim is left
// unlocked, with the process neither ready nor ended, so cleanups and
// other goroutines that use it do not hang. To fail a test from inside
// a process, call t.Error and return an error.
package schedtest
