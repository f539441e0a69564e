//go:build amd64 || arm64

package prefetch

import "unsafe"

// Lines2 asks for two cache lines: the one that holds a and the one that
// holds b. One call serves the two: a call into assembly costs as much
// again as what it does. It never faults, whatever a and b are, and
// changes nothing a program can observe but its speed. Any goroutine.
//
//go:noescape
func Lines2(a, b unsafe.Pointer)

// Write2 asks for the two cache lines from a (the line that holds a and
// the next) for writing: a line that another core wrote last arrives
// owned by this core, ready for its stores and locked instructions,
// where Lines2's kind of prefetch brings a shared copy and the first
// write would have to ask the other core again. Like Lines2, it never
// faults and changes nothing a program can observe but its speed. Any
// goroutine.
//
//go:noescape
func Write2(a unsafe.Pointer)
