package redislimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// Reset deletes a counter's key in every algorithm on a single node,
// Sentinel's master and a Cluster (where the key lives on one master of
// three): after it the key is gone, a peek (cost 0) sees a new counter,
// and the whole capacity passes again at the same instant, while another
// counter keeps its state.
func TestReset(t *testing.T) {
	for _, d := range []struct {
		name string
		cfg  func(t *testing.T) redislimit.ClientConfig
	}{
		{"single", func(t *testing.T) redislimit.ClientConfig {
			return redislimit.ClientConfig{URL: redistest.Start(t).Addr}
		}},
		{"sentinel", func(t *testing.T) redislimit.ClientConfig {
			return redislimit.ClientConfig{Type: "sentinel", URL: redistest.StartSentinel(t, 1, 1, 5*time.Second).URL()}
		}},
		{"cluster", func(t *testing.T) redislimit.ClientConfig {
			return redislimit.ClientConfig{Type: "cluster", URL: strings.Join(redistest.StartCluster(t, 3, 0).Addrs, ",")}
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			client, err := redislimit.NewClient(d.cfg(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			lim := newLimiter(t, client, newClock(future), "reset:")
			for _, a := range limit.Algorithms() {
				t.Run(a.String(), func(t *testing.T) {
					spec := limit.Spec{Algorithm: a, Limit: 4, Window: time.Minute}
					checkReset(t, lim, client, "reset:", a.String(), spec)
				})
			}
		})
	}
}

// checkReset uses up the counter key (and another) under spec, resets it
// with r, and checks what TestReset says.
func checkReset(t *testing.T, lim limit.Limiter, client redis.UniversalClient, prefix, key string, spec limit.Spec) {
	t.Helper()
	ctx := context.Background()
	other := key + "-other"
	for range 4 {
		decide(t, lim, limit.Hit{Key: key, Spec: spec, Cost: 1}, limit.Hit{Key: other, Spec: spec, Cost: 1})
	}
	if d := decide(t, lim, limit.Hit{Key: key, Spec: spec})[0]; d.Remaining != 0 {
		t.Fatalf("after 4 hits of 4 a peek sees %+v, want remaining 0", d)
	}
	if n := client.Exists(ctx, redislimit.Key(prefix, key)).Val(); n != 1 {
		t.Fatalf("the counter's key is not in Redis (EXISTS %d): the test would prove nothing", n)
	}
	r := lim.(interface {
		Reset(context.Context, string, limit.Spec) error
	})
	if err := r.Reset(ctx, key, spec); err != nil {
		t.Fatal(err)
	}
	if n := client.Exists(ctx, redislimit.Key(prefix, key)).Val(); n != 0 {
		t.Errorf("the counter's key is still in Redis after the reset")
	}
	if d := decide(t, lim, limit.Hit{Key: key, Spec: spec})[0]; !d.Allowed || d.Remaining != 4 {
		t.Errorf("a peek after the reset: %+v, want a new counter's remaining 4", d)
	}
	for i := range 4 {
		if d := decide(t, lim, limit.Hit{Key: key, Spec: spec, Cost: 1})[0]; !d.Allowed {
			t.Fatalf("hit %d after the reset denied: %+v", i+1, d)
		}
	}
	if d := decide(t, lim, limit.Hit{Key: other, Spec: spec, Cost: 1})[0]; d.Allowed {
		t.Errorf("the reset freed another counter: %+v", d)
	}
}

// A Split resets a counter in the Redis its spec's window routes it to:
// a per-second counter in the per-second Redis, a per-minute one in the
// main one.
func TestSplitReset(t *testing.T) {
	p := startPair(t)
	s, _, _ := p.split(t, newClock(future), "sr:", nil)
	for _, tc := range []struct {
		name   string
		window time.Duration
		where  *node
	}{{"per-second", time.Second, p.ps}, {"per-minute", time.Minute, p.main}} {
		t.Run(tc.name, func(t *testing.T) {
			checkReset(t, s, tc.where.client, "sr:", tc.name, limit.Spec{Limit: 4, Window: tc.window})
		})
	}
}

// A Redis that does not answer fails the reset with ErrStore, within the
// limiter's timeout.
func TestResetStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	client, err := redislimit.NewClient(redislimit.ClientConfig{URL: srv.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	lim, err := redislimit.New(client, redislimit.Options{Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	err = lim.Reset(context.Background(), "k", limit.Spec{Limit: 1, Window: time.Second})
	if !errors.Is(err, redislimit.ErrStore) {
		t.Errorf("reset with Redis down: %v, want ErrStore", err)
	}
}
