//go:build race

package scheduler

// raceEnabled: this build runs under the race detector. The scheduler then
// randomises choices that are otherwise deterministic (victim order, use
// of the next slot), so that tests passing under -race cannot depend on
// one interleaving, as the Go runtime does in its race builds.
const raceEnabled = true

// raceSkipNext reports, at random, that the next slot should be bypassed.
// Owner only.
func raceSkipNext(w *worker) bool { return w.random()%4 == 0 }

// raceStride returns a random stride coprime with n for walking the
// victims in a different order each time.
// Owner only.
func raceStride(w *worker, n int) int {
	for {
		s := 1 + int(w.random()%uint64(n))
		if gcd(s, n) == 1 {
			return s
		}
	}
}

// gcd returns the greatest common divisor of a and b. Any goroutine.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
