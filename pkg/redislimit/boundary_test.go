package redislimit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/pkg/internal/twin"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// A boundary step: at offset from the test's start, a hit of cost on the
// counter, and the decision it must get.
type boundaryStep struct {
	at   time.Duration
	cost int64
	want limit.Decision
}

func allow(remaining int64, reset time.Duration) limit.Decision {
	return limit.Decision{Allowed: true, Remaining: remaining, ResetAfter: reset}
}

func deny(remaining int64, reset, retry time.Duration) limit.Decision {
	return limit.Decision{Remaining: remaining, ResetAfter: reset, RetryAfter: retry}
}

const us = time.Microsecond

// TestBoundaries walks each algorithm to its exact edges with a controlled
// now: the hit that fills the limit passes, the next is denied with the
// exact retry-after, one µs before the retry-after it is still denied, at
// the retry-after it passes, and at the reset the counter is whole again
// (a peek, cost 0, sees the full limit). The start is aligned to a window
// boundary (a multiple of every window here).
//
// Bucket rates are one per u = 2^20 µs, exact in binary, so that the µs
// edges show the semantics rather than rounding (with one per second, the
// retry-after 1 µs before the edge is 2 µs: 1e-6 is not a binary fraction).
func TestBoundaries(t *testing.T) {
	sec := time.Second
	const u = 1 << 20 * us
	tests := []struct {
		name  string
		spec  limit.Spec
		steps []boundaryStep
	}{
		{"fixed_window", limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: sec}, []boundaryStep{
			{0, 1, allow(2, sec)},
			{0, 1, allow(1, sec)},
			{100 * time.Millisecond, 1, allow(0, 900*time.Millisecond)},
			{100 * time.Millisecond, 1, deny(0, 900*time.Millisecond, 900*time.Millisecond)},
			{sec - us, 1, deny(0, us, us)},
			{sec - us, 0, allow(0, us)},
			{sec, 0, allow(3, sec)}, // whole again at the reset
			{sec, 3, allow(0, sec)},
			{sec, 1, deny(0, sec, sec)},
		}},
		{"fixed_window cost above the limit", limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: sec}, []boundaryStep{
			{0, 1, allow(2, sec)},
			{0, 4, limit.Decision{Remaining: 2, ResetAfter: sec, Never: true}},
			{0, 2, allow(0, sec)},
		}},
		{"sliding_window precision 1", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 4, Window: sec}, []boundaryStep{
			{0, 3, allow(1, 2*sec)},
			{0, 1, allow(0, 2*sec)},
			// The previous window's 4 weigh 4·(1 − x/W); a hit fits when
			// that is <= 3, at x = 250 ms.
			{0, 1, deny(0, 2*sec, 1250*time.Millisecond)},
			{1250*time.Millisecond - us, 1, deny(0, 2*sec-1250*time.Millisecond+us, us)},
			{1250 * time.Millisecond, 1, allow(0, 3*sec-1250*time.Millisecond)},
			{2 * sec, 0, allow(3, sec)},
			{3 * sec, 0, allow(4, 0)}, // whole again at the reset
		}},
		{"sliding_window precision 4", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 4, Window: sec, Precision: 4}, []boundaryStep{
			// g = 250 ms; 2 hits in each of sub-windows 0 and 1.
			{0, 2, allow(2, 1250*time.Millisecond)},
			{250 * time.Millisecond, 2, allow(0, 1250*time.Millisecond)},
			// Sub-window 0 becomes the weighted one at 1 s: 2 + 2·(1 − x/g)
			// fits a hit of 1 from x = 125 ms.
			{500 * time.Millisecond, 1, deny(0, sec, 625*time.Millisecond)},
			{1125*time.Millisecond - us, 1, deny(0, 375*time.Millisecond+us, us)},
			{1125 * time.Millisecond, 1, allow(0, 1125*time.Millisecond)},
			{2250 * time.Millisecond, 0, allow(4, 0)}, // every sub-window expired
		}},
		{"sliding_log", limit.Spec{Algorithm: limit.SlidingLog, Limit: 3, Window: sec}, []boundaryStep{
			{0, 1, allow(2, sec)},
			{100 * time.Millisecond, 1, allow(1, sec)},
			{200 * time.Millisecond, 1, allow(0, sec)},
			// The oldest entry (0) leaves at 1 s.
			{300 * time.Millisecond, 1, deny(0, 900*time.Millisecond, 700*time.Millisecond)},
			{300 * time.Millisecond, 2, deny(0, 900*time.Millisecond, 800*time.Millisecond)},
			{sec - us, 1, deny(0, 200*time.Millisecond+us, us)},
			{sec, 1, allow(0, sec)},
			{2 * sec, 0, allow(3, 0)}, // whole again at the reset
		}},
		{"token_bucket", limit.Spec{Algorithm: limit.TokenBucket, Limit: 3, Window: 3 * u}, []boundaryStep{
			// One token per u, starts full with 3.
			{0, 1, allow(2, u)},
			{0, 2, allow(0, 3*u)},
			{0, 1, deny(0, 3*u, u)},
			{u - us, 1, deny(0, 2*u+us, us)},
			{u, 1, allow(0, 3*u)},
			{4 * u, 0, allow(3, 0)}, // whole again at the reset
			{4 * u, 3, allow(0, 3*u)},
		}},
		{"token_bucket burst", limit.Spec{Algorithm: limit.TokenBucket, Limit: 1, Window: sec, Burst: 5}, []boundaryStep{
			{0, 5, allow(0, 5*sec)},
			{0, 2, deny(0, 5*sec, 2*sec)},
			{0, 6, limit.Decision{Remaining: 0, ResetAfter: 5 * sec, Never: true}},
			{2 * sec, 2, allow(0, 5*sec)},
		}},
		{"leaky_bucket", limit.Spec{Algorithm: limit.LeakyBucket, Limit: 3, Window: 3 * u}, []boundaryStep{
			// Drains one per u, holds 3.
			{0, 1, allow(2, u)},
			{0, 2, allow(0, 3*u)},
			{0, 1, deny(0, 3*u, u)},
			{u - us, 1, deny(0, 2*u+us, us)},
			{u, 1, allow(0, 3*u)},
			{4 * u, 0, allow(3, 0)}, // whole again at the reset
		}},
		{"gcra", limit.Spec{Algorithm: limit.GCRA, Limit: 3, Window: 3 * u}, []boundaryStep{
			// Emission interval u, tolerance 3u.
			{0, 1, allow(2, u)},
			{0, 2, allow(0, 3*u)},
			{0, 1, deny(0, 3*u, u)},
			{u - us, 1, deny(0, 2*u+us, us)},
			{u, 1, allow(0, 3*u)},
			{4 * u, 0, allow(3, 0)}, // whole again at the reset
		}},
		{"limit 0", limit.Spec{Algorithm: limit.TokenBucket, Limit: 0, Window: sec}, []boundaryStep{
			{0, 1, limit.Decision{Never: true}},
			{0, 0, limit.Decision{Allowed: true}},
		}},
	}
	n := startNode(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// future is a whole hour: a multiple of every window above.
			clk := newClock(future)
			l := newLimiter(t, n.client, clk, "boundary:"+tc.name+":")
			for i, s := range tc.steps {
				clk.set(future.Add(s.at))
				got := decide(t, l, limit.Hit{Key: "k", Spec: tc.spec, Cost: s.cost})[0]
				if got != s.want {
					t.Errorf("step %d (at +%v, cost %d):\n got %+v\nwant %+v", i, s.at, s.cost, got, s.want)
				}
			}
		})
	}
}

