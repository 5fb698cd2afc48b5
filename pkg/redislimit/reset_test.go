package redislimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// Reset deletes a counter's key in every algorithm on a single node,
// Sentinel's master and a Cluster of three masters: after it the key is
// gone from the node that held it (asked directly, not through the
// client, so that on a Cluster the DEL is seen to reach the master of the
// key's slot), a peek (cost 0) sees a new counter, and the whole capacity
// passes again at the same instant, while another counter keeps its
// state. On the Cluster the counters of the algorithms live on more than
// one master, or the test would not show that a reset finds each.
func TestReset(t *testing.T) {
	for _, d := range []struct {
		name string
		// start returns the client's config and the data nodes to ask.
		start func(t *testing.T) (redislimit.ClientConfig, []string)
	}{
		{"single", func(t *testing.T) (redislimit.ClientConfig, []string) {
			srv := redistest.Start(t)
			return redislimit.ClientConfig{URL: srv.Addr}, []string{srv.Addr}
		}},
		{"sentinel", func(t *testing.T) (redislimit.ClientConfig, []string) {
			g := redistest.StartSentinel(t, 1, 1, 5*time.Second)
			master, err := g.Master()
			if err != nil {
				t.Fatal(err)
			}
			return redislimit.ClientConfig{Type: "sentinel", URL: g.URL()}, []string{master}
		}},
		{"cluster", func(t *testing.T) (redislimit.ClientConfig, []string) {
			c := redistest.StartCluster(t, 3, 0)
			masters, err := c.Masters()
			if err != nil || len(masters) != 3 {
				t.Fatalf("cluster masters %v, %v: want 3", masters, err)
			}
			return redislimit.ClientConfig{Type: "cluster", URL: strings.Join(c.Addrs, ",")}, masters
		}},
	} {
		t.Run(d.name, func(t *testing.T) {
			cfg, nodes := d.start(t)
			client, err := redislimit.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { client.Close() })
			lim := newLimiter(t, client, newClock(future), "reset:")
			held := map[string]bool{}
			for _, a := range limit.Algorithms() {
				t.Run(a.String(), func(t *testing.T) {
					spec := limit.Spec{Algorithm: a, Limit: 4, Window: time.Minute}
					held[checkReset(t, lim, nodes, "reset:", a.String(), spec)] = true
				})
			}
			if len(nodes) > 1 && len(held) < 2 {
				t.Errorf("every counter was on one master of %d (%v): the test does not show a reset reaching each slot's master", len(nodes), held)
			}
		})
	}
}

// holder returns the one node of nodes that holds the Redis key, asked
// directly; on a Cluster the others answer MOVED. It fails the test
// unless exactly one node holds it.
func holder(t *testing.T, nodes []string, key string) string {
	t.Helper()
	var holders []string
	for _, n := range nodes {
		if r, err := redistest.Do(n, "EXISTS", key); err == nil && r == "1" {
			holders = append(holders, n)
		}
	}
	if len(holders) != 1 {
		t.Fatalf("key %q is held by %v of %v, want one node", key, holders, nodes)
	}
	return holders[0]
}

// checkReset uses up the counter key (and another) under spec, resets it,
// and checks what TestReset says. It returns the node that held the key.
func checkReset(t *testing.T, lim limit.Limiter, nodes []string, prefix, key string, spec limit.Spec) string {
	t.Helper()
	ctx := context.Background()
	other := key + "-other"
	for range 4 {
		decide(t, lim, limit.Hit{Key: key, Spec: spec, Cost: 1}, limit.Hit{Key: other, Spec: spec, Cost: 1})
	}
	if d := decide(t, lim, limit.Hit{Key: key, Spec: spec})[0]; d.Remaining != 0 {
		t.Fatalf("after 4 hits of 4 a peek sees %+v, want remaining 0", d)
	}
	rkey := redislimit.Key(prefix, key)
	node := holder(t, nodes, rkey)
	r := lim.(interface {
		Reset(context.Context, string, limit.Spec) error
	})
	if err := r.Reset(ctx, key, spec); err != nil {
		t.Fatal(err)
	}
	if n, err := redistest.Do(node, "EXISTS", rkey); err != nil || n != "0" {
		t.Errorf("after the reset, EXISTS %s on %s, the node that held it: %q, %v, want 0", rkey, node, n, err)
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
	return node
}

// A Split resets a counter in the Redis its spec's window routes it to:
// a per-second counter in the per-second Redis, a per-minute one in the
// main one (each the only one of the two that held it).
func TestSplitReset(t *testing.T) {
	p := startPair(t)
	s, _, _ := p.split(t, newClock(future), "sr:", nil)
	for _, tc := range []struct {
		name   string
		window time.Duration
		where  *node
	}{{"per-second", time.Second, p.ps}, {"per-minute", time.Minute, p.main}} {
		t.Run(tc.name, func(t *testing.T) {
			both := []string{p.ps.srv.Addr, p.main.srv.Addr}
			if got := checkReset(t, s, both, "sr:", tc.name, limit.Spec{Limit: 4, Window: tc.window}); got != tc.where.srv.Addr {
				t.Errorf("the counter was on %s, want %s", got, tc.where.srv.Addr)
			}
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
