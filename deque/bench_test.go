package deque

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// BenchmarkPushPop measures one PushBottom+PopBottom pair by the owner.
func BenchmarkPushPop(b *testing.B) {
	d := New[int](64)
	v := 1
	for b.Loop() {
		d.PushBottom(&v)
		d.PopBottom()
	}
}

// BenchmarkPushTenPop measures pushing ten items, one PushBottom each or
// in one PushBottomN, and popping them, per item.
func BenchmarkPushTenPop(b *testing.B) {
	v := 1
	xs := make([]*int, 10)
	for i := range xs {
		xs[i] = &v
	}
	for _, batch := range []bool{false, true} {
		name := "one-by-one"
		if batch {
			name = "PushBottomN"
		}
		b.Run(name, func(b *testing.B) {
			d := New[int](64)
			for b.Loop() {
				if batch {
					d.PushBottomN(xs)
				} else {
					for _, x := range xs {
						d.PushBottom(x)
					}
				}
				for range xs {
					d.PopBottom()
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(xs)), "ns/item")
		})
	}
}

// BenchmarkSteal measures an uncontended Steal from a full deque.
func BenchmarkSteal(b *testing.B) {
	v := 1
	d := New[int](1024)
	b.ResetTimer()
	for i := 0; i < b.N; {
		b.StopTimer()
		for range 1024 {
			d.PushBottom(&v)
		}
		b.StartTimer()
		for j := 0; j < 1024 && i < b.N; j, i = j+1, i+1 {
			d.Steal()
		}
	}
}

// BenchmarkStealHalfContended measures the cost per item moved when thieves
// steal halves from a deque the owner keeps refilling and popping. It
// reports ns/item (wall time per item that changed hands).
func BenchmarkStealHalfContended(b *testing.B) {
	for _, thieves := range []int{1, 2, 4} {
		b.Run("thieves="+itoa(thieves), func(b *testing.B) {
			v := 1
			victim := New[int](1024)
			var stop atomic.Bool
			var moved atomic.Int64
			var wg sync.WaitGroup
			for range thieves {
				wg.Add(1)
				go func() {
					defer wg.Done()
					own := New[int](1024)
					for !stop.Load() {
						if n := victim.StealHalfInto(own); n > 0 {
							moved.Add(int64(n))
							for own.PopBottom() != nil {
							}
						} else {
							runtime.Gosched()
						}
					}
				}()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				victim.PushBottom(&v)
				if i%4 == 0 {
					victim.PopBottom()
				}
			}
			b.StopTimer()
			stop.Store(true)
			wg.Wait()
			if n := moved.Load(); n > 0 {
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/item")
			}
		})
	}
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}
