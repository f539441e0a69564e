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
