package limit

import (
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/internal/twin"
)

// passes reports whether a hit of cost passes at instant at on a copy of
// the state h holds.
func (h *history) passes(at, cost int64) bool { return h.probe(at, cost, false).allowed }

// TestDebtNeverAdmitsEarly checks that a usage charge past the limit never
// makes a later hit pass earlier than a smaller charge would have: from the
// same state, the counter after charging c2 > c1 admits a hit at an
// instant only if the counter after charging c1 admits it too (c1 = 0 is no
// charge at all). Windows count past the limit, buckets owe a debt; either
// way more usage never buys admission.
func TestDebtNeverAdmitsEarly(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	for iter := 0; iter < 2000; iter++ {
		a := Algorithm(rng.Intn(int(numAlgorithms)))
		base := &history{spec: randomSpec(rng, a), now: 1767225600000000 + rng.Int63n(1e12)}
		capacity, w := base.spec.Capacity(), base.spec.WindowMicros()
		for i := rng.Intn(6); i > 0; i-- {
			base.now += rng.Int63n(w/3 + 1)
			base.apply(rng.Int63n(capacity)+1, false)
		}
		c1 := rng.Int63n(2 * capacity)
		c2 := c1 + 1 + rng.Int63n(3*capacity)
		small, large := *base, *base
		small.st, large.st = base.clone(), base.clone()
		if c1 > 0 {
			small.charge(c1)
		}
		if o := large.charge(c2); !o.write {
			t.Fatalf("%+v: a charge of %d wrote nothing: %+v", base.spec, c2, o)
		}
		for probe := 0; probe < 40; probe++ {
			at := base.now + rng.Int63n(3*w+1)
			for _, cost := range []int64{0, 1, capacity} {
				if large.passes(at, cost) && !small.passes(at, cost) {
					t.Fatalf("%+v at %d: after a charge of %d a hit of %d passes at +%d µs, after a charge of %d not",
						base.spec, base.now, c2, cost, at-base.now, c1)
				}
			}
		}
	}
}

// TestDebtIsPaidAtTheRate charges a fresh counter more than its capacity
// and finds the first instant a look (cost 0) passes again: a bucket owes
// exactly the excess at its rate, a window counts it until it leaves the
// window.
func TestDebtIsPaidAtTheRate(t *testing.T) {
	rng := rand.New(rand.NewSource(6))
	for iter := 0; iter < 1500; iter++ {
		a := Algorithm(rng.Intn(int(numAlgorithms)))
		h := &history{spec: randomSpec(rng, a), now: 1767225600000000 + rng.Int63n(1e12)}
		capacity, w := h.spec.Capacity(), h.spec.WindowMicros()
		cost := capacity + 1 + rng.Int63n(5*capacity)
		o := h.charge(cost)
		if o.allowed || o.remaining != 0 || !o.never || o.retryAfter != 0 || o.debt != cost-capacity {
			t.Fatalf("%+v: a charge of %d above the capacity %d: %+v, want denied, Never, Remaining 0, Debt %d",
				h.spec, cost, capacity, o, cost-capacity)
		}
		paid := firstAllowed(h, h.now, 0) - h.now
		excess := float64(cost-capacity) * float64(w) / float64(h.spec.Limit) // µs at the rate
		var lo, hi float64
		switch a {
		case TokenBucket, LeakyBucket, GCRA:
			lo, hi = excess-2, excess+2
		case FixedWindow:
			_, end := h.spec.fixedWindowAt(h.now)
			lo, hi = float64(end-h.now), float64(end-h.now)
		case SlidingLog:
			lo, hi = float64(w), float64(w)
		case SlidingWindow:
			g := w / h.spec.SubWindows()
			lo, hi = float64(w-g), float64(w+g)
		}
		if float64(paid) < lo || float64(paid) > hi {
			t.Fatalf("%+v: after a charge of %d on a fresh counter a look passes after %d µs, want [%.0f, %.0f]",
				h.spec, cost, paid, lo, hi)
		}
		if o.resetAfter < paid {
			t.Fatalf("%+v: ResetAfter %d µs shorter than the debt's %d", h.spec, o.resetAfter, paid)
		}
	}
}

// TestDebtIsBounded charges far more than any limit: windows count up to
// MaxCount, buckets owe up to twin.MaxDebt, and every figure stays a valid
// duration.
func TestDebtIsBounded(t *testing.T) {
	huge := int64(1 << 53)
	for _, a := range Algorithms() {
		spec := Spec{Algorithm: a, Limit: 10, Window: time.Hour}
		h := &history{spec: spec, now: 1767225600000000}
		for range 3 {
			o := h.charge(huge)
			d := o.decision()
			if d.Allowed || d.ResetAfter <= 0 || d.ResetAfter > twin.MaxDebt+time.Hour {
				t.Fatalf("%v: a charge of 2^53: %+v, want denied and a reset within twin.MaxDebt", a, d)
			}
		}
		paid := time.Duration(firstAllowed(h, h.now, 0)-h.now) * time.Microsecond
		switch a {
		case TokenBucket, LeakyBucket, GCRA:
			if paid < twin.MaxDebt-time.Second || paid > twin.MaxDebt+time.Second {
				t.Errorf("%v: three charges of 2^53 are paid in %v, want twin.MaxDebt (%v)", a, paid, twin.MaxDebt)
			}
		default:
			// A sliding window counts a sub-window's hits until it has
			// slid past: a window and a sub-window at most.
			if paid > spec.Window+spec.Window/time.Duration(spec.SubWindows()) {
				t.Errorf("%v: three charges of 2^53 last %v, longer than the window", a, paid)
			}
		}
		if a == FixedWindow && h.st.fixed.count != MaxCount {
			t.Errorf("fixed window counts %d after three charges of 2^53, want MaxCount", h.st.fixed.count)
		}
	}
}

