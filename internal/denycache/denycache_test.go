package denycache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// counting passes calls to a limit.Memory, counts them and keeps the hits
// of the last one.
type counting struct {
	inner *limit.Memory
	calls atomic.Int64
	mu    sync.Mutex
	last  []limit.Hit
}

func (c *counting) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (bool, error) {
	c.calls.Add(1)
	c.mu.Lock()
	c.last = append(c.last[:0], hits...)
	c.mu.Unlock()
	return c.inner.Evaluate(ctx, hits, decisions)
}

// sent returns the hit on key of the last call the store got.
func (c *counting) sent(key string) (limit.Hit, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.last {
		if h.Key == key {
			return h, true
		}
	}
	return limit.Hit{}, false
}

// clock is a settable fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newCache(t testing.TB, opts Options) (*Cache, *counting, *clock) {
	t.Helper()
	clk := &clock{t: t0}
	inner := &counting{inner: limit.NewMemory(limit.MemoryOptions{Now: clk.now})}
	opts.Now = clk.now
	return New(inner, opts), inner, clk
}

var perSecond = limit.Spec{Limit: 1, Window: time.Second}

// eval decides hits on l (a Cache, or the store behind one), failing the
// test on an error.
func eval(t *testing.T, l limit.Limiter, hits ...limit.Hit) []limit.Decision {
	t.Helper()
	ds := make([]limit.Decision, len(hits))
	if _, err := l.Evaluate(context.Background(), hits, ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

// TestNeverDeniesWhatTheStoreAdmits drives a cached and an uncached
// limit.Memory with the same random calls on one fake clock, across every
// algorithm, refunds, looks (cost 0), keys repeated in a call and a limit
// that changes under a key: the two must reject exactly the same calls;
// calls the cache did not answer get exactly the store's decisions, and a
// cached denial never claims to end after the store's.
func TestNeverDeniesWhatTheStoreAdmits(t *testing.T) {
	specs := []limit.Spec{
		{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Second},
		{Algorithm: limit.SlidingWindow, Limit: 4, Window: time.Second, Precision: 4},
		{Algorithm: limit.SlidingLog, Limit: 3, Window: time.Second},
		{Algorithm: limit.TokenBucket, Limit: 2, Window: time.Second, Burst: 3},
		{Algorithm: limit.LeakyBucket, Limit: 2, Window: time.Second, Burst: 3},
		{Algorithm: limit.GCRA, Limit: 5, Window: time.Second, Burst: 2},
	}
	seed := uint64(time.Now().UnixNano())
	for _, sp := range specs {
		t.Run(sp.Algorithm.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(sp.Algorithm)))
			c, inner, clk := newCache(t, Options{MaxEntries: 4})
			ref := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
			keys := []string{"a", "b", "c", "d", "e", "f"}
			specOf := map[string]limit.Spec{}
			for _, k := range keys {
				specOf[k] = sp
			}
			answered, looked := 0, 0
			for step := range 4000 {
				clk.t = clk.t.Add(time.Duration(rng.IntN(150_000)) * time.Microsecond)
				if sp.Algorithm == limit.FixedWindow && rng.IntN(200) == 0 {
					// A reload that changes the limit keeps the key.
					k := keys[rng.IntN(len(keys))]
					s := specOf[k]
					s.Limit = int64(1 + rng.IntN(4))
					specOf[k] = s
				}
				hits := make([]limit.Hit, 1+rng.IntN(3))
				for i := range hits {
					k := keys[rng.IntN(len(keys))]
					hits[i] = limit.Hit{Key: k, Spec: specOf[k], Cost: int64(rng.IntN(4)), Refund: rng.IntN(12) == 0, Usage: rng.IntN(8) == 0}
				}
				got := make([]limit.Decision, len(hits))
				want := make([]limit.Decision, len(hits))
				before := inner.calls.Load()
				blocked, err := c.Evaluate(context.Background(), hits, got)
				if err != nil {
					t.Fatal(err)
				}
				wantBlocked, err := ref.Evaluate(context.Background(), hits, want)
				if err != nil {
					t.Fatal(err)
				}
				call := fmt.Sprintf("step %d (seed %d) at %v: %+v", step, seed, clk.t.Sub(t0), hits)
				if blocked != wantBlocked {
					t.Fatalf("%s: cache blocked=%v, store blocked=%v\ncache %+v\nstore %+v", call, blocked, wantBlocked, got, want)
				}
				forwarded := inner.calls.Load() != before
				if forwarded && len(inner.last) < len(hits) { // read while no call runs
					looked++
				} else if !forwarded {
					answered++
				}
				for i := range got {
					// A hit the store saw, whole or as a look, gets its
					// decision; the others are cached denials.
					if _, ok := inner.sent(hits[i].Key); forwarded && ok {
						if got[i] != want[i] {
							t.Fatalf("%s: forwarded hit %d (as %+v) = %+v, store %+v", call, i, inner.last, got[i], want[i])
						}
					} else if got[i].Allowed || want[i].Allowed || got[i].Never != want[i].Never || got[i].RetryAfter > want[i].RetryAfter {
						t.Fatalf("%s: cached denial %d = %+v, store %+v", call, i, got[i], want[i])
					}
				}
			}
			if answered == 0 {
				t.Fatal("the cache answered no call: the test exercises nothing")
			}
			if looked == 0 && sp.Algorithm == limit.FixedWindow {
				t.Fatal("the cache answered no call with looks: the test exercises nothing of them")
			}
			t.Logf("%d calls answered, %d with looks", answered, looked)
			if n := c.Len(); n > 4 {
				t.Errorf("Len = %d with MaxEntries 4", n)
			}
		})
	}
}

