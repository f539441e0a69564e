//go:build !race

package scheduler

// raceEnabled: see race.go.
const raceEnabled = false

// raceSkipNext never bypasses the next slot in a normal build. Owner only.
func raceSkipNext(*worker) bool { return false }

// raceStride walks the victims in order in a normal build. Owner only.
func raceStride(*worker, int) int { return 1 }
