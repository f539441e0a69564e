// Package prefetch asks the processor to start loading a cache line that
// the caller will read or write soon, without waiting for it.
//
// A plain load cannot do this: a load that misses every cache holds up
// the instructions behind it once the processor's window of pending
// instructions is full, a few hundred instructions later, and a line held
// by another core's cache takes longer than that to arrive. A prefetch
// instruction completes at once and the line arrives meanwhile. On
// architectures without the assembly here, [Lines2] and [Write2] do
// nothing.
package prefetch
