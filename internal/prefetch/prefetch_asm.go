//go:build amd64 || arm64

package prefetch

import "unsafe"

// Lines3 asks for three cache lines: the one that holds a, the one that
// holds b, and the line after b's (the second line of a value that spans
// two). One call serves the three: a call into assembly costs as much
// again as what it does. It never faults, whatever a and b are, and
// changes nothing a program can observe but its speed. Any goroutine.
//
//go:noescape
func Lines3(a, b unsafe.Pointer)

// Write2 asks for the two cache lines from a (the line that holds a and
// the next) for writing: a line that another core wrote last arrives
// owned by this core, ready for its stores and locked instructions,
// where Lines3's kind of prefetch brings a shared copy and the first
// write would have to ask the other core again. Like Lines3, it never
// faults and changes nothing a program can observe but its speed. Any
// goroutine.
//
//go:noescape
func Write2(a unsafe.Pointer)
