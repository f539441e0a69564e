// Package scheduler runs very many lightweight processes on a few worker
// goroutines.
//
// A process is a state machine, a plain Go value implementing [Process],
// not a goroutine: [Process.Step] is called with the events that woke it
// and answers with yields, commands for the host to carry out (a message,
// a timer, a spawn, or a user command such as an HTTP call). Handlers
// complete yields later, from any goroutine, and the scheduler steps the
// process again. A waiting process costs a couple of hundred bytes, not a
// goroutine stack, and the host keeps control over fairness, cancellation,
// step boundaries and shutdown.
//
// [Scheduler] is related to running a goroutine per unit of work with
// channels between them, but trades the goroutine's blocking style for
// explicit steps, and adds PIDs, per-process mailboxes, completion of
// asynchronous commands by tag, termination, and graceful shutdown.
//
// # Scheduling
//
// Each worker owns a Chase-Lev deque (package deque) that it works LIFO;
// new and woken processes from outside the workers go to a global FIFO
// queue (package globalq). A worker looks at its own queue, then the global
// queue (first, every 61st tick), then steals half of a random victim's
// queue, then spins briefly and parks. See docs/design.md for the
// architecture, the state machine and its invariants.
//
// # Observing it
//
// [Scheduler.Stats] returns cheap counters (per-worker, summed on read);
// [Scheduler.Processes] lists the live processes. Package schedhttp
// (github.com/procsched/scheduler/schedhttp) serves both as a debug page,
// in HTML or JSON, and publishes the counters with expvar; it is a package
// of its own so that this one links no HTTP code and registers no
// handlers. [Hooks] report starts, ends, panics and slow steps;
// [WithLogger] logs the notable ones. See docs/observability.md.
//
// # Concurrency
//
// All methods of [Scheduler], [Handle], [Call] and [Completion] are safe for
// concurrent use. A process's own methods are never called concurrently:
// at most one goroutine runs its Init, Step or Close at any instant.
package scheduler
