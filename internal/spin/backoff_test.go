package spin

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPhaseOf(t *testing.T) {
	tests := []struct {
		round int
		want  phase
	}{
		{0, phaseTight},
		{TightRounds - 1, phaseTight},
		{TightRounds, phaseYield},
		{ParkRound - 1, phaseYield},
		{ParkRound, phasePark},
		{ParkRound + 100, phasePark},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, phaseOf(tt.round), "phaseOf(%d)", tt.round)
	}
	require.Equal(t, 4, TightRounds, "fewer than 4 tight rounds")
	require.Equal(t, 16, ParkRound, "park from round 16")
}

// spinUntilPark drives b until Spin reports false and checks that every
// round is counted and that the park decision comes exactly at ParkRound.
func spinUntilPark(t *testing.T, b *Backoff) {
	t.Helper()
	for want := b.Rounds(); want < ParkRound; want++ {
		require.Equal(t, want, b.Rounds(), "rounds before Spin")
		require.True(t, b.Spin(), "Spin in round %d must spin, not ask to park", want)
	}
	require.Equal(t, ParkRound, b.Rounds())
	for range 3 {
		require.False(t, b.Spin(), "Spin from round %d on must ask to park", ParkRound)
		require.Equal(t, ParkRound, b.Rounds(), "a Spin that returns false is not a round")
	}
}

func TestBackoff(t *testing.T) {
	tests := []struct {
		name  string
		setup func(b *Backoff)
	}{
		{"zero value", func(*Backoff) {}},
		{"reset after park decision", func(b *Backoff) {
			for b.Spin() {
			}
			b.Reset()
		}},
		{"reset midway through the yield rounds", func(b *Backoff) {
			for b.Rounds() < TightRounds+2 {
				b.Spin()
			}
			b.Reset()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b Backoff
			tt.setup(&b)
			require.Zero(t, b.Rounds(), "a fresh or reset Backoff starts at round 0")
			spinUntilPark(t, &b)
		})
	}
}

// BenchmarkBackoffTightRounds measures the whole tight phase, the time a
// worker busy-waits before its first Gosched.
func BenchmarkBackoffTightRounds(b *testing.B) {
	for b.Loop() {
		var bo Backoff
		for range TightRounds {
			bo.Spin()
		}
	}
}
