package limit_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// clock is a fake clock at microsecond resolution, safe for concurrent use.
type clock struct{ us atomic.Int64 }

func newClock(t time.Time) *clock {
	c := new(clock)
	c.Set(t)
	return c
}

func (c *clock) Now() time.Time      { return time.UnixMicro(c.us.Load()) }
func (c *clock) Set(t time.Time)     { c.us.Store(t.UnixMicro()) }
func (c *clock) Add(d time.Duration) { c.us.Add(d.Microseconds()) }

// base is a Thursday, 2026-01-01T00:00:00Z: a multiple of every window the
// tables use, so fixed and sliding windows start there.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const us = time.Microsecond

// dyadic is a window whose rates are exact in binary floating point: with
// Limit 4 a token or one GCRA period is 2^18 µs, so bucket and GCRA tables
// can assert exact boundaries without rounding getting in the way.
const dyadic = 1 << 20 * us

// eval runs one call and fails the test on error.
func eval(t *testing.T, m *limit.Memory, hits ...limit.Hit) []limit.Decision {
	t.Helper()
	d := make([]limit.Decision, len(hits))
	if _, err := m.Evaluate(context.Background(), hits, d); err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return d
}

func allow(remaining int64, reset time.Duration) limit.Decision {
	return limit.Decision{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, reset, retry time.Duration) limit.Decision {
	return limit.Decision{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

func never(remaining int64, reset time.Duration) limit.Decision {
	return limit.Decision{Remaining: remaining, ResetAfter: reset, Never: true}
}

// withDebt is d with Debt set: a counter past a limit lowered under it.
func withDebt(d limit.Decision, debt int64) limit.Decision {
	d.Debt = debt
	return d
}

// TestAllOrNothing checks that the hits of one call decide together.
func TestAllOrNothing(t *testing.T) {
	fixed := limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Minute}
	fixed2 := limit.Spec{Algorithm: limit.FixedWindow, Limit: 2, Window: time.Minute}
	bucket := limit.Spec{Algorithm: limit.TokenBucket, Limit: 4, Window: dyadic}
	h := func(key string, spec limit.Spec, cost int64) limit.Hit {
		return limit.Hit{Key: key, Spec: spec, Cost: cost}
	}
	adv := func(key string, spec limit.Spec, cost int64) limit.Hit {
		return limit.Hit{Key: key, Spec: spec, Cost: cost, Mode: limit.Advisory}
	}
	// quota returns a Quota hit of quota g.
	quota := func(g uint32, key string, spec limit.Spec, cost int64) limit.Hit {
		return limit.Hit{Key: key, Spec: spec, Cost: cost, Mode: limit.Quota, Group: g}
	}
	cases := []struct {
		name    string
		setup   []limit.Hit // evaluated one per call first
		call    []limit.Hit
		want    []limit.Decision
		blocked bool        // Evaluate's verdict: the call consumed nothing
		after   []limit.Hit // peeks, one per call, after the call
		wantRem []int64
	}{
		{
			name:    "second key denied: first not consumed",
			blocked: true,
			setup:   []limit.Hit{h("b", fixed, 3)},
			call:    []limit.Hit{h("a", fixed, 1), h("b", fixed, 1)},
			// Nothing consumed: a's decision reports its stored state.
			want:    []limit.Decision{allow(3, time.Minute), deny(0, time.Minute, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0), h("b", fixed, 0)},
			wantRem: []int64{3, 0},
		},
		{
			name:    "same key twice: the second sees the first and is denied",
			blocked: true,
			setup:   []limit.Hit{h("a", fixed, 1)},
			call:    []limit.Hit{h("a", fixed, 1), h("a", fixed, 2)},
			want:    []limit.Decision{allow(2, time.Minute), deny(1, time.Minute, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{2},
		},
		{
			name:    "same key twice: both consumed",
			setup:   []limit.Hit{h("a", fixed, 1)},
			call:    []limit.Hit{h("a", fixed, 1), h("a", fixed, 1)},
			want:    []limit.Decision{allow(1, time.Minute), allow(0, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{0},
		},
		{
			name:    "refund not applied when another hit is denied",
			blocked: true,
			setup:   []limit.Hit{h("a", fixed, 3), h("b", fixed, 3)},
			call: []limit.Hit{
				{Key: "a", Spec: fixed, Cost: 2, Refund: true},
				h("b", fixed, 1),
			},
			want:    []limit.Decision{allow(0, time.Minute), deny(0, time.Minute, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{0},
		},
		{
			name:    "a Never hit blocks the call",
			blocked: true,
			call:    []limit.Hit{h("a", bucket, 2), h("b", bucket, 5)},
			want:    []limit.Decision{allow(4, 0), never(4, 0)},
			after:   []limit.Hit{h("a", bucket, 0)},
			wantRem: []int64{4},
		},
		{
			name:    "a Limit 0 hit blocks the call",
			blocked: true,
			call:    []limit.Hit{h("a", fixed, 1), h("z", limit.Spec{Algorithm: limit.FixedWindow, Window: time.Minute}, 1)},
			want:    []limit.Decision{allow(3, time.Minute), {Never: true}},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "a peek in a rejected call sees the stored state, not the call's",
			blocked: true,
			setup:   []limit.Hit{h("b", fixed, 3)},
			call:    []limit.Hit{h("a", fixed, 2), h("a", fixed, 0), h("b", fixed, 1)},
			want:    []limit.Decision{allow(3, time.Minute), allow(3, time.Minute), deny(0, time.Minute, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "peeks never block",
			setup:   []limit.Hit{h("b", fixed, 3)},
			call:    []limit.Hit{h("a", fixed, 1), h("b", fixed, 0)},
			want:    []limit.Decision{allow(2, time.Minute), allow(0, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{2},
		},
		{
			name:    "advisory hit denied: the others still consume",
			setup:   []limit.Hit{h("b", fixed, 3)},
			call:    []limit.Hit{h("a", fixed, 1), adv("b", fixed, 1), h("c", bucket, 1)},
			want:    []limit.Decision{allow(2, time.Minute), deny(0, time.Minute, time.Minute), allow(3, 262144*us)},
			after:   []limit.Hit{h("a", fixed, 0), h("b", fixed, 0), h("c", bucket, 0)},
			wantRem: []int64{2, 0, 3},
		},
		{
			name:    "advisory hit allowed: charged like any other",
			call:    []limit.Hit{adv("a", fixed, 2), h("b", fixed, 1)},
			want:    []limit.Decision{allow(1, time.Minute), allow(2, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0), h("b", fixed, 0)},
			wantRem: []int64{1, 2},
		},
		{
			name:    "advisory hit allowed, another denied: nothing consumed",
			blocked: true,
			setup:   []limit.Hit{h("b", fixed, 3)},
			call:    []limit.Hit{adv("a", fixed, 2), h("b", fixed, 1)},
			want:    []limit.Decision{allow(3, time.Minute), deny(0, time.Minute, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "advisory hit above capacity: Never, and the call consumes",
			call:    []limit.Hit{adv("a", fixed, 4), h("b", fixed, 1)},
			want:    []limit.Decision{never(3, time.Minute), allow(2, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0), h("b", fixed, 0)},
			wantRem: []int64{3, 2},
		},
		{
			name:    "advisory hit denied by an earlier hit on its key: that hit consumes",
			setup:   []limit.Hit{h("a", fixed, 1)},
			call:    []limit.Hit{h("a", fixed, 1), adv("a", fixed, 2)},
			want:    []limit.Decision{allow(1, time.Minute), deny(1, time.Minute, time.Minute)},
			after:   []limit.Hit{h("a", fixed, 0)},
			wantRem: []int64{1},
		},
		{
			name:    "one quota over, another not: the others consume, the denied one writes nothing",
			setup:   []limit.Hit{h("q1", fixed, 3)},
			call:    []limit.Hit{quota(1, "q1", fixed, 1), quota(2, "q2", fixed, 1), h("e", fixed, 1)},
			want:    []limit.Decision{deny(0, time.Minute, time.Minute), allow(2, time.Minute), allow(2, time.Minute)},
			after:   []limit.Hit{h("q1", fixed, 0), h("q2", fixed, 0), h("e", fixed, 0)},
			wantRem: []int64{0, 2, 2},
		},
		{
			name:    "every quota over: nothing consumed",
			blocked: true,
			setup:   []limit.Hit{h("q1", fixed, 3), h("q2", bucket, 4)},
			call:    []limit.Hit{quota(1, "q1", fixed, 1), quota(2, "q2", bucket, 1), h("e", fixed, 1)},
			want:    []limit.Decision{deny(0, time.Minute, time.Minute), deny(0, 1048576*us, 262144*us), allow(3, time.Minute)},
			after:   []limit.Hit{h("e", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "a quota is over when any of its hits is denied",
			blocked: true,
			setup:   []limit.Hit{h("q1b", fixed, 3), h("q2", fixed, 3)},
			call:    []limit.Hit{quota(1, "q1a", fixed, 1), quota(1, "q1b", fixed, 1), quota(2, "q2", fixed, 1)},
			want:    []limit.Decision{allow(3, time.Minute), deny(0, time.Minute, time.Minute), deny(0, time.Minute, time.Minute)},
			after:   []limit.Hit{h("q1a", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "a lone quota over blocks like an enforced limit",
			blocked: true,
			setup:   []limit.Hit{h("q1", fixed, 3)},
			call:    []limit.Hit{quota(7, "q1", fixed, 1), h("e", fixed, 1)},
			want:    []limit.Decision{deny(0, time.Minute, time.Minute), allow(3, time.Minute)},
			after:   []limit.Hit{h("e", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "an enforced denial blocks whatever the quotas say",
			blocked: true,
			setup:   []limit.Hit{h("e", fixed, 3)},
			call:    []limit.Hit{quota(1, "q1", fixed, 1), h("e", fixed, 1)},
			want:    []limit.Decision{allow(3, time.Minute), deny(0, time.Minute, time.Minute)},
			after:   []limit.Hit{h("q1", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			// A look is denied when the count is above the limit (lowered
			// by a reload, say); at the limit it is allowed.
			name:    "a quota over at cost 0 counts as over",
			blocked: true,
			setup:   []limit.Hit{h("q1", fixed, 3), h("q2", fixed, 3)},
			call:    []limit.Hit{quota(1, "q1", fixed2, 0), quota(2, "q2", fixed, 1), h("e", fixed, 1)},
			want:    []limit.Decision{withDebt(deny(0, time.Minute, time.Minute), 1), deny(0, time.Minute, time.Minute), allow(3, time.Minute)},
			after:   []limit.Hit{h("e", fixed, 0)},
			wantRem: []int64{3},
		},
		{
			name:    "a quota at its limit at cost 0 is not over",
			setup:   []limit.Hit{h("q1", fixed, 3), h("q2", fixed, 3)},
			call:    []limit.Hit{quota(1, "q1", fixed, 0), quota(2, "q2", fixed, 1), h("e", fixed, 1)},
			want:    []limit.Decision{allow(0, time.Minute), deny(0, time.Minute, time.Minute), allow(2, time.Minute)},
			after:   []limit.Hit{h("e", fixed, 0)},
			wantRem: []int64{2},
		},
		{
			name:    "three algorithms on one call",
			call:    []limit.Hit{h("a", fixed, 3), h("b", bucket, 4), h("a", fixed, 0), h("b", bucket, 0)},
			want:    []limit.Decision{allow(0, time.Minute), allow(0, 1048576*us), allow(0, time.Minute), allow(0, 1048576*us)},
			after:   []limit.Hit{h("a", fixed, 0), h("b", bucket, 0)},
			wantRem: []int64{0, 0},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
			for _, s := range c.setup {
				eval(t, m, s)
			}
			got := make([]limit.Decision, len(c.call))
			blocked, err := m.Evaluate(context.Background(), c.call, got)
			if err != nil {
				t.Fatal(err)
			}
			if blocked != c.blocked {
				t.Errorf("blocked = %v, want %v", blocked, c.blocked)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Errorf("decision %d: got %+v, want %+v", i, got[i], c.want[i])
				}
			}
			for i, p := range c.after {
				if d := eval(t, m, p)[0]; d.Remaining != c.wantRem[i] {
					t.Errorf("after the call, %q has Remaining %d, want %d", p.Key, d.Remaining, c.wantRem[i])
				}
			}
		})
	}
}

func TestEvaluateErrors(t *testing.T) {
	ok := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 1, Window: time.Second}, Cost: 1}
	badSpec := ok
	badSpec.Spec.Window = 0
	negative := ok
	negative.Cost = -1
	badMode := ok
	badMode.Mode = 7
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name      string
		ctx       context.Context
		hits      []limit.Hit
		decisions int
		is        error
		mentions  string
	}{
		{"fewer decisions than hits", context.Background(), []limit.Hit{ok, ok}, 1, nil, "1 decisions for 2 hits"},
		{"invalid spec", context.Background(), []limit.Hit{ok, badSpec}, 2, limit.ErrInvalidSpec, "hit 1: invalid limit spec: window 0s"},
		{"negative cost", context.Background(), []limit.Hit{negative}, 1, limit.ErrNegativeCost, "hit 0: negative cost: -1"},
		{"unknown mode", context.Background(), []limit.Hit{ok, badMode}, 2, limit.ErrInvalidMode, "hit 1: unknown hit mode: Mode(7)"},
		{"canceled", canceled, []limit.Hit{ok}, 1, context.Canceled, "canceled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
			_, err := m.Evaluate(c.ctx, c.hits, make([]limit.Decision, c.decisions))
			if err == nil || !strings.Contains(err.Error(), c.mentions) {
				t.Fatalf("error %v, want one mentioning %q", err, c.mentions)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("error %v does not wrap %v", err, c.is)
			}
			if c.is != nil && !errors.Is(c.is, context.Canceled) && !errors.Is(err, limit.ErrInvalidSpec) {
				t.Fatalf("error %v, want it to wrap ErrInvalidSpec too", err)
			}
			if n := m.Stats().Entries; n != 0 {
				t.Fatalf("a failed call stored %d counters", n)
			}
		})
	}
}

// TestConcurrentOneKey hammers one key from many goroutines at a frozen
// instant: exactly the capacity is admitted. Run with -race.
func TestConcurrentOneKey(t *testing.T) {
	const goroutines, perGoroutine = 8, 100
	for _, spec := range exactSpecs() {
		spec.Limit, spec.Burst = 4, 300 // buckets admit Burst at once
		if !spec.Algorithm.HasBurst() {
			spec.Limit = 300
		}
		t.Run(spec.Algorithm.String(), func(t *testing.T) {
			m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					d := make([]limit.Decision, 1)
					for i := 0; i < perGoroutine; i++ {
						if _, err := m.Evaluate(context.Background(), []limit.Hit{{Key: "hot", Spec: spec, Cost: 1}}, d); err != nil {
							t.Error(err)
							return
						}
						if d[0].Allowed {
							admitted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := admitted.Load(); got != 300 {
				t.Fatalf("admitted %d, want exactly 300", got)
			}
		})
	}
}

// TestConcurrentMultiKey runs calls on the same three keys in different
// orders, so they lock shards in different hit orders: no deadlock, and
// since every call hits all three keys, all-or-nothing means exactly the
// limit of calls is admitted and no key ever runs ahead of another.
func TestConcurrentMultiKey(t *testing.T) {
	const limitN, goroutines, calls = 200, 8, 100
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: limitN, Window: time.Hour}
	keys := []string{"a", "b", "c"}
	m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(seed))
			hits := make([]limit.Hit, 3)
			d := make([]limit.Decision, 3)
			for i := 0; i < calls; i++ {
				for j, p := range rng.Perm(3) {
					hits[j] = limit.Hit{Key: keys[p], Spec: spec, Cost: 1}
				}
				if _, err := m.Evaluate(context.Background(), hits, d); err != nil {
					t.Error(err)
					return
				}
				if d[0].Allowed && d[1].Allowed && d[2].Allowed {
					admitted.Add(1)
				}
				if d[0].Remaining != d[1].Remaining || d[1].Remaining != d[2].Remaining {
					t.Errorf("keys out of step: %+v", d)
					return
				}
			}
		}(int64(g))
	}
	wg.Wait()
	if got := admitted.Load(); got != limitN {
		t.Fatalf("admitted %d calls, want %d", got, limitN)
	}
}

// TestMaxEntries: whatever MaxEntries, a Memory never holds more, a
// refused call leaves no counter, and a flood fills every shard.
func TestMaxEntries(t *testing.T) {
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour}
	for _, max := range []int{1, 10, 1000, 4096} {
		t.Run(fmt.Sprint(max), func(t *testing.T) {
			m := limit.NewMemory(limit.MemoryOptions{MaxEntries: max, Now: newClock(base).Now})
			refused := 0
			for i := 0; i < 4*max; i++ {
				key := fmt.Sprint("key-", i)
				d := make([]limit.Decision, 1)
				_, err := m.Evaluate(context.Background(), []limit.Hit{{Key: key, Spec: spec, Cost: 1}}, d)
				want := int64(4) // held, with its hit counted
				switch {
				case errors.Is(err, limit.ErrFull):
					refused++
					want = 5 // no counter
				case err != nil:
					t.Fatal(err)
				}
				if d := eval(t, m, limit.Hit{Key: key, Spec: spec})[0]; d.Remaining != want {
					t.Fatalf("%s (refused: %v): then Remaining %d, want %d", key, err != nil, d.Remaining, want)
				}
				if i%50 == 0 {
					if n := m.Stats().Entries; n > max {
						t.Fatalf("Entries %d > MaxEntries %d", n, max)
					}
				}
			}
			want := limit.MemoryStats{Entries: max, Capacity: max, Refused: int64(refused)}
			if st := m.Stats(); st != want || refused != 3*max {
				t.Fatalf("Stats %+v after %d new keys, %d refused: want %+v", st, 4*max, refused, want)
			}
		})
	}
}

// TestFirstRefusalNearMaxEntries: shards fill unevenly, but the first
// refusal comes near MaxEntries (at it with one shard, below 2048).
func TestFirstRefusalNearMaxEntries(t *testing.T) {
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour}
	for _, c := range []struct {
		max     int
		atLeast float64 // of max
	}{{1, 1}, {1000, 1}, {2047, 1}, {2048, 0.9}, {10000, 0.9}, {65536, 0.9}} {
		t.Run(fmt.Sprint(c.max), func(t *testing.T) {
			m := limit.NewMemory(limit.MemoryOptions{MaxEntries: c.max, Now: newClock(base).Now})
			d := make([]limit.Decision, 1)
			for i := 0; ; i++ {
				_, err := m.Evaluate(context.Background(), []limit.Hit{{Key: fmt.Sprint("api_key_", i), Spec: spec, Cost: 1}}, d)
				if errors.Is(err, limit.ErrFull) {
					if float64(i) < c.atLeast*float64(c.max) {
						t.Fatalf("first refusal with %d counters held, below %.0f%% of MaxEntries %d", i, 100*c.atLeast, c.max)
					}
					return
				}
				if err != nil || i > c.max {
					t.Fatalf("new key %d: %v", i, err)
				}
			}
		})
	}
}

func TestExpiredEntriesVanish(t *testing.T) {
	// A start aligned to the dyadic window, so that fixed and sliding
	// windows start there too.
	start := time.UnixMicro(base.UnixMicro() >> 20 << 20)
	clk := newClock(start)
	m := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
	for i := 0; i < 100; i++ {
		for _, spec := range exactSpecs() {
			eval(t, m, limit.Hit{Key: fmt.Sprint(spec.Algorithm, i), Spec: spec, Cost: 1})
		}
	}
	if n := m.Stats().Entries; n != 600 {
		t.Fatalf("Len = %d, want 600", n)
	}
	// Sliding windows live longest: (k + N + 1)·g = 5 · 2^18 µs.
	clk.Set(start.Add(5*262144*us - us))
	if n := m.Stats().Entries; n != 100 {
		t.Fatalf("Len 1µs before the sliding windows expire = %d, want 100", n)
	}
	clk.Set(start.Add(5 * 262144 * us))
	if n := m.Stats().Entries; n != 0 {
		t.Fatalf("Len after every counter expired = %d, want 0", n)
	}
}

func TestRealClock(t *testing.T) {
	m := limit.NewMemory(limit.MemoryOptions{})
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour}
	d := eval(t, m, limit.Hit{Key: "k", Spec: spec, Cost: 1}, limit.Hit{Key: "k", Spec: spec, Cost: 1})
	if !d[0].Allowed || d[1].Allowed || d[1].RetryAfter <= 0 || d[1].RetryAfter > time.Hour {
		t.Fatalf("got %+v", d)
	}
}

func BenchmarkMemoryEvaluate(b *testing.B) {
	fixed, bucket, gcra := benchSpecs()
	for _, bc := range []struct {
		name string
		hits []limit.Hit
	}{
		{"1hit", []limit.Hit{{Key: "a", Spec: bucket, Cost: 1}}},
		{"3hits", []limit.Hit{{Key: "a", Spec: fixed, Cost: 1}, {Key: "b", Spec: bucket, Cost: 1}, {Key: "c", Spec: gcra, Cost: 1}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			m := limit.NewMemory(limit.MemoryOptions{})
			d := make([]limit.Decision, len(bc.hits))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.Evaluate(context.Background(), bc.hits, d); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// benchSpecs returns limits that never deny during a benchmark and whose
// counters outlive it, so that it measures deciding, not creating, counters.
func benchSpecs() (fixed, bucket, gcra limit.Spec) {
	fixed = limit.Spec{Algorithm: limit.FixedWindow, Limit: 1 << 40, Window: time.Hour}
	bucket = limit.Spec{Algorithm: limit.TokenBucket, Limit: 1 << 20, Window: time.Hour, Burst: 1 << 40}
	gcra = bucket
	gcra.Algorithm = limit.GCRA
	return fixed, bucket, gcra
}

// BenchmarkMemoryEvaluateParallel spreads goroutines over 64k fixed-window
// keys (bucket counters with a high rate would expire between two hits).
func BenchmarkMemoryEvaluateParallel(b *testing.B) {
	spec, _, _ := benchSpecs()
	const nkeys = 1 << 16
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprint("descriptor_key_", i)
	}
	m := limit.NewMemory(limit.MemoryOptions{})
	var seed atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(7919))
		hits := make([]limit.Hit, 1)
		d := make([]limit.Decision, 1)
		for pb.Next() {
			i++
			hits[0] = limit.Hit{Key: keys[i%nkeys], Spec: spec, Cost: 1}
			if _, err := m.Evaluate(context.Background(), hits, d); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestMemoryHonoursDoneContext: without a deadline of its own, Memory
// still decides nothing for a caller that has gone away.
func TestMemoryHonoursDoneContext(t *testing.T) {
	mem := limit.NewMemory(limit.MemoryOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hits := []limit.Hit{{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Second}, Cost: 1}}
	if _, err := mem.Evaluate(ctx, hits, make([]limit.Decision, 1)); err != context.Canceled {
		t.Fatalf("Evaluate on a cancelled context: %v, want context.Canceled", err)
	}
	if n := mem.Stats().Entries; n != 0 {
		t.Fatalf("%d counters after a cancelled call, want 0", n)
	}
}