// TestLearnsExhaustedFixedWindows: a fixed window that the store left
// with nothing to give (Remaining 0) denies the next hit until it ends,
// so that hit is answered without the store, as the store would answer
// it; a window with room left, or another algorithm at 0 (a bucket
// refills, a sliding window's hits leave), still sends it to the store.
func TestLearnsExhaustedFixedWindows(t *testing.T) {
	// In costs, besides a hit's cost: flush the cache between two calls,
	// or refund a hit of cost 1.
	const flush, refund = -1, -2
	for _, c := range []struct {
		name   string
		spec   limit.Spec
		costs  []int64 // one call of one hit each, before the probe of cost 1
		cached bool
	}{
		{"fixed window used up", limit.Spec{Limit: 1, Window: time.Second}, []int64{1}, true},
		{"fixed window used up at once", limit.Spec{Limit: 3, Window: time.Second}, []int64{3}, true},
		{"full fixed window seen by a look", limit.Spec{Limit: 1, Window: time.Second}, []int64{1, flush, 0}, true},
		{"fixed window with room", limit.Spec{Limit: 2, Window: time.Second}, []int64{1}, false},
		{"fixed window refunded", limit.Spec{Limit: 1, Window: time.Second}, []int64{1, refund}, false},
		{"token bucket emptied", limit.Spec{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second}, []int64{1}, false},
		{"sliding window used up", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 1, Window: time.Second}, []int64{1}, false},
		{"gcra used up", limit.Spec{Algorithm: limit.GCRA, Limit: 1, Window: time.Second}, []int64{1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cache, inner, clk := newCache(t, Options{})
			ref := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
			clk.t = t0.Add(300 * time.Millisecond)
			for _, cost := range c.costs {
				if cost == flush {
					cache.Flush()
					continue
				}
				hit := limit.Hit{Key: "k", Spec: c.spec, Cost: cost}
				if cost == refund {
					hit.Cost, hit.Refund = 1, true
				}
				eval(t, cache, hit)
				eval(t, ref, hit)
			}
			clk.t = clk.t.Add(100 * time.Millisecond)
			probe := limit.Hit{Key: "k", Spec: c.spec, Cost: 1}
			before := inner.calls.Load()
			got, want := eval(t, cache, probe)[0], eval(t, ref, probe)[0]
			if cached := inner.calls.Load() == before; cached != c.cached {
				t.Fatalf("probe answered from the cache: %v, want %v (%+v)", cached, c.cached, got)
			}
			if c.cached && (got.Allowed || want.Allowed || got.RetryAfter > want.RetryAfter || got.RetryAfter < want.RetryAfter-time.Millisecond) {
				t.Errorf("cached answer %+v, the store's %+v", got, want)
			}
		})
	}
}