// TestCalendarBoundaries checks calendar windows in a time zone: a month
// ends at local midnight, and a daylight-saving day is 23 hours long.
func TestCalendarBoundaries(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	month := limit.Spec{Algorithm: limit.FixedWindow, Limit: 2, Window: 30 * 24 * time.Hour,
		Calendar: paris}
	day := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: 24 * time.Hour,
		Calendar: ny}
	endOfJanuary := time.Date(2031, time.February, 1, 0, 0, 0, 0, paris)
	tests := []struct {
		name string
		spec limit.Spec
		at   time.Time
		cost int64
		want limit.Decision
	}{
		{"month: fill", month, endOfJanuary.Add(-time.Hour), 2, allow(0, time.Hour)},
		{"month: last µs of January", month, endOfJanuary.Add(-us), 1, deny(0, us, us)},
		{"month: February starts at local midnight", month, endOfJanuary, 1, allow(1, 28*24*time.Hour)},
		// 2031-03-09 is the day New York moves to summer time: 01:00 EST
		// to midnight is 22 hours.
		{"dst day: 23 hours", day, time.Date(2031, time.March, 9, 1, 0, 0, 0, ny), 1, allow(0, 22*time.Hour)},
		{"dst day: full", day, time.Date(2031, time.March, 9, 23, 59, 59, 999999000, ny), 1, deny(0, us, us)},
		{"dst day: next day", day, time.Date(2031, time.March, 10, 0, 0, 0, 0, ny), 1, allow(0, 24*time.Hour)},
	}
	n := startNode(t)
	clk := newClock(future)
	l := newLimiter(t, n.client, clk, "calendar:")
	mem := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
	for _, tc := range tests {
		clk.set(tc.at)
		hit := limit.Hit{Key: tc.spec.Calendar.String(), Spec: tc.spec, Cost: tc.cost}
		got := decide(t, l, hit)[0]
		if got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
		if twin := decide(t, mem, hit)[0]; twin != got {
			t.Errorf("%s: Memory decided %+v, Redis %+v", tc.name, twin, got)
		}
	}
}

