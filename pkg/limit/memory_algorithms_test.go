package limit_test

import (
	"testing"
	"time"
	_ "time/tzdata" // calendar tests need America/New_York whatever the machine has

	"github.com/floodgate/floodgate/pkg/limit"
)

// tick is one hit at an instant (relative to a case's start) and the
// decision it must get.
type tick struct {
	at     time.Duration
	cost   int64
	refund bool
	want   limit.Decision
}

// runTicks plays ticks on one key of a fresh Memory.
func runTicks(t *testing.T, spec limit.Spec, start time.Time, ticks []tick) {
	t.Helper()
	clk := newClock(start)
	m := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
	for i, tk := range ticks {
		clk.Set(start.Add(tk.at))
		got := eval(t, m, limit.Hit{Key: "k", Spec: spec, Cost: tk.cost, Refund: tk.refund})[0]
		if got != tk.want {
			t.Errorf("tick %d (at %v, cost %d, refund %v):\n got %+v\nwant %+v", i, tk.at, tk.cost, tk.refund, got, tk.want)
		}
	}
}

// TestBoundaries asserts every field of every decision around the edges of
// each algorithm: the hit that fills the limit, the next one and its
// RetryAfter, the instant one µs before it passes and the instant it does,
// and the counter being whole again exactly at its reset. Values are worked
// out by hand in the comments.
func TestBoundaries(t *testing.T) {
	buckets := []tick{
		// Burst of 4 at once empties the bucket; refilling takes 4·2^18 µs.
		{0, 4, false, allow(0, 1048576*us)},
		{0, 1, false, deny(0, 1048576*us, 262144*us)},
		// Denials write nothing: a flood does not move the retry instant.
		{100 * us, 1, false, deny(0, 1048476*us, 262044*us)},
		{200 * us, 4, false, deny(0, 1048376*us, 1048376*us)},
		{262143 * us, 1, false, deny(0, 786433*us, 1*us)},
		{262144 * us, 1, false, allow(0, 1048576*us)},
		// Whole again 4·2^18 µs after the last hit, not one µs earlier.
		{262144*us + 1048575*us, 0, false, allow(3, 1*us)},
		{262144*us + 1048576*us, 0, false, allow(4, 0)},
		// A refund never fills beyond the capacity.
		{262144*us + 1048576*us, 2, true, allow(4, 0)},
		{262144*us + 1048576*us, 4, false, allow(0, 1048576*us)},
		{262144*us + 1048576*us, 1, false, deny(0, 1048576*us, 262144*us)},
		// Cost above the capacity can never pass.
		{262144*us + 1048576*us, 5, false, never(0, 1048576*us)},
	}
	cases := []struct {
		name  string
		spec  limit.Spec
		ticks []tick
	}{
		{"fixed_window", limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: 10 * time.Second}, []tick{
			{1 * time.Second, 1, false, allow(2, 9*time.Second)},
			{1 * time.Second, 1, false, allow(1, 9*time.Second)},
			{2 * time.Second, 1, false, allow(0, 8*time.Second)},
			{2 * time.Second, 0, false, allow(0, 8*time.Second)},
			{2 * time.Second, 1, false, deny(0, 8*time.Second, 8*time.Second)},
			{5 * time.Second, 1, false, deny(0, 5*time.Second, 5*time.Second)},
			{5 * time.Second, 4, false, never(0, 5*time.Second)},
			{10*time.Second - us, 1, false, deny(0, us, us)},
			{10 * time.Second, 0, false, allow(3, 10*time.Second)},
			{10 * time.Second, 3, false, allow(0, 10*time.Second)},
			{11 * time.Second, 2, true, allow(2, 9*time.Second)},
			{11 * time.Second, 5, true, allow(3, 9*time.Second)},
			{11 * time.Second, 3, false, allow(0, 9*time.Second)},
			{11 * time.Second, 1, false, deny(0, 9*time.Second, 9*time.Second)},
		}},
		// Precision 1, g = 10 s. At 12 s the previous window (8 hits)
		// weighs 8·(10−2)/10 = 6.4.
		{"sliding_window/precision_1", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 10, Window: 10 * time.Second}, []tick{
			{2 * time.Second, 8, false, allow(2, 18*time.Second)},
			// est 6.4 + 3 = 9.4 <= 10; Remaining floor(0.6) = 0.
			{12 * time.Second, 3, false, allow(0, 18*time.Second)},
			// est 9.4 + 1 > 10. 3 + 8·(10−y)/10 + 1 = 10 at y = 2.5 s.
			{12 * time.Second, 1, false, deny(0, 18*time.Second, 500*time.Millisecond)},
			{12500*time.Millisecond - us, 1, false, deny(0, 17500001*us, us)},
			{12500 * time.Millisecond, 1, false, allow(0, 17500*time.Millisecond)},
			// The newest window (index 1) stops counting at 30 s.
			{30*time.Second - us, 0, false, allow(9, us)},
			{30 * time.Second, 0, false, allow(10, 0)},
		}},
		// Precision 4, g = 2.5 s: 4 hits in sub-window 0, 3 in 1.
		{"sliding_window/precision_4", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 10, Window: 10 * time.Second, Precision: 4}, []tick{
			{500 * time.Millisecond, 4, false, allow(6, 12*time.Second)},
			{3 * time.Second, 3, false, allow(3, 12*time.Second)},
			// At 10.5 s (sub-window 4, x = 0.5 s): full 3, old 4,
			// est = 3 + 4·2/2.5 = 6.2; Remaining floor(3.8) = 3.
			{10500 * time.Millisecond, 0, false, allow(3, 4500*time.Millisecond)},
			// 3 + 4·(2.5−x)/2.5 + 4 = 10 at x = 0.625 s.
			{10500 * time.Millisecond, 4, false, deny(3, 4500*time.Millisecond, 125*time.Millisecond)},
			{10625*time.Millisecond - us, 4, false, deny(3, 4375001*us, us)},
			{10625 * time.Millisecond, 4, false, allow(0, 11875*time.Millisecond)},
			// Sub-window 4 stops counting at (4+4+1)·2.5 s.
			{22500*time.Millisecond - us, 0, false, allow(9, us)},
			{22500 * time.Millisecond, 0, false, allow(10, 0)},
		}},
		// Precision 4: a retry that lies beyond the current sub-window.
		{"sliding_window/retry_walk", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 10, Window: 10 * time.Second, Precision: 4}, []tick{
			{1 * time.Second, 2, false, allow(8, 11500*time.Millisecond)},
			{5500 * time.Millisecond, 8, false, allow(0, 12*time.Second)},
			{7600 * time.Millisecond, 0, false, allow(0, 9900*time.Millisecond)},
			// Sub-window 0 (2 hits) becomes old at 10 s: 8 + 2·(2.5−x)/2.5
			// + 1 = 10 at x = 1.25 s, so at 11.25 s.
			{7600 * time.Millisecond, 1, false, deny(0, 9900*time.Millisecond, 3650*time.Millisecond)},
			// Cost 3 waits for sub-window 2 (8 hits) to be old, from 15 s:
			// 8·(2.5−x)/2.5 + 3 = 10 at x = 0.3125 s.
			{7600 * time.Millisecond, 3, false, deny(0, 9900*time.Millisecond, 7712500*us)},
			{11250*time.Millisecond - us, 1, false, deny(0, 6250001*us, us)},
			{11250 * time.Millisecond, 1, false, allow(0, 11250*time.Millisecond)},
		}},
		{"sliding_log", limit.Spec{Algorithm: limit.SlidingLog, Limit: 3, Window: 10 * time.Second}, []tick{
			{1 * time.Second, 1, false, allow(2, 10*time.Second)},
			{2 * time.Second, 2, false, allow(0, 10*time.Second)},
			{5 * time.Second, 0, false, allow(0, 7*time.Second)},
			// Cost 2 needs the 2nd oldest entry (at 2 s) gone; cost 1 the
			// oldest (at 1 s).
			{5 * time.Second, 2, false, deny(0, 7*time.Second, 7*time.Second)},
			{5 * time.Second, 1, false, deny(0, 7*time.Second, 6*time.Second)},
			{5 * time.Second, 4, false, never(0, 7*time.Second)},
			{11*time.Second - us, 1, false, deny(0, 1000001*us, us)},
			{11 * time.Second, 1, false, allow(0, 10*time.Second)},
			// Refunds remove the newest entries: 11 s, then one at 2 s.
			{11500 * time.Millisecond, 2, true, allow(2, 500*time.Millisecond)},
			{11500 * time.Millisecond, 5, true, allow(3, 0)},
			{11500 * time.Millisecond, 3, false, allow(0, 10*time.Second)},
			{11500 * time.Millisecond, 1, false, deny(0, 10*time.Second, 10*time.Second)},
			{21500 * time.Millisecond, 0, false, allow(3, 0)},
		}},
		{"token_bucket", limit.Spec{Algorithm: limit.TokenBucket, Limit: 4, Window: dyadic}, buckets},
		{"leaky_bucket", limit.Spec{Algorithm: limit.LeakyBucket, Limit: 4, Window: dyadic}, buckets},
		{"gcra", limit.Spec{Algorithm: limit.GCRA, Limit: 4, Window: dyadic}, buckets},
		{"gcra/one_by_one", limit.Spec{Algorithm: limit.GCRA, Limit: 4, Window: dyadic}, []tick{
			{0, 1, false, allow(3, 262144*us)},
			{0, 1, false, allow(2, 524288*us)},
			{0, 1, false, allow(1, 786432*us)},
			{0, 1, false, allow(0, 1048576*us)},
			{0, 1, false, deny(0, 1048576*us, 262144*us)},
		}},
		// Burst 8 above a rate of 4 per 2^20 µs.
		{"token_bucket/burst", limit.Spec{Algorithm: limit.TokenBucket, Limit: 4, Window: dyadic, Burst: 8}, []tick{
			{0, 0, false, allow(8, 0)},
			{0, 9, false, never(8, 0)},
			{0, 8, false, allow(0, 2097152*us)},
			{262144 * us, 2, false, deny(1, 1835008*us, 262144*us)},
		}},
		{"leaky_bucket/burst", limit.Spec{Algorithm: limit.LeakyBucket, Limit: 4, Window: dyadic, Burst: 8}, []tick{
			{0, 0, false, allow(8, 0)},
			{0, 9, false, never(8, 0)},
			{0, 8, false, allow(0, 2097152*us)},
			{262144 * us, 2, false, deny(1, 1835008*us, 262144*us)},
		}},
		{"gcra/burst", limit.Spec{Algorithm: limit.GCRA, Limit: 4, Window: dyadic, Burst: 8}, []tick{
			{0, 0, false, allow(8, 0)},
			{0, 9, false, never(8, 0)},
			{0, 8, false, allow(0, 2097152*us)},
			{262144 * us, 2, false, deny(1, 1835008*us, 262144*us)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runTicks(t, c.spec, base, c.ticks) })
	}
}

