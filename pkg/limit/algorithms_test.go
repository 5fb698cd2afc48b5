package limit

import (
	"math/rand"
	"strconv"
	"testing"
	"time"
)

// randomSpec returns a valid spec of algorithm a with parameters whose
// rates are, in general, not exact in binary floating point.
func randomSpec(rng *rand.Rand, a Algorithm) Spec {
	s := Spec{Algorithm: a, Limit: int64(rng.Intn(60) + 1)}
	switch rng.Intn(3) {
	case 0:
		s.Window = time.Duration(rng.Intn(5000)+1) * time.Millisecond
	case 1:
		s.Window = []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}[rng.Intn(4)]
	default:
		s.Window = time.Duration(rng.Int63n(int64(time.Hour))) + time.Millisecond
	}
	if a.HasBurst() && rng.Intn(2) == 0 {
		s.Burst = int64(rng.Intn(60) + 1)
	}
	if a == SlidingWindow {
		s.Precision = rng.Intn(int(min(s.Window.Milliseconds(), 500))) + 1
	}
	return s
}

// history applies random hits to one counter, as Memory would (a denied hit
// writes nothing, a write with ttl <= 0 deletes), and calls visit after each
// hit with the state before it.
type history struct {
	spec Spec
	st   state
	ok   bool
	now  int64
}

func (h *history) clone() state {
	c := h.st
	c.runs = append(runs(nil), h.st.runs...)
	return c
}

// probe evaluates a hit at now on a copy of the state, changing nothing.
func (h *history) probe(now, cost int64, refund bool) outcome {
	c := h.clone()
	return step(&c, h.ok, &h.spec, now, cost, refund, false)
}

func (h *history) apply(cost int64, refund bool) outcome { return h.applyHit(cost, refund, false) }

// charge applies a usage hit (Hit.Usage) of cost.
func (h *history) charge(cost int64) outcome { return h.applyHit(cost, false, true) }

func (h *history) applyHit(cost int64, refund, usage bool) outcome {
	o := step(&h.st, h.ok, &h.spec, h.now, cost, refund, usage)
	if o.write {
		h.ok = o.resetAfter > 0
	}
	return o
}

func decisionOf(o outcome) outcome {
	o.write = false
	return o
}

// TestExpiryNeverChangesADecision checks the property Memory's expiry and
// the Redis TTLs rely on: at the instant a written state's ttl runs out (and
// later), every hit is decided exactly as if there were no state.
func TestExpiryNeverChangesADecision(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for iter := 0; iter < 3000; iter++ {
		a := Algorithm(rng.Intn(int(numAlgorithms)))
		h := &history{spec: randomSpec(rng, a), now: 1767225600000000 + rng.Int63n(1e12)}
		capacity := h.spec.Capacity()
		w := h.spec.WindowMicros()
		for i := 0; i < 20; i++ {
			h.now += rng.Int63n(w/3 + 1)
			var o outcome
			if rng.Intn(4) == 0 {
				o = h.charge(rng.Int63n(3*capacity) + 1) // into debt, often
			} else {
				o = h.apply(rng.Int63n(capacity)+1, rng.Intn(8) == 0)
			}
			if !o.write || o.resetAfter <= 0 {
				continue
			}
			for _, later := range []int64{0, 1, rng.Int63n(w + 1)} {
				at := h.now + o.resetAfter + later
				for _, p := range []struct {
					cost   int64
					refund bool
				}{{0, false}, {1, false}, {capacity, false}, {1, true}} {
					var none state
					got := h.probe(at, p.cost, p.refund)
					want := step(&none, false, &h.spec, at, p.cost, p.refund, false)
					if p.refund {
						// A refund may delete a state equivalent to none.
						got, want = decisionOf(got), decisionOf(want)
					}
					if got != want {
						t.Fatalf("%+v: state %+v written at %d with ttl %d; at +%d, hit %+v:\nstate   %+v\nnothing %+v",
							h.spec, h.st, h.now, o.resetAfter, later, p, got, want)
					}
				}
			}
		}
	}
}