func TestExpiresAtRetryAfterExactly(t *testing.T) {
	c, inner, clk := newCache(t, Options{})
	clk.t = t0.Add(200 * time.Millisecond)
	hit := limit.Hit{Key: "k", Spec: perSecond, Cost: 1}
	if d := eval(t, c, hit); !d[0].Allowed {
		t.Fatalf("first hit denied: %+v", d[0])
	}
	clk.t = t0.Add(500 * time.Millisecond)
	if d := eval(t, c, hit); d[0].Allowed || d[0].RetryAfter != 500*time.Millisecond {
		t.Fatalf("second hit: %+v, want denied for 500ms", d[0])
	}
	calls := inner.calls.Load()
	tests := []struct {
		at      time.Duration
		cost    int64
		cached  bool
		allowed bool
		retry   time.Duration
		never   bool
		comment string
	}{
		{at: 500 * time.Millisecond, cost: 1, cached: true, retry: 500 * time.Millisecond, comment: "the same hit again"},
		{at: 999_999 * time.Microsecond, cost: 1, cached: true, retry: time.Microsecond, comment: "1µs before T"},
		{at: 999_999 * time.Microsecond, cost: 2, cached: true, never: true, comment: "a larger cost, beyond the capacity"},
		{at: 999_999 * time.Microsecond, cost: 0, cached: false, allowed: true, comment: "a look goes to the store"},
		{at: time.Second, cost: 1, cached: false, allowed: true, comment: "at T the store decides"},
	}
	for _, tc := range tests {
		clk.t = t0.Add(tc.at)
		d := eval(t, c, limit.Hit{Key: "k", Spec: perSecond, Cost: tc.cost})
		cached := inner.calls.Load() == calls
		calls = inner.calls.Load()
		if cached != tc.cached {
			t.Errorf("%s: answered from the cache = %v, want %v", tc.comment, cached, tc.cached)
		}
		if tc.cached && (d[0].Allowed || d[0].Remaining != 0 || d[0].RetryAfter != tc.retry || d[0].ResetAfter != max(tc.retry, time.Microsecond) || d[0].Never != tc.never) {
			t.Errorf("%s: %+v, want denied, retry %v, reset %v, never %v", tc.comment, d[0], tc.retry, max(tc.retry, time.Microsecond), tc.never)
		}
		if !tc.cached && d[0].Allowed != tc.allowed {
			t.Errorf("%s: %+v, want allowed=%v", tc.comment, d[0], tc.allowed)
		}
	}
}

func TestOnlyCallsKnownWholeAreAnswered(t *testing.T) {
	c, inner, clk := newCache(t, Options{})
	a := limit.Hit{Key: "a", Spec: perSecond, Cost: 1}
	b := limit.Hit{Key: "b", Spec: perSecond, Cost: 1}
	shadow := limit.Hit{Key: "s", Spec: perSecond, Cost: 1, Mode: limit.Advisory}
	q1 := limit.Hit{Key: "q1", Spec: perSecond, Cost: 1, Mode: limit.Quota, Group: 1}
	q2 := limit.Hit{Key: "q2", Spec: perSecond, Cost: 1, Mode: limit.Quota, Group: 2}
	eval(t, c, a, b, shadow, q1, q2)
	clk.t = clk.t.Add(100 * time.Millisecond)
	eval(t, c, a) // learnt
	eval(t, c, b)
	eval(t, c, shadow)
	eval(t, c, q1)
	eval(t, c, q2)
	denied := limit.Decision{RetryAfter: 900 * time.Millisecond, ResetAfter: 900 * time.Millisecond}
	other := limit.Hit{Key: "other", Spec: perSecond, Cost: 1}
	look := limit.Hit{Key: "a", Spec: perSecond, Cost: 0}
	tests := []struct {
		name     string
		hits     []limit.Hit
		answered bool
	}{
		{"every hit denied", []limit.Hit{a, b}, true},
		{"a denial and an advisory denial", []limit.Hit{shadow, a}, true},
		{"only an advisory denial: the call passes", []limit.Hit{shadow}, false},
		{"every quota denied: the call is blocked", []limit.Hit{q1, q2}, true},
		{"a quota denied with an enforced denial", []limit.Hit{q1, a}, true},
		{"a hit the cache knows nothing of", []limit.Hit{other, a}, false},
		{"a look", []limit.Hit{a, look}, false},
		{"a refund", []limit.Hit{a, {Key: "b", Spec: perSecond, Cost: 1, Refund: true}}, false},
	}
	for _, tc := range tests {
		calls := inner.calls.Load()
		d := eval(t, c, tc.hits...)
		if answered := inner.calls.Load() == calls; answered != tc.answered {
			t.Errorf("%s: answered from the cache = %v, want %v", tc.name, answered, tc.answered)
			continue
		}
		for i := range d {
			if tc.answered && d[i] != denied {
				t.Errorf("%s: decision %d = %+v, want %+v", tc.name, i, d[i], denied)
			}
		}
	}
	// Nothing was consumed: "other" still has its whole budget.
	if d := eval(t, c, other); !d[0].Allowed {
		t.Errorf("other was charged by a rejected call: %+v", d[0])
	}
}

