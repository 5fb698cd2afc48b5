package memcachelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// Reset deletes a counter's keys of the window holding now and of the
// windows just before and after it (counted by instances whose clocks are
// a little behind or ahead), wherever they live among three servers, for
// epoch and calendar windows: after it the whole limit passes again,
// another counter keeps its count, and a window two ahead is left alone.
func TestReset(t *testing.T) {
	servers, addrs := start(t, 3)
	for _, spec := range []limit.Spec{
		fixed(4, time.Minute),
		{Algorithm: limit.FixedWindow, Limit: 4, Window: 24 * time.Hour, Calendar: time.UTC},
	} {
		t.Run(spec.Window.String(), func(t *testing.T) {
			now := time.Date(2031, time.March, 9, 12, 30, 0, 0, time.UTC)
			clk := newClock(now)
			l := newLimiter(t, addrs, memcachelimit.Options{KeyPrefix: "r:", Now: clk.now})
			hit := limit.Hit{Key: "k", Spec: spec, Cost: 1}
			other := limit.Hit{Key: "other", Spec: spec, Cost: 1}
			start, end := spec.WindowAt(now)
			prev, _ := spec.WindowAt(start.Add(-time.Microsecond))
			_, after := spec.WindowAt(end)
			windows := []time.Time{prev, now, end, after}
			for _, w := range windows {
				clk.t = w
				evaluate(t, l, hit)
			}
			clk.t = now
			for range 3 {
				evaluate(t, l, hit, other)
			}
			if d := evaluate(t, l, hit)[0]; d.Allowed {
				t.Fatalf("the 5th hit passed: %+v", d)
			}
			for i, w := range windows {
				if _, _, holders := counterOn(t, servers, "r:", hit, w); holders != 1 {
					t.Fatalf("window %d of 4 (%v) is held by %d servers before the reset, want 1", i+1, w, holders)
				}
			}
			if err := l.Reset(context.Background(), hit.Key, spec); err != nil {
				t.Fatal(err)
			}
			for i, w := range windows {
				want := 0 // deleted
				if i == len(windows)-1 {
					want = 1 // two windows ahead: left alone
				}
				if _, _, holders := counterOn(t, servers, "r:", hit, w); holders != want {
					t.Errorf("window %d of 4 (%v) is held by %d servers after the reset, want %d", i+1, w, holders, want)
				}
			}
			if d := evaluate(t, l, limit.Hit{Key: "k", Spec: spec})[0]; !d.Allowed || d.Remaining != 4 {
				t.Errorf("a peek after the reset: %+v, want remaining 4", d)
			}
			for i := range 4 {
				if d := evaluate(t, l, hit)[0]; !d.Allowed {
					t.Fatalf("hit %d after the reset denied: %+v", i+1, d)
				}
			}
			if v, _, _ := counterOn(t, servers, "r:", other, now); v != "3" {
				t.Errorf("the other counter holds %q after the reset, want 3", v)
			}
		})
	}
}

// Another algorithm than a fixed window is refused without asking
// Memcached, and a server that is down fails the reset with ErrStore.
func TestResetErrors(t *testing.T) {
	srv := memcachedtest.Start(t)
	l := newLimiter(t, []string{srv.Addr}, memcachelimit.Options{Timeout: 500 * time.Millisecond})
	err := l.Reset(context.Background(), "k", limit.Spec{Algorithm: limit.TokenBucket, Limit: 1, Window: time.Second})
	if !errors.Is(err, memcachelimit.ErrUnsupported) {
		t.Errorf("reset of a token bucket: %v, want ErrUnsupported", err)
	}
	srv.Stop()
	if err := l.Reset(context.Background(), "k", fixed(1, time.Second)); !errors.Is(err, memcachelimit.ErrStore) {
		t.Errorf("reset with the server down: %v, want ErrStore", err)
	}
}