// TestCalendarWindows checks fixed windows that follow the calendar,
// including months and days that daylight saving time makes shorter or
// longer than their nominal length.
func TestCalendarWindows(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	spec := func(loc *time.Location, period time.Duration) limit.Spec {
		return limit.Spec{Algorithm: limit.FixedWindow, Limit: 2, Window: period, Calendar: loc}
	}
	day, month := 24*time.Hour, 30*24*time.Hour
	cases := []struct {
		name  string
		spec  limit.Spec
		start time.Time
		ticks []tick
	}{
		// March 2026 in New York: from Mar 1 00:00 EST (05:00Z) to Apr 1
		// 00:00 EDT (04:00Z), 31 days less the hour DST takes on Mar 8.
		{"month/new_york/march", spec(ny, month), time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC), []tick{
			{-us, 2, false, allow(0, us)},
			{0, 1, false, allow(1, 743*time.Hour)},
			// Mar 15 12:00 EDT is 16:00Z: 16 days 12 hours before Apr 1.
			{14*day + 11*time.Hour, 1, false, allow(0, 396*time.Hour)},
			{14*day + 11*time.Hour, 1, false, deny(0, 396*time.Hour, 396*time.Hour)},
			{743*time.Hour - us, 1, false, deny(0, us, us)},
			{743 * time.Hour, 1, false, allow(1, 720*time.Hour)},
		}},
		// November 2026 gets the hour back on Nov 1: 30 days + 1 hour.
		{"month/new_york/november", spec(ny, month), time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), []tick{
			{0, 2, false, allow(0, 721*time.Hour)},
			{721*time.Hour - us, 1, false, deny(0, us, us)},
			{721 * time.Hour, 1, false, allow(1, 31*24*time.Hour)},
		}},
		// Mar 8 2026 in New York lasts 23 hours.
		{"day/new_york/dst", spec(ny, day), time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), []tick{
			{0, 2, false, allow(0, 23*time.Hour)},
			{23*time.Hour - us, 1, false, deny(0, us, us)},
			{23 * time.Hour, 1, false, allow(1, 24*time.Hour)},
		}},
		// 2026-01-01 is a Thursday noon: the week ends Monday Jan 5 00:00.
		{"week/starts_monday", spec(time.UTC, 7*day), base.Add(12 * time.Hour), []tick{
			{0, 2, false, allow(0, 84*time.Hour)},
			{0, 1, false, deny(0, 84*time.Hour, 84*time.Hour)},
			{84*time.Hour - us, 1, false, deny(0, us, us)},
			{84 * time.Hour, 1, false, allow(1, 7*day)},
		}},
		{"year", spec(time.UTC, 365*day), base, []tick{
			{0, 2, false, allow(0, 365*day)},
			{365*day - us, 1, false, deny(0, us, us)},
			// 2027 is not a leap year either; 2028 is.
			{365 * day, 1, false, allow(1, 365*day)},
			{730 * day, 1, false, allow(1, 366*day)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { runTicks(t, c.spec, c.start, c.ticks) })
	}
}