// TestCalendarClockDisagreement: the server computes calendar boundaries
// around its own clock and Redis's clock picks the window; when the two
// disagree by more than a window, the script refuses with a clear error
// instead of counting in a wrong window.
func TestCalendarClockDisagreement(t *testing.T) {
	n := startNode(t)
	script := redis.NewScript(redislimit.ScriptSource())
	day := int64(24 * time.Hour / time.Microsecond)
	start := future.UnixMicro()
	boundaries := []any{start - day, start, start + day, start + 2*day}
	tests := []struct {
		name    string
		now     int64
		wantErr bool
	}{
		{"previous window", start - 1, false},
		{"current window", start, false},
		{"next window", start + day + 1, false},
		{"before", start - day - 1, true},
		{"after", start + 2*day, true},
	}
	for _, tc := range tests {
		// One request (now, 1 hit) of one calendar hit (flags 4).
		spec := fmt.Sprintf("%d:10:%d:10:1", limit.FixedWindow, day)
		args := append([]any{tc.now, 1, spec, 1, 4}, boundaries...)
		reply, err := script.Run(context.Background(), n.client, []string{"{cal}k"}, args...).Slice()
		if err == nil {
			// The error of a request is its element of the reply.
			err, _ = reply[0].(error)
		}
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.name, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "clocks disagree") {
			t.Errorf("%s: err = %v, want it to say the clocks disagree", tc.name, err)
		}
	}
}

// TestGCRABurst: B hits at one instant (one request of B hits on one
// counter, so one instant of Redis's clock) all pass and the next is
// denied, for every limit 1..100 and windows of a second to a day.
func TestGCRABurst(t *testing.T) {
	n := startNode(t)
	clk := newClock(future.Add(123456789 * us))
	l := newLimiter(t, n.client, clk, "gcraburst:")
	for _, w := range []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour} {
		for lim := int64(1); lim <= 100; lim++ {
			sp := limit.Spec{Algorithm: limit.GCRA, Limit: lim, Window: w}
			key := fmt.Sprint(lim, "/", w)
			hits := make([]limit.Hit, lim+1)
			for i := range hits {
				hits[i] = limit.Hit{Key: key, Spec: sp, Cost: 1}
			}
			d := decide(t, l, hits[:lim]...)
			for i := range d {
				if !d[i].Allowed || d[i].Remaining != lim-1-int64(i) {
					t.Fatalf("%d/%v: hit %d of the burst: %+v", lim, w, i+1, d[i])
				}
			}
			if d := decide(t, l, hits[0])[0]; d.Allowed {
				t.Fatalf("%d/%v: hit beyond the burst allowed: %+v", lim, w, d)
			}
		}
	}
}

// TestGCRALegacyState: a counter written before arrival times had units
// (a plain TAT in µs) keeps its meaning.
func TestGCRALegacyState(t *testing.T) {
	n := startNode(t)
	clk := newClock(future.Add(777777 * us))
	l := newLimiter(t, n.client, clk, "gcralegacy:")
	sp := limit.Spec{Algorithm: limit.GCRA, Limit: 10, Window: time.Second}
	// Half a second ahead of now: 5 of 10 intervals used.
	tat := clk.micros() - twin.GCRAEpoch + 500000
	if err := n.client.Set(context.Background(), redislimit.Key("gcralegacy:", "k"), tat, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if got, want := decide(t, l, limit.Hit{Key: "k", Spec: sp, Cost: 1})[0], allow(4, 600*time.Millisecond); got != want {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
