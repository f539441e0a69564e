//go:build !race

package scheduler

// raceEnabled: see race.go.
const raceEnabled = false

func raceSkipNext(*worker) bool { return false }

func raceStride(*worker, int) int { return 1 }