// TestLooksAtTheOthers: a call that a cached denial blocks, but whose
// other hits the cache does not know, sends the store only looks (cost 0)
// at those, when they are fixed windows on keys of their own, and gets
// for each exactly the store's decision of the whole call; in any other
// case the store gets the call whole. Nothing is consumed either way.
func TestLooksAtTheOthers(t *testing.T) {
	perMinute := limit.Spec{Limit: 5, Window: time.Minute}
	bucket := limit.Spec{Algorithm: limit.TokenBucket, Limit: 5, Window: time.Minute}
	tests := []struct {
		name  string
		other limit.Hit
		spent int64 // hits of cost 1 on other's key before the call
		looks bool  // the store gets a look at other, not the whole call
		want  limit.Decision
	}{
		{"room left", limit.Hit{Key: "o", Spec: perMinute, Cost: 1}, 2, true,
			limit.Decision{Allowed: true, Remaining: 3, ResetAfter: 59400 * time.Millisecond}},
		{"room for less than its cost", limit.Hit{Key: "o", Spec: perMinute, Cost: 2}, 4, true,
			limit.Decision{Remaining: 1, ResetAfter: 59400 * time.Millisecond, RetryAfter: 59400 * time.Millisecond}},
		{"used up", limit.Hit{Key: "o", Spec: perMinute, Cost: 1}, 5, true,
			limit.Decision{ResetAfter: 59400 * time.Millisecond, RetryAfter: 59400 * time.Millisecond}},
		{"a look", limit.Hit{Key: "o", Spec: perMinute}, 5, true,
			limit.Decision{Allowed: true, ResetAfter: 59400 * time.Millisecond}},
		{"a token bucket", limit.Hit{Key: "o", Spec: bucket, Cost: 1}, 0, false, limit.Decision{}},
		{"advisory", limit.Hit{Key: "o", Spec: perMinute, Cost: 1, Mode: limit.Advisory}, 0, false, limit.Decision{}},
		{"the denied key twice", limit.Hit{Key: "a", Spec: perSecond, Cost: 1}, 0, false, limit.Decision{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, inner, clk := newCache(t, Options{})
			a := limit.Hit{Key: "a", Spec: perSecond, Cost: 1}
			eval(t, c, a)        // used up: denied until the second ends
			for range tc.spent { // on the store: the cache knows nothing of it
				eval(t, inner.inner, limit.Hit{Key: tc.other.Key, Spec: tc.other.Spec, Cost: 1})
			}
			clk.t = clk.t.Add(600 * time.Millisecond)
			got := eval(t, c, a, tc.other)
			sent, ok := inner.sent(tc.other.Key)
			if looks := ok && len(inner.last) == 1 && sent.Cost == 0; looks != tc.looks {
				t.Fatalf("the store got %+v, want looks %v", inner.last, tc.looks)
			}
			if !tc.looks {
				return
			}
			if wantA := (limit.Decision{RetryAfter: 400 * time.Millisecond, ResetAfter: 400 * time.Millisecond}); got[0] != wantA {
				t.Errorf("a: %+v, want the cached %+v", got[0], wantA)
			}
			if got[1] != tc.want {
				t.Errorf("other: %+v, want %+v", got[1], tc.want)
			}
			// The store says the same, and nothing was consumed.
			store := eval(t, inner.inner, a, tc.other)
			if store[1] != tc.want {
				t.Errorf("the store decides other %+v, the cache answered %+v", store[1], tc.want)
			}
		})
	}
}

// TestLooksKeepMaxAge: a call answered with looks does not renew the
// cached denial that blocked it: the denial still ends MaxAge after the
// store returned it.
func TestLooksKeepMaxAge(t *testing.T) {
	c, inner, clk := newCache(t, Options{MaxAge: time.Second})
	perMinute := limit.Spec{Limit: 1, Window: time.Minute}
	a := limit.Hit{Key: "a", Spec: perMinute, Cost: 1}
	eval(t, c, a) // used up for a minute; cached for a second
	clk.t = clk.t.Add(600 * time.Millisecond)
	calls := inner.calls.Load()
	eval(t, c, a, limit.Hit{Key: "b", Spec: perMinute, Cost: 1})
	if h, ok := inner.sent("b"); inner.calls.Load() != calls+1 || !ok || h.Cost != 0 || len(inner.last) != 1 {
		t.Fatalf("the store got %+v, want a look at b", inner.last)
	}
	clk.t = clk.t.Add(600 * time.Millisecond)
	calls = inner.calls.Load()
	eval(t, c, a)
	if inner.calls.Load() != calls+1 {
		t.Error("a's denial answered 1.2 s after the store returned it, with MaxAge 1 s")
	}
}

