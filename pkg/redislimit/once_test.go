package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// onceSetup is a topology in which every script call for the counters a
// test picks with onProxy goes through a Proxy.
type onceSetup struct {
	proxy *redistest.Proxy
	// lim decides; for the split, hits with a window under a minute go
	// through the proxy.
	lim limit.Limiter
	// onProxy reports whether the counter's calls go through the proxy.
	onProxy func(counter string) bool
}

const oncePrefix = "once:"

// TestAtMostOnce: a script call whose reply is lost after Redis ran it
// (a proxy lets the call through, drops the answer and closes the
// connection) is not sent again, on every topology: one request leaves its
// counter at 1, a refund is applied once, and a Cluster's or a split's
// compensation (the refund sent when another part of the request denies)
// too. go-redis's Cluster client re-sends a command after a dropped
// connection on its own, whatever MaxRetries says.
func TestAtMostOnce(t *testing.T) {
	setups := []struct {
		name  string
		start func(t *testing.T) onceSetup
	}{
		{"single", startOnceSingle},
		{"sentinel", startOnceSentinel},
		{"cluster", startOnceCluster},
		{"per-second split", startOnceSplit},
	}
	for _, st := range setups {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			s := st.start(t)
			spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second}
			if st.name != "per-second split" {
				spec.Window = time.Hour
			}
			counter := pick(t, s.onProxy, true, "c")
			hit := limit.Hit{Key: counter, Spec: spec, Cost: 1}
			peek := func() int64 { return decide(t, s.lim, limit.Hit{Key: counter, Spec: spec})[0].Remaining }
			lost := func(hits ...limit.Hit) {
				t.Helper()
				s.proxy.LoseReply("FCALL", 0)
				_, err := s.lim.Evaluate(context.Background(), hits, make([]limit.Decision, len(hits)))
				if !errors.Is(err, redislimit.ErrStore) {
					t.Fatalf("a call whose reply was lost: %v, want ErrStore", err)
				}
			}

			lost(hit)
			if got := peek(); got != spec.Limit-1 {
				t.Errorf("one request whose reply was lost left %d of %d remaining: it ran %d times", got, spec.Limit, spec.Limit-got)
			}
			decide(t, s.lim, limit.Hit{Key: counter, Spec: spec, Cost: spec.Limit - 1})
			lost(limit.Hit{Key: counter, Spec: spec, Cost: 1, Refund: true})
			if got := peek(); got != 1 {
				t.Errorf("a refund of 1 on a spent limit whose reply was lost left %d remaining, want 1", got)
			}
			if s.proxy.Lost() != 2 {
				t.Errorf("the proxy lost %d replies, want 2", s.proxy.Lost())
			}
		})
	}
	for _, st := range setups[2:] {
		t.Run(st.name+" compensation", func(t *testing.T) {
			t.Parallel()
			testCompensationOnce(t, st.start(t), st.name == "per-second split")
		})
	}
}

// testCompensationOnce: a request on two parts, the one behind the proxy
// admitting and the other denying; the refund that gives back what the
// first consumed has its reply lost, and is applied once.
func testCompensationOnce(t *testing.T, s onceSetup, split bool) {
	mine := limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Hour}
	other := mine
	if split {
		mine.Window = time.Second
	}
	a := limit.Hit{Key: pick(t, s.onProxy, true, "a"), Spec: mine, Cost: 3}
	b := limit.Hit{Key: pick(t, s.onProxy, false, "b"), Spec: other, Cost: other.Limit}
	decide(t, s.lim, a) // 7 left
	decide(t, s.lim, b) // spent
	a.Cost, b.Cost = 1, 1
	// The first FCALL behind the proxy consumes, the second refunds.
	s.proxy.LoseReply("FCALL", 1)
	d := make([]limit.Decision, 2)
	_, err := s.lim.Evaluate(context.Background(), []limit.Hit{a, b}, d)
	if !errors.Is(err, redislimit.ErrStore) || s.proxy.Lost() != 1 {
		t.Fatalf("the compensation's reply was lost (%d lost): err %v, want ErrStore", s.proxy.Lost(), err)
	}
	got := decide(t, s.lim, limit.Hit{Key: a.Key, Spec: mine})[0].Remaining
	if got != 7 {
		t.Errorf("after a denied request whose refund's reply was lost, %d remaining, want 7 (the refund applied once)", got)
	}
}

