package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// diffSpecs are the limits the differential test drives, per algorithm:
// round and awkward rates, bursts above and below the limit, sub-windows.
func diffSpecs(a limit.Algorithm) []limit.Spec {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	base := []limit.Spec{
		{Limit: 5, Window: time.Second},
		{Limit: 3, Window: 7 * time.Millisecond},
		{Limit: 100, Window: time.Minute},
		{Limit: 7, Window: 10 * time.Second},
	}
	switch a {
	case limit.FixedWindow:
		base = append(base,
			limit.Spec{Limit: 10, Window: 24 * time.Hour, Calendar: ny},
			limit.Spec{Limit: 4, Window: 30 * 24 * time.Hour, Calendar: time.UTC},
		)
	case limit.SlidingWindow:
		base = append(base,
			limit.Spec{Limit: 10, Window: time.Second, Precision: 4},
			limit.Spec{Limit: 7, Window: 10 * time.Second, Precision: 10},
			limit.Spec{Limit: 3, Window: 3 * time.Millisecond, Precision: 3},
			limit.Spec{Limit: 50, Window: time.Minute, Precision: 60},
		)
	case limit.TokenBucket, limit.LeakyBucket, limit.GCRA:
		base = append(base,
			limit.Spec{Limit: 10, Window: time.Second, Burst: 3},
			limit.Spec{Limit: 3, Window: time.Minute, Burst: 10},
			limit.Spec{Limit: 7, Window: 3 * time.Millisecond, Burst: 2},
		)
	}
	for i := range base {
		base[i].Algorithm = a
	}
	return base
}

// TestMatchesMemory drives the scripts and limit.Memory (the Go twin) with
// the same random requests at the same instants and requires identical
// decisions: allowed, remaining, reset, retry-after and never, to the µs.
// Requests hold one to three hits over a few counters, costs include 0,
// the capacity and more, and some hits are refunds; time moves by random
// steps and lands exactly on the last decision's retry-after and reset.
//
// Longer or other runs: FLOODGATE_DIFF_STEPS=5000 FLOODGATE_DIFF_SEED=7.
func TestMatchesMemory(t *testing.T) {
	n := startNode(t)
	var algorithms []limit.Algorithm
	for _, a := range limit.Algorithms() {
		algorithms = append(algorithms, a)
	}
	for _, a := range append(algorithms, 255) { // 255: every algorithm mixed
		name := "mixed"
		if a != 255 {
			name = a.String()
		}
		t.Run(name, func(t *testing.T) {
			var specs []limit.Spec
			if a == 255 {
				for _, b := range limit.Algorithms() {
					specs = append(specs, diffSpecs(b)[:2]...)
				}
			} else {
				specs = diffSpecs(a)
			}
			for si, sp := range specs {
				seed := uint64(si)*1000 + uint64(a) + envUint(t, "FLOODGATE_DIFF_SEED", 0)
				runDiff(t, n, name, si, sp, specs, seed)
			}
		})
	}
	// No key lives forever.
	keys, err := n.client.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if ttl := n.client.PTTL(context.Background(), k).Val(); ttl < 0 {
			t.Errorf("key %q has no expiry (PTTL %v)", k, ttl)
		}
	}
	t.Logf("%d keys, all with an expiry", len(keys))
}

func runDiff(t *testing.T, n *node, name string, si int, sp limit.Spec, specs []limit.Spec, seed uint64) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	start := future.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))
	clk := newClock(start)
	mem := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
	lim := newLimiter(t, n.client, clk, fmt.Sprintf("diff:%s:%d:", name, si))

	// Three counters: one with this spec, two with specs drawn from the
	// others (the mixed case), so requests cross algorithms.
	type counter struct {
		key  string
		spec limit.Spec
	}
	counters := []counter{{"c0", sp}, {"c1", sp}, {"c2", specs[rng.IntN(len(specs))]}}
	w := sp.Window.Microseconds()
	var last []limit.Decision
	steps := int(envUint(t, "FLOODGATE_DIFF_STEPS", 600))
	for step := range steps {
		switch r := rng.IntN(12); {
		case r == 0:
		case r == 1:
			clk.add(time.Microsecond)
		case r <= 3:
			clk.add(time.Duration(rng.Int64N(w/5+1)) * time.Microsecond)
		case r == 4:
			clk.add(time.Duration(rng.Int64N(2*w+1)) * time.Microsecond)
		case r == 5 && last != nil:
			clk.add(last[0].RetryAfter)
		case r == 6 && last != nil:
			clk.add(last[0].ResetAfter)
		case r == 7 && last != nil && last[0].RetryAfter > 0:
			clk.add(last[0].RetryAfter - time.Microsecond)
		case r == 8:
			// To the next multiple of the window or of a sub-window.
			g := w / sp.SubWindows()
			clk.add(time.Duration(g-clk.micros()%g) * time.Microsecond)
		case r == 9:
			clk.add(3 * sp.Window)
		case r == 10 && rng.IntN(3) == 0 && sp.Algorithm != limit.TokenBucket && sp.Algorithm != limit.LeakyBucket:
			// A reload changes counter c1's limit and burst, keeping its
			// key: both sides must read the old state alike. (Not for the
			// buckets: when their state would be settled depends on the
			// rate and burst it was written with, so the twin, expiring
			// it at that µs, and Redis, at that ms rounded up, may differ
			// for under a millisecond after such a change.)
			c := &counters[1].spec
			c.Limit = 1 + rng.Int64N(2*sp.Limit)
			if c.Algorithm.HasBurst() {
				c.Burst = rng.Int64N(2 * c.Limit)
			}
		default:
			clk.add(time.Duration(rng.Int64N(1000)) * time.Millisecond / 100)
		}
		hits := make([]limit.Hit, 1+rng.IntN(3))
		for i := range hits {
			c := counters[rng.IntN(len(counters))]
			if i == 0 {
				c = counters[0]
			}
			capacity := c.spec.Capacity()
			costs := []int64{0, 1, 1, 1, 1, 2, 3, capacity, capacity + 1, 2*capacity + 3}
			hits[i] = limit.Hit{Key: c.key, Spec: c.spec, Cost: costs[rng.IntN(len(costs))], Refund: rng.IntN(10) == 0,
				Usage: rng.IntN(4) == 0}
			// Every mode: a sixth advisory, a third in one of two quotas.
			switch m := rng.IntN(6); {
			case m == 0:
				hits[i].Mode = limit.Advisory
			case m <= 2:
				hits[i].Mode, hits[i].Group = limit.Quota, uint32(m)
			}
		}
		want := make([]limit.Decision, len(hits))
		got := make([]limit.Decision, len(hits))
		wantBlocked, err := mem.Evaluate(context.Background(), hits, want)
		if err != nil {
			t.Fatalf("Memory: %v", err)
		}
		blocked, err := lim.Evaluate(context.Background(), hits, got)
		if err != nil {
			t.Fatalf("Limiter: %v", err)
		}
		if !reflect.DeepEqual(got, want) || blocked != wantBlocked {
			t.Fatalf("spec %d %+v, step %d at %s (%d µs):\nhits %+v\nredis  %+v blocked %v\nmemory %+v blocked %v",
				si, sp, step, clk.now().UTC().Format(time.RFC3339Nano), clk.micros(), hits, got, blocked, want, wantBlocked)
		}
		last = got
	}
}

// envUint returns the environment variable name as a number, or def.
func envUint(t *testing.T, name string, def uint64) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}