func TestRefundDropsTheDenial(t *testing.T) {
	c, inner, _ := newCache(t, Options{})
	hit := limit.Hit{Key: "k", Spec: perSecond, Cost: 1}
	eval(t, c, hit)
	if d := eval(t, c, hit); d[0].Allowed {
		t.Fatal("second hit allowed")
	}
	refund := hit
	refund.Refund = true
	calls := inner.calls.Load()
	eval(t, c, refund)
	if inner.calls.Load() != calls+1 {
		t.Fatal("a refund was not sent to the store")
	}
	if d := eval(t, c, hit); !d[0].Allowed {
		t.Errorf("after a refund the hit is still denied: %+v", d[0])
	}
}

// TestUsageReachesTheStore: a usage hit (a charge reported after the
// fact) on a counter the cache holds denied goes to the store, which
// charges it; answering it here would lose the usage.
func TestUsageReachesTheStore(t *testing.T) {
	c, inner, _ := newCache(t, Options{})
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 5, Window: time.Second}, Cost: 5}
	eval(t, c, hit)
	if d := eval(t, c, hit); d[0].Allowed {
		t.Fatal("second hit allowed")
	}
	calls := inner.calls.Load()
	charge := limit.Hit{Key: "k", Spec: hit.Spec, Cost: 3, Usage: true}
	if d := eval(t, c, charge); d[0].Allowed || inner.calls.Load() != calls+1 {
		t.Fatalf("a charge on a denied counter: %+v, %d store calls, want denied and sent", d[0], inner.calls.Load()-calls)
	}
	look := eval(t, inner.inner, limit.Hit{Key: "k", Spec: hit.Spec})
	if look[0].Allowed {
		t.Errorf("the store did not count the charge: a look passes at 5 + 3 of 5")
	}
}

func TestKeyTwiceInACallIsNotLearnt(t *testing.T) {
	c, _, _ := newCache(t, Options{})
	two := limit.Spec{Limit: 2, Window: time.Second}
	hit := limit.Hit{Key: "k", Spec: two, Cost: 1}
	eval(t, c, hit)
	if d := eval(t, c, hit, hit); d[1].Allowed {
		t.Fatal("second hit of the call allowed past the limit")
	}
	// One hit of cost 1 still fits: the call above consumed nothing.
	if d := eval(t, c, hit); !d[0].Allowed {
		t.Errorf("a denial caused by the call's own first hit was cached: %+v", d[0])
	}
}

func TestFlush(t *testing.T) {
	c, inner, _ := newCache(t, Options{})
	hit := limit.Hit{Key: "k", Spec: perSecond, Cost: 1}
	eval(t, c, hit)
	eval(t, c, hit)
	if c.Len() != 1 {
		t.Fatalf("Len = %d, want 1", c.Len())
	}
	c.Flush()
	if c.Len() != 0 {
		t.Fatalf("Len after Flush = %d", c.Len())
	}
	calls := inner.calls.Load()
	eval(t, c, hit)
	if inner.calls.Load() != calls+1 {
		t.Error("after Flush the store was not asked")
	}
}

// flushing is a Limiter that flushes its Cache while it decides, as a
// reload during a store call would.
type flushing struct {
	*counting
	cache *Cache
}

func (f *flushing) Evaluate(ctx context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	blocked, err := f.counting.Evaluate(ctx, hits, ds)
	f.cache.Flush()
	return blocked, err
}

func TestFlushDuringACallForgetsItsDenials(t *testing.T) {
	clk := &clock{t: t0}
	f := &flushing{counting: &counting{inner: limit.NewMemory(limit.MemoryOptions{Now: clk.now})}}
	f.cache = New(f, Options{Now: clk.now})
	hit := limit.Hit{Key: "k", Spec: perSecond, Cost: 1}
	eval(t, f.cache, hit)
	eval(t, f.cache, hit)
	if n := f.cache.Len(); n != 0 {
		t.Errorf("a denial learnt across a Flush was kept (Len %d)", n)
	}
}

