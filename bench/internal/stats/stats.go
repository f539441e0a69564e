// Package stats summarises repeated measurements: median, quartiles and
// range. Benchmarks on a shared machine are noisy and skewed (a run is
// only ever slowed down), so reports use the median as the centre and
// show the spread next to it rather than a mean and standard deviation.
//
// Quantiles interpolate linearly between order statistics (the
// "type 7" rule of R and NumPy), so the median of an even count is the
// mean of the middle two.
package stats

import (
	"math"
	"slices"
)

// Summary describes a sample. The zero Summary (N == 0) describes an
// empty one; its other fields are then NaN-free zeros.
type Summary struct {
	N      int     // number of values
	Min    float64 // smallest value
	Q1     float64 // first quartile
	Median float64 // second quartile
	Q3     float64 // third quartile
	Max    float64 // largest value
}

// Summarize returns the summary of xs; xs is not modified. NaN values
// are ignored.
func Summarize(xs []float64) Summary {
	s := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return Summary{}
	}
	slices.Sort(s)
	return Summary{
		N:      len(s),
		Min:    s[0],
		Q1:     quantile(s, 0.25),
		Median: quantile(s, 0.5),
		Q3:     quantile(s, 0.75),
		Max:    s[len(s)-1],
	}
}

// Median returns the median of xs, 0 for none.
func Median(xs []float64) float64 { return Summarize(xs).Median }

// Quantile returns the q-quantile (0 <= q <= 1) of xs, 0 for none; q is
// clamped to [0, 1], and a NaN q gives NaN.
func Quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	s = slices.DeleteFunc(s, math.IsNaN)
	if len(s) == 0 {
		return 0
	}
	slices.Sort(s)
	return quantile(s, q)
}

// quantile interpolates the q-quantile of the sorted, non-empty s.
// Between two equal values it is that value, so that two equal
// infinities give themselves rather than Inf - Inf, NaN; next to one
// infinity it is that infinity.
func quantile(s []float64, q float64) float64 {
	if math.IsNaN(q) {
		return math.NaN()
	}
	q = min(max(q, 0), 1)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	if lo == hi || s[lo] == s[hi] {
		return s[lo]
	}
	frac := pos - float64(lo)
	a, b := s[lo], s[hi]
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		// An infinite end is the answer (a + (b-a)*frac would be
		// -Inf + Inf); between -Inf and +Inf there is none, NaN.
		return a*(1-frac) + b*frac
	}
	return a + (b-a)*frac
}

// IQR returns the interquartile range, Q3 - Q1.
func (s Summary) IQR() float64 { return s.Q3 - s.Q1 }

// RelSpread returns (Max - Min) / Median: how far apart the fastest and
// slowest runs were, relative to the typical one. It is 0 when the
// median is 0.
func (s Summary) RelSpread() float64 {
	if s.Median == 0 {
		return 0
	}
	return (s.Max - s.Min) / s.Median
}