// pick returns a counter named after prefix whose calls go through the
// proxy, or do not, as want says.
func pick(t *testing.T, onProxy func(string) bool, want bool, prefix string) string {
	for i := range 1000 {
		c := fmt.Sprint(prefix, i)
		if onProxy(c) == want {
			return c
		}
	}
	t.Fatalf("no counter %s* with onProxy %v", prefix, want)
	return ""
}

func newOnceLimiter(t *testing.T, client redis.UniversalClient) *redislimit.Limiter {
	t.Cleanup(func() { client.Close() })
	l, err := redislimit.New(client, redislimit.Options{KeyPrefix: oncePrefix, Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A clock that stands still: no window ends while a test runs.
	l.SetNow(func() time.Time { return future })
	return l
}

func onceClient(t *testing.T, cfg redislimit.ClientConfig) redis.UniversalClient {
	c, err := redislimit.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startOnceSingle(t *testing.T) onceSetup {
	p := redistest.StartProxy(t, redistest.Start(t).Addr)
	l := newOnceLimiter(t, onceClient(t, redislimit.ClientConfig{URL: p.Addr}))
	return onceSetup{proxy: p, lim: l, onProxy: func(string) bool { return true }}
}

// startOnceSentinel points the Sentinels at the proxy, so that the master
// they name is the proxy.
func startOnceSentinel(t *testing.T) onceSetup {
	g := redistest.StartSentinel(t, 1, 1, 5*time.Second)
	p := redistest.StartProxy(t, g.Data[0].Addr)
	_, port, _ := strings.Cut(p.Addr, ":")
	for _, s := range g.Sentinels {
		for _, cmd := range [][]string{
			{"SENTINEL", "REMOVE", redistest.SentinelMasterName},
			{"SENTINEL", "MONITOR", redistest.SentinelMasterName, "127.0.0.1", port, "1"},
		} {
			if _, err := s.Do(cmd...); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
	}
	l := newOnceLimiter(t, onceClient(t, redislimit.ClientConfig{Type: "sentinel", URL: g.URL()}))
	return onceSetup{proxy: p, lim: l, onProxy: func(string) bool { return true }}
}

// startOnceCluster puts a proxy in front of one master of a 3-master
// Cluster, which announces the proxy's port as its own: the cluster's slot
// map sends clients there.
func startOnceCluster(t *testing.T) onceSetup {
	c := redistest.StartCluster(t, 3, 0)
	m := c.Nodes[0]
	p := redistest.StartProxy(t, m.Addr)
	_, port, _ := strings.Cut(p.Addr, ":")
	if _, err := m.Do("CONFIG", "SET", "cluster-announce-port", port); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every node to name the proxy in CLUSTER SLOTS", func() bool {
		for _, n := range c.Nodes {
			if out, err := n.Do("CLUSTER", "SLOTS"); err != nil || !strings.Contains(out, port) {
				return false
			}
		}
		return true
	})
	client := onceClient(t, redislimit.ClientConfig{Type: "cluster", URL: strings.Join(c.Addrs, ",")})
	cc := client.(*redis.ClusterClient)
	l := newOnceLimiter(t, client)
	onProxy := func(counter string) bool {
		mc, err := cc.MasterForKey(context.Background(), redislimit.Key(oncePrefix, counter))
		if err != nil {
			t.Fatal(err)
		}
		return mc.Options().Addr == p.Addr
	}
	return onceSetup{proxy: p, lim: l, onProxy: onProxy}
}

// startOnceSplit puts the per-second Redis of a split behind the proxy.
func startOnceSplit(t *testing.T) onceSetup {
	p := redistest.StartProxy(t, redistest.Start(t).Addr)
	main := newOnceLimiter(t, onceClient(t, redislimit.ClientConfig{URL: redistest.Start(t).Addr}))
	ps := newOnceLimiter(t, onceClient(t, redislimit.ClientConfig{URL: p.Addr}))
	s, err := redislimit.NewSplit(main, ps, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Which Redis a counter goes to depends on its window, not its name:
	// the tests give the per-second counters a window under a minute.
	return onceSetup{proxy: p, lim: s, onProxy: func(c string) bool { return !strings.HasPrefix(c, "b") }}
}

// waitFor polls cond every 20 ms until it holds, failing the test after
// timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %v", what, timeout)
		}
	}
}
