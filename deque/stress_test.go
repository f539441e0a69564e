package deque

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stressConfig is one owner/thieves run of TestStressExactlyOnce.
type stressConfig struct {
	seed      uint64
	thieves   int
	items     int
	stealHalf bool // thieves mix StealHalfInto with Steal
}

// runStress pushes cfg.items distinct items through one owner deque that
// starts at capacity 2 while the owner pops and thieves steal, and checks
// that every item is taken exactly once. Each thief owns a deque of its own
// into which it steals halves, pops from it, and is itself a victim for
// the other thieves, so every deque has concurrent owner pops and steals.
func runStress(t *testing.T, cfg stressConfig) {
	seen := make([]atomic.Int32, cfg.items)
	var taken atomic.Int64
	var dup atomic.Int64
	take := func(x *int) {
		if seen[*x].Add(1) != 1 {
			dup.Add(1)
		}
		taken.Add(1)
	}

	owner := New[int](2)
	own := make([]*Deque[int], cfg.thieves)
	for i := range own {
		own[i] = New[int](2)
	}
	items := make([]int, cfg.items)
	for i := range items {
		items[i] = i
	}
	total := int64(cfg.items)
	done := func() bool { return taken.Load() >= total }

	var wg sync.WaitGroup
	for i := range cfg.thieves {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.seed, uint64(i)+1))
			mine := own[i]
			for !done() {
				victim := owner
				if cfg.thieves > 1 && rng.UintN(4) == 0 {
					victim = own[rng.IntN(cfg.thieves)]
				}
				switch {
				case victim == mine:
				case cfg.stealHalf && rng.UintN(2) == 0:
					victim.StealHalfInto(mine)
				default:
					if x := victim.Steal(); x != nil {
						take(x)
					}
				}
				// Keep some stolen items around so others can steal them.
				for mine.Len() > int(rng.UintN(8)) {
					if x := mine.PopBottom(); x != nil {
						take(x)
					}
				}
				if rng.UintN(16) == 0 {
					runtime.Gosched()
				}
			}
		}()
	}

	rng := rand.New(rand.NewPCG(cfg.seed, 0))
	next := 0
	burst := make([]*int, 64)
	for next < len(items) {
		// Push a burst, then pop some: the deque grows and shrinks. Half
		// the rounds keep it at one or two items, so the owner keeps racing
		// the thieves for the last item.
		pushes, pops := 1+rng.IntN(2), rng.IntN(3)
		if rng.UintN(2) == 0 {
			pushes, pops = rng.IntN(64), rng.IntN(48)
		}
		if rng.UintN(4) == 0 {
			// The same burst in one PushBottomN.
			n := min(pushes, len(items)-next)
			for i := range n {
				burst[i] = &items[next+i]
			}
			owner.PushBottomN(burst[:n])
			next += n
		} else {
			for n := pushes; n > 0 && next < len(items); n-- {
				owner.PushBottom(&items[next])
				next++
			}
		}
		for n := pops; n > 0; n-- {
			if x := owner.PopBottom(); x != nil {
				take(x)
			}
		}
	}
	for !done() {
		if x := owner.PopBottom(); x != nil {
			take(x)
			continue
		}
		if watchdogExpired(t, cfg, &taken) {
			break
		}
		runtime.Gosched()
	}
	wg.Wait()

	require.Zerof(t, dup.Load(), "%+v: items taken more than once", cfg)
	var missing []int
	for i := range seen {
		if seen[i].Load() == 0 {
			missing = append(missing, i)
		}
	}
	require.Emptyf(t, missing, "%+v: items never taken", cfg)
	require.Equal(t, total, taken.Load())
}

// watchdogStart is per-run state of watchdogExpired.
var watchdogStart sync.Map // *testing.T -> time.Time

// watchdogExpired reports, after a generous deadline without completion,
// that the run lost items (the thieves would otherwise spin forever) and
// releases the thieves by marking everything taken.
func watchdogExpired(t *testing.T, cfg stressConfig, taken *atomic.Int64) bool {
	start, _ := watchdogStart.LoadOrStore(t, time.Now())
	if time.Since(start.(time.Time)) < 2*time.Minute {
		return false
	}
	t.Errorf("%+v: no progress: %d of %d items taken", cfg, taken.Load(), cfg.items)
	taken.Store(int64(cfg.items))
	return true
}

func TestStressExactlyOnce(t *testing.T) {
	// Under `make stress` (stressScale 20) both grow, by 5x each:
	// 750,000 items per run and ten seeds, 80 runs, about two and a half
	// minutes with -race on 2 cores.
	items := 150_000 * max(stressScale/4, 1)
	seeds := uint64(2 * max(stressScale/4, 1))
	for thieves := 1; thieves <= 4; thieves++ {
		for _, half := range []bool{false, true} {
			for seed := range seeds {
				cfg := stressConfig{seed: seed, thieves: thieves, items: items, stealHalf: half}
				t.Run(fmt.Sprintf("thieves=%d/half=%v/seed=%d", thieves, half, seed), func(t *testing.T) {
					t.Parallel()
					runStress(t, cfg)
				})
			}
		}
	}
}