// exactSpecs returns one spec per algorithm with Limit 4 and a dyadic
// window, so that every algorithm's arithmetic is exact, and capacity 4.
func exactSpecs() []limit.Spec {
	var out []limit.Spec
	for _, a := range limit.Algorithms() {
		s := limit.Spec{Algorithm: a, Limit: 4, Window: dyadic}
		if a == limit.SlidingWindow {
			s.Precision = 4
		}
		out = append(out, s)
	}
	return out
}

// TestCommonRules checks, for every algorithm, the rules the package
// documentation states for all of them.
func TestCommonRules(t *testing.T) {
	for _, spec := range exactSpecs() {
		t.Run(spec.Algorithm.String(), func(t *testing.T) {
			hit := func(cost int64) limit.Hit { return limit.Hit{Key: "k", Spec: spec, Cost: cost} }
			refund := func(cost int64) limit.Hit { return limit.Hit{Key: "k", Spec: spec, Cost: cost, Refund: true} }
			capacity := spec.Capacity()

			t.Run("peek_does_not_consume", func(t *testing.T) {
				m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
				eval(t, m, hit(capacity-1))
				first := eval(t, m, hit(0))[0]
				for i := 0; i < 3; i++ {
					if d := eval(t, m, hit(0))[0]; d != first || !d.Allowed || d.Remaining != 1 {
						t.Fatalf("peek %d: %+v, first peek %+v", i, d, first)
					}
				}
				if d := eval(t, m, hit(1))[0]; !d.Allowed {
					t.Fatalf("last hit denied after peeks: %+v", d)
				}
				if d := eval(t, m, hit(1))[0]; d.Allowed {
					t.Fatalf("hit beyond capacity allowed: %+v", d)
				}
			})

			t.Run("cost_above_capacity_is_never", func(t *testing.T) {
				m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
				eval(t, m, hit(1))
				peek := eval(t, m, hit(0))[0]
				got := eval(t, m, hit(capacity+1))[0]
				want := peek
				want.Allowed, want.Never = false, true
				if got != want {
					t.Fatalf("got %+v, want %+v", got, want)
				}
				if after := eval(t, m, hit(0))[0]; after != peek {
					t.Fatalf("the Never hit changed the state: peek %+v, then %+v", peek, after)
				}
			})

			t.Run("limit_0_blocks", func(t *testing.T) {
				m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
				zero := spec
				zero.Limit = 0
				h := limit.Hit{Key: "k", Spec: zero, Cost: 1}
				if d := eval(t, m, h)[0]; d != (limit.Decision{Never: true}) {
					t.Fatalf("cost 1: %+v", d)
				}
				h.Cost = 0
				if d := eval(t, m, h)[0]; d != (limit.Decision{Allowed: true}) {
					t.Fatalf("peek: %+v", d)
				}
				h.Cost, h.Refund = 1, true
				if d := eval(t, m, h)[0]; d != (limit.Decision{Allowed: true}) {
					t.Fatalf("refund: %+v", d)
				}
				if n := m.Stats().Entries; n != 0 {
					t.Fatalf("Len = %d, want 0", n)
				}
			})

			t.Run("refund_never_exceeds_capacity", func(t *testing.T) {
				m := limit.NewMemory(limit.MemoryOptions{Now: newClock(base).Now})
				if d := eval(t, m, refund(5))[0]; !d.Allowed || d.Remaining != capacity {
					t.Fatalf("refund on no state: %+v", d)
				}
				if n := m.Stats().Entries; n != 0 {
					t.Fatalf("a refund on no state stored something: Len = %d", n)
				}
				eval(t, m, hit(1))
				if d := eval(t, m, refund(5))[0]; !d.Allowed || d.Remaining != capacity {
					t.Fatalf("refund after 1 hit: %+v", d)
				}
				for i := int64(0); i < capacity; i++ {
					if d := eval(t, m, hit(1))[0]; !d.Allowed {
						t.Fatalf("hit %d after refund denied: %+v", i, d)
					}
				}
				if d := eval(t, m, hit(1))[0]; d.Allowed {
					t.Fatalf("refund created capacity: %+v", d)
				}
			})

			t.Run("retry_after_is_exact", func(t *testing.T) {
				clk := newClock(base.Add(1000 * us))
				m := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
				eval(t, m, hit(capacity))
				denied := eval(t, m, hit(1))[0]
				if denied.Allowed || denied.RetryAfter <= 0 {
					t.Fatalf("hit on a full counter: %+v", denied)
				}
				clk.Add(denied.RetryAfter - us)
				if d := eval(t, m, hit(1))[0]; d.Allowed {
					t.Fatalf("allowed 1µs before RetryAfter %v: %+v", denied.RetryAfter, d)
				}
				clk.Add(us)
				if d := eval(t, m, hit(1))[0]; !d.Allowed {
					t.Fatalf("denied at RetryAfter %v: %+v", denied.RetryAfter, d)
				}
			})

			t.Run("whole_and_expired_exactly_at_reset", func(t *testing.T) {
				clk := newClock(base.Add(1000 * us))
				m := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
				reset := eval(t, m, hit(capacity))[0].ResetAfter
				clk.Add(reset - us)
				if d := eval(t, m, hit(0))[0]; d.Remaining >= capacity || m.Stats().Entries != 1 {
					t.Fatalf("1µs before ResetAfter %v: %+v, Entries %d", reset, d, m.Stats().Entries)
				}
				clk.Add(us)
				if d := eval(t, m, hit(0))[0]; d.Remaining != capacity {
					t.Fatalf("at ResetAfter %v: %+v", reset, d)
				}
				if n := m.Stats().Entries; n != 0 {
					t.Fatalf("Len at ResetAfter = %d, want 0", n)
				}
			})

			t.Run("denials_write_nothing", func(t *testing.T) {
				// Two stores with the same history, one of which also gets
				// a flood of denied hits, must answer alike afterwards.
				clk := newClock(base.Add(1000 * us))
				quiet := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
				flooded := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
				eval(t, quiet, hit(capacity))
				eval(t, flooded, hit(capacity))
				start := clk.Now()
				reset := eval(t, quiet, hit(0))[0].ResetAfter
				for i := 0; i < 50; i++ {
					clk.Set(start.Add(time.Duration(i) * 97 * us))
					if d := eval(t, flooded, hit(1+int64(i)%capacity))[0]; d.Allowed {
						t.Fatalf("flood hit %d allowed: %+v", i, d)
					}
				}
				for at := time.Duration(0); at <= reset; at += reset / 16 {
					clk.Set(start.Add(at))
					if q, f := eval(t, quiet, hit(0))[0], eval(t, flooded, hit(0))[0]; q != f {
						t.Fatalf("at +%v: quiet %+v, flooded %+v", at, q, f)
					}
				}
			})
		})
	}
}

