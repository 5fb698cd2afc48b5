package redislimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// TestExpiryInstant: every written key expires at the instant its state
// becomes equivalent to none, which for every algorithm is now + ResetAfter
// of the hit that wrote it, rounded up to Redis's milliseconds.
func TestExpiryInstant(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	for _, a := range limit.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			clk := newClock(future.Add(123456789 * time.Microsecond))
			l := newLimiter(t, n.client, clk, "expiry:")
			sp := limit.Spec{Algorithm: a, Limit: 7, Window: 3 * time.Second, Precision: 3}
			for i := range 3 {
				clk.add(time.Duration(i) * 100003 * time.Microsecond)
				d := decide(t, l, limit.Hit{Key: a.String(), Spec: sp, Cost: 2})[0]
				got, err := n.client.PExpireTime(ctx, redislimit.Key("expiry:", a.String())).Result()
				if err != nil {
					t.Fatal(err)
				}
				atMicros := clk.micros() + d.ResetAfter.Microseconds()
				want := time.Duration((atMicros+999)/1000) * time.Millisecond
				if got != want {
					t.Fatalf("hit %d: expires at %v ms, want %v ms (now %d µs + reset %v)", i, got.Milliseconds(), want.Milliseconds(), clk.micros(), d.ResetAfter)
				}
			}
		})
	}
}

// TestKeysExpire: on Redis's own clock, a counter's key disappears by
// itself once its window has passed.
func TestKeysExpire(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	l := newLimiter(t, n.client, nil, "idle:")
	const w = 50 * time.Millisecond
	for _, a := range limit.Algorithms() {
		sp := limit.Spec{Algorithm: a, Limit: 1, Window: w}
		decide(t, l, limit.Hit{Key: a.String(), Spec: sp, Cost: 1})
		ttl, err := n.client.PTTL(ctx, redislimit.Key("idle:", a.String())).Result()
		if err != nil {
			t.Fatal(err)
		}
		// A sliding window of precision 1 lives up to two windows. A hit
		// in the last instant of a fixed window may be gone already
		// (PTTL -2), but never without an expiry (-1).
		if ttl == -1 || ttl > 2*w {
			t.Errorf("%v: PTTL %v right after a hit, want at most %v", a, ttl, 2*w)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		left, err := n.client.Keys(ctx, "idle:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("keys still there 2s after their 50ms windows: %q", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
