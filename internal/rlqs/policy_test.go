package rlqs

import (
	"math"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

func TestShare(t *testing.T) {
	for _, c := range []struct {
		own, fleet int64
		want       float64
	}{
		{0, 0, 1}, {10, 10, 1}, {10, 5, 1}, {10, 40, 11.0 / 41}, {0, 99, 0.01},
	} {
		if got := share(c.own, c.fleet); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("share(%d, %d) = %v, want %v", c.own, c.fleet, got, c.want)
		}
	}
}

func TestFleetRate(t *testing.T) {
	const h = 5 * time.Second
	for _, c := range []struct {
		name  string
		c     counter
		rate  float64
		spent bool
		until time.Duration
	}{
		{"fixed window: what is left over what is left of the window",
			counter{spec: limit.Spec{Limit: 600, Window: time.Minute}, dec: limit.Decision{Remaining: 300, ResetAfter: 30 * time.Second}}, 10, false, 0},
		{"fixed window in its last second: what is left, at once",
			counter{spec: limit.Spec{Limit: 600, Window: time.Minute}, dec: limit.Decision{Remaining: 4, ResetAfter: 200 * time.Millisecond}}, 4, false, 0},
		{"fixed window spent: until it ends",
			counter{spec: limit.Spec{Limit: 600, Window: time.Minute}, dec: limit.Decision{ResetAfter: 12 * time.Second}}, 0, true, 12 * time.Second},
		{"token bucket: the refill, and what it holds over the horizon",
			counter{spec: limit.Spec{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}, dec: limit.Decision{Remaining: 20}}, 14, false, 0},
		{"sliding window in steady state: the sustained rate",
			counter{spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 600, Window: time.Minute}, dec: limit.Decision{Remaining: 0}}, 10, false, 0},
		{"sliding window unused: the whole limit over the horizon",
			counter{spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 600, Window: time.Minute}, dec: limit.Decision{Remaining: 600}}, 120, false, 0},
		{"sliding window of a second, unused: it renews five times over the horizon, its sustained rate",
			counter{spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Second}, dec: limit.Decision{Remaining: 5}}, 5, false, 0},
		{"sliding window of a second, spent now: it too renews within the horizon",
			counter{spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Second}, dec: limit.Decision{Remaining: 0}}, 5, false, 0},
		{"sliding window as long as the horizon: its sustained rate",
			counter{spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 50, Window: h}, dec: limit.Decision{Remaining: 20}}, 10, false, 0},
		{"a limit of 0: spent, with no end",
			counter{spec: limit.Spec{Algorithm: limit.GCRA, Limit: 0, Window: time.Second}}, 0, true, 0},
	} {
		rate, spent, until := fleetRate(&c.c, h)
		if math.Abs(rate-c.rate) > 1e-9 || spent != c.spent || until != c.until {
			t.Errorf("%s: got %v %v %v, want %v %v %v", c.name, rate, spent, until, c.rate, c.spent, c.until)
		}
	}
}

func TestTokens(t *testing.T) {
	tb := func(per, most uint32, fill time.Duration) strategy {
		return strategy{kind: tokenBucket, perFill: per, maxTokens: most, fill: fill}
	}
	for _, c := range []struct {
		name         string
		rate, budget float64
		prev, want   strategy
	}{
		{"a fast rate refills every second, a quarter second's worth at once", 9.4, math.Inf(1), strategy{}, tb(9, 3, time.Second)},
		{"the budget caps the bucket", 9.4, 1.7, strategy{}, tb(9, 1, time.Second)},
		{"a slow rate refills every 10 s", 0.34, math.Inf(1), strategy{}, tb(3, 1, slowFill)},
		{"a trickle at the least", 0.001, math.Inf(1), strategy{}, tb(1, 1, slowFill)},
		{"within rounding of the one in force: kept", 9.6, math.Inf(1), tb(9, 3, time.Second), tb(9, 3, time.Second)},
		{"past rounding: changed", 9.8, math.Inf(1), tb(9, 3, time.Second), tb(10, 3, time.Second)},
		{"5 % of a large rate: kept", 1040, math.Inf(1), tb(1000, 250, time.Second), tb(1000, 250, time.Second)},
		{"only the fill interval would change: one more token, for Envoy 1.40 to see it",
			2, 1, tb(2, 1, slowFill), tb(2, 2, time.Second)},
	} {
		if got := tokens(c.rate, c.budget, c.prev); got != c.want {
			t.Errorf("%s: tokens(%v, %v, %+v) = %+v, want %+v", c.name, c.rate, c.budget, c.prev, got, c.want)
		}
	}
}

func TestDecide(t *testing.T) {
	fixed := limit.Spec{Limit: 600, Window: time.Minute}
	sliding := limit.Spec{Algorithm: limit.SlidingWindow, Limit: 60, Window: time.Minute}
	cs := []counter{
		{spec: fixed, dec: limit.Decision{Remaining: 300, ResetAfter: 30 * time.Second}},
		{spec: sliding, dec: limit.Decision{Remaining: 0}},
	}
	// The slower of the two limits decides: 1 a second, all of it to a
	// lone stream; the fixed window's end is when to look again.
	s, wake := decide(cs, 10, 10, 5*time.Second, strategy{})
	if want := (strategy{kind: tokenBucket, perFill: 10, maxTokens: 1, fill: slowFill}); s != want || wake != 30*time.Second {
		t.Fatalf("decide = %+v, %v; want %+v, 30s", s, wake, want)
	}
	cs[0].dec = limit.Decision{Remaining: 0, ResetAfter: 7 * time.Second}
	if s, wake := decide(cs, 10, 10, 5*time.Second, strategy{}); s.kind != denyAll || wake != 7*time.Second {
		t.Fatalf("spent: decide = %+v, %v; want deny-all until 7s", s, wake)
	}
	if s, _ := decide(nil, 10, 10, 5*time.Second, strategy{}); s.kind != allowAll {
		t.Fatalf("no counted limit: %+v, want allow-all", s)
	}
}

func TestUnseen(t *testing.T) {
	const h = 5 * time.Second
	for _, c := range []struct {
		name          string
		share         float64
		left, elapsed time.Duration
		want          float64
	}{
		{"a lone stream has nothing unseen", 1, 30 * time.Second, 30 * time.Second, 1},
		{"half an interval of the others' half", 0.5, 25 * time.Second, 35 * time.Second, 1 - 0.5*2.5/25},
		{"a window just begun: nothing admitted in it yet", 0.5, 59 * time.Second, 50 * time.Millisecond, 1 - 0.5*0.05/59},
		{"a window that began a second ago", 0.25, 9 * time.Second, time.Second, 1 - 0.75*1.0/9},
		{"a window ending within half an interval", 0.25, time.Second, 59 * time.Second, 0.25},
		{"a window ended", 0.25, 0, time.Minute, 0.25},
	} {
		if got := unseen(c.share, h, c.left, c.elapsed); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("%s: unseen(%v, %v, %v, %v) = %v, want %v", c.name, c.share, h, c.left, c.elapsed, got, c.want)
		}
	}
}