// TestBurstAtOneInstant: a bucket of capacity B admits exactly B hits at
// one instant, whatever the rate, even when W/L is no whole number of µs
// (GCRA's arrival time once drifted on the float grid and admitted B − 1).
func TestBurstAtOneInstant(t *testing.T) {
	instants := []time.Time{
		base.Add(123456789 * us),
		time.Date(2041, 7, 3, 11, 22, 33, 444555000, time.UTC),
	}
	windows := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
	for _, a := range []limit.Algorithm{limit.GCRA, limit.TokenBucket, limit.LeakyBucket} {
		for _, w := range windows {
			for l := int64(1); l <= 100; l++ {
				for _, burst := range []int64{0, l/3 + 1} {
					spec := limit.Spec{Algorithm: a, Limit: l, Window: w, Burst: burst}
					b := spec.Capacity()
					for _, at := range instants {
						m := limit.NewMemory(limit.MemoryOptions{Now: newClock(at).Now})
						for i := int64(0); i < b; i++ {
							if d := eval(t, m, limit.Hit{Key: "k", Spec: spec, Cost: 1})[0]; !d.Allowed || d.Remaining != b-1-i {
								t.Fatalf("%v %d/%v burst %d at %v: hit %d of %d: %+v, want allowed with %d remaining", a, l, w, b, at, i+1, b, d, b-1-i)
							}
						}
						if d := eval(t, m, limit.Hit{Key: "k", Spec: spec, Cost: 1})[0]; d.Allowed {
							t.Fatalf("%v %d/%v burst %d at %v: hit %d allowed: %+v", a, l, w, b, at, b+1, d)
						}
						// The whole burst as one hit passes too.
						m = limit.NewMemory(limit.MemoryOptions{Now: newClock(at).Now})
						if d := eval(t, m, limit.Hit{Key: "k", Spec: spec, Cost: b})[0]; !d.Allowed || d.Remaining != 0 {
							t.Fatalf("%v %d/%v at %v: one hit of cost %d: %+v", a, l, w, at, b, d)
						}
					}
				}
			}
		}
	}
}