// firstAllowed returns the first instant after from at which the hit passes
// on the unchanged state, by bisection (every algorithm only gets more
// permissive as time passes without hits).
func firstAllowed(h *history, from, cost int64) int64 {
	lo, hi := from, from+1
	for !h.probe(hi, cost, false).allowed {
		lo, hi = hi, hi+2*(hi-from)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if h.probe(mid, cost, false).allowed {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// TestRetryAfterIsTheFirstInstant compares RetryAfter with the first instant
// the denied hit passes, found by search: every algorithm is exact to the
// µs, the buckets too although their rate, limit/window, is rarely exact in
// a float.
func TestRetryAfterIsTheFirstInstant(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for iter := 0; iter < 3000; iter++ {
		a := Algorithm(rng.Intn(int(numAlgorithms)))
		h := &history{spec: randomSpec(rng, a), now: 1767225600000000 + rng.Int63n(1e12)}
		capacity := h.spec.Capacity()
		w := h.spec.WindowMicros()
		for i := 0; i < 30; i++ {
			h.now += rng.Int63n(w/4 + 1)
			cost := rng.Int63n(capacity) + 1
			// A charge that does not fit is consumed: its RetryAfter is the
			// first instant the same hit passes on the state it left.
			o := h.applyHit(cost, false, rng.Intn(3) == 0)
			if o.allowed {
				continue
			}
			want := firstAllowed(h, h.now, cost) - h.now
			if o.retryAfter != want {
				t.Fatalf("%+v at %d, cost %d: RetryAfter %d µs, first allowed after %d µs", h.spec, h.now, cost, o.retryAfter, want)
			}
		}
	}
}

// TestGCRAMatchesTokenBucket checks that GCRA gives the token bucket's
// decisions, field for field, when the rates are exact in binary (a power
// of two per 2^k µs); with other rates rounding may differ at boundaries.
func TestGCRAMatchesTokenBucket(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	for iter := 0; iter < 500; iter++ {
		spec := Spec{
			Limit:  1 << rng.Intn(6),
			Window: time.Duration(1<<(rng.Intn(10)+10)) * time.Microsecond,
			Burst:  int64(rng.Intn(12)),
		}
		tb, gc := spec, spec
		tb.Algorithm, gc.Algorithm = TokenBucket, GCRA
		bucket := &history{spec: tb, now: 1767225600000000 + rng.Int63n(1e12)}
		cell := &history{spec: gc, now: bucket.now}
		for i := 0; i < 200; i++ {
			if rng.Intn(3) > 0 {
				bucket.now += rng.Int63n(spec.WindowMicros()/int64(spec.Limit) + 1)
				cell.now = bucket.now
			}
			cost, refund, usage := rng.Int63n(spec.Capacity()+2), rng.Intn(10) == 0, rng.Intn(4) == 0
			if usage {
				cost = rng.Int63n(3*spec.Capacity() + 2)
			}
			ob, og := bucket.applyHit(cost, refund, usage), cell.applyHit(cost, refund, usage)
			if decisionOf(ob) != decisionOf(og) {
				t.Fatalf("%+v, hit %d (cost %d, refund %v):\ntoken bucket %+v\ngcra         %+v", spec, i, cost, refund, ob, og)
			}
		}
	}
}

func TestRuns(t *testing.T) {
	r := func(pairs ...int64) runs {
		var out runs
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, run{at: pairs[i], n: pairs[i+1]})
		}
		return out
	}
	equal := func(a, b runs) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	cases := []struct {
		name  string
		got   func() (runs, int64)
		want  runs
		wantN int64
	}{
		{"add at the end", func() (runs, int64) { return r(1, 1, 5, 2).add(9, 3), 0 }, r(1, 1, 5, 2, 9, 3), 0},
		{"add to the last", func() (runs, int64) { return r(1, 1, 5, 2).add(5, 3), 0 }, r(1, 1, 5, 5), 0},
		{"add in the middle", func() (runs, int64) { return r(1, 1, 5, 2).add(3, 3), 0 }, r(1, 1, 3, 3, 5, 2), 0},
		{"add at the start", func() (runs, int64) { return r(1, 1, 5, 2).add(0, 3), 0 }, r(0, 3, 1, 1, 5, 2), 0},
		{"drop before", func() (runs, int64) { return r(1, 1, 3, 3, 5, 2).dropBefore(3), 0 }, r(3, 3, 5, 2), 0},
		{"drop nothing", func() (runs, int64) { return r(1, 1, 3, 3).dropBefore(1), 0 }, r(1, 1, 3, 3), 0},
		{"take within the newest", func() (runs, int64) { return r(1, 1, 3, 3).takeNewest(2, 9) }, r(1, 1, 3, 1), 2},
		{"take across runs", func() (runs, int64) { return r(1, 2, 3, 3).takeNewest(4, 9) }, r(1, 1), 4},
		{"take more than there is", func() (runs, int64) { return r(1, 2, 3, 3).takeNewest(9, 9) }, r(), 5},
		{"take up to a position", func() (runs, int64) { return r(1, 2, 3, 3, 7, 1).takeNewest(3, 3) }, r(1, 2, 7, 1), 3},
		{"take none below", func() (runs, int64) { return r(3, 3).takeNewest(3, 2) }, r(3, 3), 0},
	}
	for _, c := range cases {
		got, n := c.got()
		if !equal(got, c.want) || n != c.wantN {
			t.Errorf("%s: got %v, %d; want %v, %d", c.name, got, n, c.want, c.wantN)
		}
	}
	log := r(10, 2, 20, 1, 30, 3)
	for i, want := range []int64{10, 10, 20, 30, 30, 30} {
		if got := log.nthOldest(int64(i + 1)); got != want {
			t.Errorf("nthOldest(%d) = %d, want %d", i+1, got, want)
		}
	}
}

// TestShardSpread checks that keys differing only in their last characters
// spread over all shards.
func TestShardSpread(t *testing.T) {
	const keys = 64 * 200
	var count [maxShards]int
	for i := 0; i < keys; i++ {
		count[shardIndex("descriptor_key_"+strconv.Itoa(i), 6)]++
	}
	for s, n := range count {
		if n < 120 || n > 280 {
			t.Fatalf("shard %d holds %d of %d keys (counts %v)", s, n, keys, count)
		}
	}
}

// model is Memory without shards, pools, heaps or shared state: maps and
// copies, as plainly as the contract reads. TestMemoryMatchesModel holds
// Memory to it.
type model map[string]modelEntry

type modelEntry struct {
	st      state
	expires int64
}

func (m model) evaluate(hits []Hit, now int64) (decisions []Decision, blocked bool) {
	out, working := m.run(hits, now, func(*Hit) bool { return true })
	blocked = Blocked(hits, out)
	if blocked {
		// Only the usage hits change anything, applied alone; the other
		// allowed hits look at what they leave.
		charged, after := m.run(hits, now, func(h *Hit) bool { return h.Usage && h.Cost > 0 })
		for i := range hits {
			h := &hits[i]
			switch w := after[h.Key]; {
			case h.Usage && h.Cost > 0:
				out[i] = charged[i]
			case out[i].Allowed:
				st := w.st
				st.runs = append(runs(nil), w.st.runs...)
				o := step(&st, w.ok, &h.Spec, now, 0, false, false)
				out[i] = Decision{Allowed: true, Remaining: o.remaining, Debt: o.debt, ResetAfter: time.Duration(o.resetAfter) * time.Microsecond}
			}
		}
		working = after
	}
	for key, w := range working {
		switch {
		case !w.dirty:
		case w.ok:
			m[key] = modelEntry{st: w.st, expires: w.expire}
		default:
			delete(m, key)
		}
	}
	return out, blocked
}

// modelWork is a counter's working copy during a model call.
type modelWork struct {
	st     state
	ok     bool
	dirty  bool
	expire int64
}

// run steps the hits that apply on copies of the stored counters, in
// order, and returns their decisions and the copies of every hit's key.
func (m model) run(hits []Hit, now int64, applies func(*Hit) bool) ([]Decision, map[string]*modelWork) {
	working := map[string]*modelWork{}
	out := make([]Decision, len(hits))
	for i := range hits {
		h := &hits[i]
		w := working[h.Key]
		if w == nil {
			w = &modelWork{}
			if e, found := m[h.Key]; found && e.expires > now {
				w.st, w.ok = e.st, true
				w.st.runs = append(runs(nil), e.st.runs...)
			}
			working[h.Key] = w
		}
		if !applies(h) {
			continue
		}
		o := step(&w.st, w.ok, &h.Spec, now, h.Cost, h.Refund, h.Usage)
		if o.write {
			w.dirty, w.ok, w.expire = true, o.resetAfter > 0, now+o.resetAfter
		}
		out[i] = o.decision()
	}
	return out, working
}

// TestMemoryMatchesModel plays random calls of one to four hits, on a few
// keys of every algorithm (a key may repeat within a call), on Memory and
// on the model, and requires identical decisions and verdicts.
func TestMemoryMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewSource(4))
	for round := 0; round < 40; round++ {
		specs := map[string]Spec{}
		var keys []string
		for i := 0; i < 8; i++ {
			key := "k" + strconv.Itoa(i)
			spec := randomSpec(rng, Algorithm(rng.Intn(int(numAlgorithms))))
			if spec.Algorithm == SlidingLog && rng.Intn(2) == 0 {
				spec.Limit = 3000 // long logs: many entries shared or copied
			}
			specs[key] = spec
			keys = append(keys, key)
		}
		now := int64(1767225600000000) + rng.Int63n(1e12)
		mem := NewMemory(MemoryOptions{Now: func() time.Time { return time.UnixMicro(now) }})
		ref := model{}
		for call := 0; call < 300; call++ {
			now += rng.Int63n(200000)
			hits := make([]Hit, rng.Intn(4)+1)
			for i := range hits {
				key := keys[rng.Intn(len(keys))]
				spec := specs[key]
				cost := rng.Int63n(spec.Capacity()/2 + 2)
				usage := rng.Intn(4) == 0
				switch {
				case rng.Intn(4) == 0:
					cost = 0
				case usage && rng.Intn(3) == 0:
					cost = rng.Int63n(3*spec.Capacity() + 2) // past the capacity: a debt
				}
				hits[i] = Hit{Key: key, Spec: spec, Cost: cost, Refund: rng.Intn(8) == 0, Usage: usage, Mode: Mode(rng.Intn(3)), Group: uint32(rng.Intn(2))}
			}
			got := make([]Decision, len(hits))
			blocked, err := mem.Evaluate(t.Context(), hits, got)
			if err != nil {
				t.Fatal(err)
			}
			want, wantBlocked := ref.evaluate(hits, now)
			if blocked != wantBlocked {
				t.Fatalf("round %d call %d %+v: memory blocked %v, model %v", round, call, hits, blocked, wantBlocked)
			}
			for i := range hits {
				if got[i] != want[i] {
					t.Fatalf("round %d call %d hit %d %+v:\nmemory %+v\nmodel  %+v", round, call, i, hits[i], got[i], want[i])
				}
			}
		}
	}
}