// TestUsageBudget is the budget of a response cost charged after the
// fact, as Envoy charges it at stream done: 1,000 per hour, each response
// costing 600, a look (cost 0) before each request. The third request
// finds the budget spent, as the reference server answers, and it stays
// spent until its window ends (windows) or its debt is paid (buckets).
func TestUsageBudget(t *testing.T) {
	for _, a := range Algorithms() {
		spec := Spec{Algorithm: a, Limit: 1000, Window: time.Hour}
		h := &history{spec: spec, now: 1767225600000000}
		var got []bool
		for range 6 {
			allowed := h.apply(0, false).allowed
			got = append(got, allowed)
			if allowed {
				h.charge(600)
			}
			h.now += int64(time.Second / time.Microsecond)
		}
		want := []bool{true, true, false, false, false, false}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%v: looks %v, want %v", a, got, want)
			}
		}
		// A bucket: 1,200 charged against 1,000 at 0 and 1 s, 200 owed, paid
		// back at 1,000 an hour 720 s after the start (6 s have gone).
		back := firstAllowed(h, h.now, 0) - h.now
		if a.HasBurst() && math.Abs(float64(back)-(720e6-6e6)) > 2 {
			t.Errorf("%v: the budget is back after %d µs, want 714 s", a, back)
		}
	}
}

// TestBlockedCallCharges checks that a blocked call changes no counter but
// by its usage hits, which are applied alone, in order, and that its other
// allowed hits report a look at what they leave.
func TestBlockedCallCharges(t *testing.T) {
	spec := Spec{Algorithm: FixedWindow, Limit: 5, Window: time.Hour}
	full := Hit{Key: "full", Spec: spec, Cost: 1}   // over: 5 counted before each case
	plain := Hit{Key: "plain", Spec: spec, Cost: 2} // fits
	usage := Hit{Key: "usage", Spec: spec, Cost: 4, Usage: true}
	cases := []struct {
		name string
		hits []Hit
		// counts after the call, and the decisions' Allowed and Remaining
		want    map[string]int64
		allowed []bool
		remain  []int64
	}{
		{"usage after the denial", []Hit{full, usage}, map[string]int64{"usage": 4, "plain": 0},
			[]bool{false, true}, []int64{0, 1}},
		{"usage before the denial", []Hit{usage, full}, map[string]int64{"usage": 4},
			[]bool{true, false}, []int64{1, 0}},
		{"a plain hit looks past the usage", []Hit{plain, full, usage}, map[string]int64{"plain": 0, "usage": 4},
			[]bool{true, false, true}, []int64{5, 0, 1}},
		{"a charge past the limit blocks and is kept", []Hit{plain, {Key: "usage", Spec: spec, Cost: 9, Usage: true}},
			map[string]int64{"plain": 0, "usage": 9}, []bool{true, false}, []int64{5, 0}},
		{"a usage refund gives back in a blocked call", []Hit{{Key: "full", Spec: spec, Cost: 2, Refund: true, Usage: true}, {Key: "plain", Spec: spec, Cost: 6}},
			map[string]int64{"full": 3, "plain": 0}, []bool{true, false}, []int64{2, 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			now := time.UnixMicro(1767225600000000)
			m := NewMemory(MemoryOptions{Now: func() time.Time { return now }})
			fill := []Hit{{Key: "full", Spec: spec, Cost: 5}}
			if _, err := m.Evaluate(t.Context(), fill, make([]Decision, 1)); err != nil {
				t.Fatal(err)
			}
			got := make([]Decision, len(c.hits))
			blocked, err := m.Evaluate(t.Context(), c.hits, got)
			if err != nil {
				t.Fatal(err)
			}
			if !blocked {
				t.Fatalf("not blocked (%+v)", got)
			}
			for i := range got {
				if got[i].Allowed != c.allowed[i] || got[i].Remaining != c.remain[i] {
					t.Errorf("hit %d: %+v, want allowed %v remaining %d", i, got[i], c.allowed[i], c.remain[i])
				}
			}
			for key, n := range c.want {
				look := make([]Decision, 1)
				if _, err := m.Evaluate(t.Context(), []Hit{{Key: key, Spec: spec}}, look); err != nil {
					t.Fatal(err)
				}
				if left := max(0, spec.Limit-n); look[0].Remaining != left {
					t.Errorf("%s: a look sees %d remaining, want %d (counted %d)", key, look[0].Remaining, left, n)
				}
			}
		})
	}
}
