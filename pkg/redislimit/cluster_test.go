package redislimit_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// TestCluster runs the Cluster cases on one 3-master cluster, started once
// (it takes seconds); the cases use distinct key prefixes.
func TestCluster(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	uc, err := redislimit.NewClient(redislimit.ClientConfig{Type: "cluster", URL: strings.Join(cl.Addrs, ",")})
	if err != nil {
		t.Fatal(err)
	}
	client := uc.(*redis.ClusterClient)
	t.Cleanup(func() { client.Close() })
	commands := new(atomic.Int64)
	client.AddHook(countHook{commands})
	ctx := context.Background()

	t.Run("slots match CLUSTER KEYSLOT", func(t *testing.T) {
		for i, c := range append(collisionCases[:20], "domain\x00user\x00alice", "x") {
			key := redislimit.Key(fmt.Sprint("p", i, ":"), c)
			got, err := client.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := redislimit.Slot(fmt.Sprint("p", i, ":"), c); got != int64(want) {
				t.Errorf("CLUSTER KEYSLOT %q = %d, Slot = %d", key, got, want)
			}
		}
	})

	t.Run("one request over all masters", func(t *testing.T) {
		// On Redis's own clock, as in production.
		l := newLimiter(t, client, nil, "spread:")
		var hits []limit.Hit
		masters := make(map[string]bool)
		for i := range 12 {
			a := limit.Algorithm(i % 6)
			h := limit.Hit{Key: fmt.Sprint("counter-", i), Spec: limit.Spec{Algorithm: a, Limit: 5, Window: time.Minute}, Cost: 1}
			hits = append(hits, h)
			addr, err := ownerOf(ctx, client, redislimit.Key("spread:", h.Key))
			if err != nil {
				t.Fatal(err)
			}
			masters[addr] = true
		}
		if len(masters) != 3 {
			t.Fatalf("the request's keys live on %d masters, want all 3", len(masters))
		}
		for round := range 5 {
			for i, d := range decide(t, l, hits...) {
				if !d.Allowed || d.Remaining != int64(4-round) {
					t.Fatalf("round %d hit %d: %+v, want allowed with %d remaining", round, i, d, 4-round)
				}
			}
		}
		for i, d := range decide(t, l, hits...) {
			if d.Allowed {
				t.Fatalf("hit %d allowed beyond its limit: %+v", i, d)
			}
		}
	})

	t.Run("all or nothing", func(t *testing.T) {
		clk := newClock(future)
		l := newLimiter(t, client, clk, "aon:")
		keyOf := func(a limit.Algorithm, i int) string { return fmt.Sprintf("%v/%d", a, i) }
		for _, a := range limit.Algorithms() {
			slots := make(map[uint16]bool)
			for i := range 5 {
				slots[redislimit.Slot("aon:", keyOf(a, i))] = true
			}
			if len(slots) < 2 {
				t.Fatalf("%v: the request's 5 counters share one slot; pick other keys", a)
			}
		}
		allOrNothing(t, l, clk, keyOf)
		usageKept(t, l, func(a limit.Algorithm, i int) string { return fmt.Sprintf("usage/%v/%d", a, i) })
		advisoryDoesNotBlock(t, l, func(a limit.Algorithm, i int) string { return fmt.Sprintf("adv/%v/%d", a, i) })
		quotaKey := func(a limit.Algorithm, i int) string { return fmt.Sprintf("quota/%v/%d", a, i) }
		for _, a := range limit.Algorithms() {
			if redislimit.Slot("aon:", quotaKey(a, 4)) == redislimit.Slot("aon:", quotaKey(a, 5)) {
				t.Fatalf("%v: the two quotas share one slot; pick other keys", a)
			}
		}
		quotasDecideTogether(t, l, quotaKey)
	})

	t.Run("same key twice", func(t *testing.T) {
		clk := newClock(future)
		l := newLimiter(t, client, clk, "twice:")
		sp := limit.Spec{Algorithm: limit.SlidingLog, Limit: 3, Window: time.Hour}
		other := limit.Hit{Key: "other", Spec: sp, Cost: 1}
		d := decide(t, l, limit.Hit{Key: "k", Spec: sp, Cost: 2}, other, limit.Hit{Key: "k", Spec: sp, Cost: 2})
		if !d[0].Allowed || !d[1].Allowed || d[2].Allowed {
			t.Fatalf("%+v; want the third hit denied by the first's consumption", d)
		}
		for _, k := range []string{"k", "other"} {
			if p := decide(t, l, limit.Hit{Key: k, Spec: sp})[0]; p.Remaining != 3 {
				t.Errorf("%s: remaining %d after a denied request, want 3", k, p.Remaining)
			}
		}
	})

	// The Lua code lost on every master, as after restarts without
	// persistence: each node gets it again at its first call.
	for _, flush := range []struct {
		name string
		run  func(ctx context.Context, m *redis.Client) error
	}{
		{"SCRIPT FLUSH", func(ctx context.Context, m *redis.Client) error { return m.ScriptFlush(ctx).Err() }},
		{"FUNCTION FLUSH", func(ctx context.Context, m *redis.Client) error { return m.FunctionFlush(ctx).Err() }},
	} {
		t.Run(flush.name+" on every master", func(t *testing.T) {
			l := newLimiter(t, client, nil, "flush:"+flush.name+":")
			// Decided first: an undecided Limiter on a Cluster decides
			// in the background, and its loads could land after the
			// flush below, leaving the call after it on EVALSHA.
			if err := l.Probe(ctx); err != nil {
				t.Fatal(err)
			}
			var hits []limit.Hit
			for i := range 6 {
				hits = append(hits, limit.Hit{Key: fmt.Sprint(i), Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour}, Cost: 1})
			}
			decide(t, l, hits...)
			if err := client.ForEachMaster(ctx, flush.run); err != nil {
				t.Fatal(err)
			}
			for i, d := range decide(t, l, hits...) {
				if !d.Allowed || d.Remaining != 8 {
					t.Fatalf("hit %d after %s: %+v, want allowed with 8 remaining", i, flush.name, d)
				}
			}
			if err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				return hasLibrary(ctx, m)
			}); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("Probe loads the library on every master", func(t *testing.T) {
		if err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.FunctionFlush(ctx).Err()
		}); err != nil {
			t.Fatal(err)
		}
		l := newLimiter(t, client, nil, "probe:")
		if err := l.Probe(ctx); err != nil {
			t.Fatal(err)
		}
		if err := client.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return hasLibrary(ctx, m)
		}); err != nil {
			t.Error(err)
		}
	})

	t.Run("round trips", func(t *testing.T) {
		l := newLimiter(t, client, nil, "rt:")
		var hits []limit.Hit
		slots := make(map[uint16]bool)
		for i := range 4 {
			h := limit.Hit{Key: fmt.Sprint(i), Spec: limit.Spec{Algorithm: limit.GCRA, Limit: 1000, Window: time.Second}, Cost: 1}
			hits = append(hits, h)
			slots[redislimit.Slot("rt:", h.Key)] = true
		}
		decide(t, l, hits...)
		before := commands.Load()
		const requests = 10
		for range requests {
			decide(t, l, hits...)
		}
		if got, want := commands.Load()-before, int64(requests*len(slots)); got != want {
			t.Errorf("%d requests over %d slots sent %d commands, want %d", requests, len(slots), got, want)
		}
	})
}

// ownerOf returns the address of the master serving key.
func ownerOf(ctx context.Context, c *redis.ClusterClient, key string) (string, error) {
	slot, err := c.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return "", err
	}
	ranges, err := c.ClusterSlots(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, r := range ranges {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			return r.Nodes[0].Addr, nil
		}
	}
	return "", fmt.Errorf("slot %d of %q is not served", slot, key)
}
