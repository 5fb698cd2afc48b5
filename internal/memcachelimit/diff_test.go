package memcachelimit_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// TestMatchesMemory runs the same random calls, one after the other, on
// Memcached (two servers) and on limit.Memory, the in-process twin every
// store is held to, on one clock, and wants the same decisions to the
// microsecond, and the same verdicts: without concurrent calls, the
// Memcached store is exact.
// Refunds come last in their call (see the package documentation for why
// a refund before another hit on its counter may differ).
func TestMatchesMemory(t *testing.T) {
	_, addrs := start(t, 2)
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	counters := []struct {
		key  string
		spec limit.Spec
	}{
		{"a", fixed(5, time.Second)},
		{"b", fixed(3, 5*time.Second)},
		{"c", fixed(10, time.Minute)},
		{"d", limit.Spec{Algorithm: limit.FixedWindow, Limit: 4, Window: 24 * time.Hour, Calendar: paris}},
		{"zero", fixed(0, time.Second)},
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run("", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			// Just before a Paris midnight, so that the calendar window
			// turns during the run.
			clk := newClock(time.Date(2026, 3, 28, 23, 59, 0, 0, paris).Add(time.Duration(rng.IntN(1e6)) * time.Microsecond))
			mem := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
			mc := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now, KeyPrefix: "diff" + string(rune('0'+seed)) + "_"})
			for step := range 400 {
				var hits, refunds []limit.Hit
				for range 1 + rng.IntN(3) {
					c := counters[rng.IntN(len(counters))]
					h := limit.Hit{Key: c.key, Spec: c.spec, Cost: []int64{0, 1, 1, 1, 2, 3, c.spec.Limit + 1, 2*c.spec.Limit + 3}[rng.IntN(8)]}
					h.Mode, h.Group = limit.Mode(rng.IntN(3)), uint32(rng.IntN(2))
					h.Usage = rng.IntN(4) == 0 // a charge, kept past the limit
					if h.Refund = rng.IntN(10) == 0; h.Refund {
						refunds = append(refunds, h)
						continue
					}
					hits = append(hits, h)
				}
				hits = append(hits, refunds...)
				want := make([]limit.Decision, len(hits))
				wantBlocked, err := mem.Evaluate(context.Background(), hits, want)
				if err != nil {
					t.Fatal(err)
				}
				got := make([]limit.Decision, len(hits))
				blocked, err := mc.Evaluate(context.Background(), hits, got)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) || blocked != wantBlocked {
					t.Fatalf("step %d at %v, hits %+v:\n got %+v, blocked %v\nwant %+v, blocked %v", step, clk.t, hits, got, blocked, want, wantBlocked)
				}
				clk.advance(time.Duration(rng.IntN(700_000)) * time.Microsecond)
			}
		})
	}
}
