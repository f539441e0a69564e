//go:build !amd64 && !arm64

package prefetch

import "unsafe"

// Lines2 does nothing on this architecture, which has no assembly for
// it. Any goroutine.
func Lines2(a, b unsafe.Pointer) {}

// Write2 does nothing on this architecture, which has no assembly for
// it. Any goroutine.
func Write2(a unsafe.Pointer) {}
