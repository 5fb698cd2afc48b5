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
	_ "time/tzdata" // calendar tests need America/New_York whatever the machine has

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

// tick is one hit at an instant (relative to a case's start) and the
// decision it must get.
type tick struct {
	at     time.Duration
	cost   int64
	refund bool
	want   limit.Decision
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

// withDebt is d with Debt set: a counter past a limit lowered under it.
func withDebt(d limit.Decision, debt int64) limit.Decision {
	d.Debt = debt
	return d
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