func TestBoundedSize(t *testing.T) {
	const max = 256
	c, _, _ := newCache(t, Options{MaxEntries: max})
	for i := range 10 * max {
		hit := limit.Hit{Key: "k" + strconv.Itoa(i), Spec: limit.Spec{Limit: 1, Window: time.Hour}, Cost: 1}
		eval(t, c, hit)
		if d := eval(t, c, hit); d[0].Allowed {
			t.Fatal("a second hit on a limit of 1 was allowed")
		}
	}
	if n := c.Len(); n > max || n < max/2 {
		t.Errorf("Len = %d after %d denials, want at most %d (and not far below)", n, 10*max, max)
	}
}

func TestAnsweredCallDoesNotAllocate(t *testing.T) {
	c, _, _ := newCache(t, Options{})
	hits := []limit.Hit{{Key: "k", Spec: perSecond, Cost: 1}, {Key: "other", Spec: perSecond, Cost: 1}}
	ds := make([]limit.Decision, len(hits))
	ctx := context.Background()
	for i := range hits {
		c.Evaluate(ctx, hits[i:i+1], ds[i:i+1])
		c.Evaluate(ctx, hits[i:i+1], ds[i:i+1])
	}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := c.Evaluate(ctx, hits, ds); err != nil || ds[0].Allowed {
			t.Fatal("not answered from the cache")
		}
	}); n != 0 {
		t.Errorf("%v allocations per answered call", n)
	}
}

// BenchmarkAnswered measures a call answered from the cache, from
// concurrent callers on 1,000 keys (the over-limit flood).
func BenchmarkAnswered(b *testing.B) {
	c := New(limit.NewMemory(limit.MemoryOptions{}), Options{})
	spec := limit.Spec{Limit: 1, Window: time.Hour}
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "key" + strconv.Itoa(i)
		for range 2 {
			c.Evaluate(context.Background(), []limit.Hit{{Key: keys[i], Spec: spec, Cost: 1}}, make([]limit.Decision, 1))
		}
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		hits := []limit.Hit{{Spec: spec, Cost: 1}}
		ds := make([]limit.Decision, 1)
		i := rand.IntN(len(keys))
		for pb.Next() {
			hits[0].Key = keys[i%len(keys)]
			i++
			c.Evaluate(context.Background(), hits, ds)
		}
	})
}

// TestConcurrentUse runs calls, flushes and Len from several goroutines;
// run with -race.
func TestConcurrentUse(t *testing.T) {
	c := New(limit.NewMemory(limit.MemoryOptions{}), Options{MaxEntries: 64})
	done := make(chan struct{})
	for g := range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			hits := []limit.Hit{{Spec: perSecond, Cost: 1}}
			ds := make([]limit.Decision, 1)
			for i := range 2000 {
				hits[0].Key = strconv.Itoa((i * (g + 1)) % 100)
				hits[0].Refund = i%97 == 0
				if _, err := c.Evaluate(context.Background(), hits, ds); err != nil {
					t.Error(err)
					return
				}
				if i%500 == 0 {
					c.Flush()
					c.Len()
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	if st := c.Stats(); st.Answered == 0 || st.Evaluated == 0 {
		t.Errorf("stats %+v: want calls both answered and evaluated", st)
	}
}

// A denial far from its RetryAfter (a daily limit) is used for MaxAge at
// most, so a store that lost its data is asked again soon; meanwhile
// answers carry the real RetryAfter.
func TestMaxAge(t *testing.T) {
	c, inner, clk := newCache(t, Options{MaxAge: 2 * time.Second})
	daily := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 1, Window: 24 * time.Hour}, Cost: 1}
	eval(t, c, daily)
	eval(t, c, daily)
	calls := inner.calls.Load()
	clk.t = clk.t.Add(2*time.Second - time.Microsecond)
	if d := eval(t, c, daily); inner.calls.Load() != calls || d[0].Allowed || d[0].RetryAfter != 24*time.Hour-2*time.Second+time.Microsecond {
		t.Errorf("within MaxAge: %+v, store called %v; want a cached denial with the real RetryAfter", d[0], inner.calls.Load() != calls)
	}
	clk.t = clk.t.Add(time.Microsecond)
	eval(t, c, daily)
	if inner.calls.Load() != calls+1 {
		t.Error("past MaxAge the store was not asked")
	}
}
