package stats

import (
	"math"
	"testing"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, Min: 7, Q1: 7, Median: 7, Q3: 7, Max: 7}},
		{"two", []float64{4, 2}, Summary{N: 2, Min: 2, Q1: 2.5, Median: 3, Q3: 3.5, Max: 4}},
		{"odd unsorted", []float64{5, 1, 3}, Summary{N: 3, Min: 1, Q1: 2, Median: 3, Q3: 4, Max: 5}},
		{"even", []float64{1, 2, 3, 4}, Summary{N: 4, Min: 1, Q1: 1.75, Median: 2.5, Q3: 3.25, Max: 4}},
		{"five", []float64{10, 20, 30, 40, 1000}, Summary{N: 5, Min: 10, Q1: 20, Median: 30, Q3: 40, Max: 1000}},
		{"NaN ignored", []float64{math.NaN(), 2, 1}, Summary{N: 2, Min: 1, Q1: 1.25, Median: 1.5, Q3: 1.75, Max: 2}},
		{"all NaN", []float64{math.NaN()}, Summary{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.in); got != tt.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestSummarizeDoesNotModifyInput(t *testing.T) {
	in := []float64{3, 1, 2}
	Summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("input changed to %v", in)
	}
}

func TestMedianAndQuantile(t *testing.T) {
	xs := []float64{9, 1, 5, 3, 7}
	if got := Median(xs); got != 5 {
		t.Errorf("Median = %v, want 5", got)
	}
	for _, tt := range []struct{ q, want float64 }{
		{-1, 1}, {0, 1}, {0.25, 3}, {0.5, 5}, {0.9, 8.2}, {1, 9}, {2, 9},
	} {
		if got := Quantile(xs, tt.q); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
	if got := Quantile(nil, 0.5); got != 0 {
		t.Errorf("Quantile(nil) = %v, want 0", got)
	}
	if got := Median(nil); got != 0 {
		t.Errorf("Median(nil) = %v, want 0", got)
	}
}

func TestSpread(t *testing.T) {
	s := Summarize([]float64{8, 10, 12, 14})
	if got, want := s.IQR(), 12.5-9.5; got != want {
		t.Errorf("IQR = %v, want %v", got, want)
	}
	if got, want := s.RelSpread(), 6.0/11; math.Abs(got-want) > 1e-12 {
		t.Errorf("RelSpread = %v, want %v", got, want)
	}
	if got := (Summary{}).RelSpread(); got != 0 {
		t.Errorf("RelSpread of empty = %v, want 0", got)
	}
}

// TestSummarizeTiesAndInfinities: quantiles between equal values are
// that value, infinite ones included (interpolating between two +Inf
// would give Inf - Inf, NaN), and ties elsewhere interpolate as usual.
func TestSummarizeTiesAndInfinities(t *testing.T) {
	inf := math.Inf(1)
	for _, tt := range []struct {
		name string
		in   []float64
		want Summary
	}{
		{"ties", []float64{3, 3, 1, 3}, Summary{N: 4, Min: 1, Q1: 2.5, Median: 3, Q3: 3, Max: 3}},
		{"all equal, even", []float64{5, 5}, Summary{N: 2, Min: 5, Q1: 5, Median: 5, Q3: 5, Max: 5}},
		{"tied +Inf", []float64{1, inf, inf, inf}, Summary{N: 4, Min: 1, Q1: inf, Median: inf, Q3: inf, Max: inf}},
		{"tied -Inf", []float64{-inf, -inf, -inf, 2}, Summary{N: 4, Min: -inf, Q1: -inf, Median: -inf, Q3: -inf, Max: 2}},
		{"one +Inf", []float64{1, 2, inf}, Summary{N: 3, Min: 1, Q1: 1.5, Median: 2, Q3: inf, Max: inf}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.in); got != tt.want {
				t.Errorf("Summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestQuantileOfNaN: q is clamped to [0, 1]; a NaN q, which no clamp
// places, gives NaN rather than an index out of range.
func TestQuantileOfNaN(t *testing.T) {
	if got := Quantile([]float64{1, 2, 3}, math.NaN()); !math.IsNaN(got) {
		t.Errorf("Quantile(q = NaN) = %v, want NaN", got)
	}
}