// TestLimitChangeKeepsState: a counter keeps its key when a reload changes
// its Limit or Burst, so its stored state must keep its meaning. GCRA
// stores its arrival time in units of the old rate; they are carried over
// in time, so the time the counter is ahead of now is kept, not rescaled.
func TestLimitChangeKeepsState(t *testing.T) {
	perSecond := func(a limit.Algorithm, l int64) limit.Spec {
		return limit.Spec{Algorithm: a, Limit: l, Window: time.Second}
	}
	cases := []struct {
		name        string
		before      limit.Spec
		used        int64 // hits of cost 1 at one instant under before
		after       limit.Spec
		want        limit.Decision // a hit of cost 1 at the same instant under after
		thenAt      time.Duration  // later instant
		thenAllowed int64          // hits of cost 1 that pass there under after
	}{
		// One second of debt is 10 intervals at 10/s: full, next in 100 ms.
		{"gcra 100/s to 10/s", perSecond(limit.GCRA, 100), 100, perSecond(limit.GCRA, 10),
			deny(0, time.Second, 100*time.Millisecond), time.Second, 10},
		// One second of debt is 100 intervals at 100/s: full, next in 10 ms.
		{"gcra 10/s to 100/s", perSecond(limit.GCRA, 10), 10, perSecond(limit.GCRA, 100),
			deny(0, time.Second, 10*time.Millisecond), 500 * time.Millisecond, 50},
		// Half a second of debt: 5 of 10 left.
		{"gcra 100/s half used to 10/s", perSecond(limit.GCRA, 100), 50, perSecond(limit.GCRA, 10),
			allow(4, 600*time.Millisecond), 0, 0},
		// A new burst changes the tolerance, not the arrival time.
		{"gcra burst 100 to 10", limit.Spec{Algorithm: limit.GCRA, Limit: 10, Window: time.Second, Burst: 100}, 15,
			limit.Spec{Algorithm: limit.GCRA, Limit: 10, Window: time.Second},
			withDebt(deny(0, 1500*time.Millisecond, 600*time.Millisecond), 5), 1500 * time.Millisecond, 10},
		{"token bucket 100/s to 10/s", perSecond(limit.TokenBucket, 100), 100, perSecond(limit.TokenBucket, 10),
			deny(0, time.Second, 100*time.Millisecond), time.Second, 10},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := newClock(base.Add(777777 * us))
			m := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
			for i := int64(0); i < c.used; i++ {
				if d := eval(t, m, limit.Hit{Key: "k", Spec: c.before, Cost: 1})[0]; !d.Allowed {
					t.Fatalf("setup hit %d denied: %+v", i, d)
				}
			}
			if got := eval(t, m, limit.Hit{Key: "k", Spec: c.after, Cost: 1})[0]; got != c.want {
				t.Fatalf("after the change: %+v, want %+v", got, c.want)
			}
			clk.Add(c.thenAt)
			for i := int64(0); i < c.thenAllowed; i++ {
				if d := eval(t, m, limit.Hit{Key: "k", Spec: c.after, Cost: 1})[0]; !d.Allowed {
					t.Fatalf("+%v: hit %d denied: %+v", c.thenAt, i, d)
				}
			}
			if c.thenAllowed > 0 {
				if d := eval(t, m, limit.Hit{Key: "k", Spec: c.after, Cost: 1})[0]; d.Allowed {
					t.Fatalf("+%v: hit %d allowed: %+v", c.thenAt, c.thenAllowed+1, d)
				}
			}
		})
	}
}
