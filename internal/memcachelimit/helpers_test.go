package memcachelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// clock is a settable clock for Options.Now.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock(t time.Time) *clock        { return &clock{t: t} }
func fixed(limitN int64, w time.Duration) limit.Spec {
	return limit.Spec{Algorithm: limit.FixedWindow, Limit: limitN, Window: w}
}

// start starts n memcached servers and returns them with their addresses.
func start(t *testing.T, n int) ([]*memcachedtest.Server, []string) {
	t.Helper()
	servers := make([]*memcachedtest.Server, n)
	addrs := make([]string, n)
	for i := range servers {
		servers[i] = memcachedtest.Start(t)
		addrs[i] = servers[i].Addr
	}
	return servers, addrs
}

// newLimiter returns a Limiter on addrs with opts, closed when the test
// ends.
func newLimiter(t *testing.T, addrs []string, opts memcachelimit.Options) *memcachelimit.Limiter {
	t.Helper()
	opts.Servers = addrs
	if opts.Timeout == 0 {
		// The machine running the tests is small and shared: a generous
		// deadline keeps a slow moment from failing a test about counts.
		opts.Timeout = 2 * time.Second
	}
	l, err := memcachelimit.New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// evaluate runs one call and fails the test on error.
func evaluate(t testing.TB, l *memcachelimit.Limiter, hits ...limit.Hit) []limit.Decision {
	t.Helper()
	ds := make([]limit.Decision, len(hits))
	if _, err := l.Evaluate(context.Background(), hits, ds); err != nil {
		t.Fatalf("Evaluate: %v", err)
	}
	return ds
}

// counterOn returns the value of the counter of hit's window at now, read
// from whichever of servers holds it (at index holder, -1 when none), and
// how many servers hold it.
func counterOn(t *testing.T, servers []*memcachedtest.Server, prefix string, h limit.Hit, now time.Time) (value string, holder, holders int) {
	t.Helper()
	start, _ := h.Spec.WindowAt(now)
	key := string(memcachelimit.AppendKey(nil, prefix, start.UnixMicro(), h.Key))
	holder = -1
	for i, s := range servers {
		v, ok, err := s.Get(key)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			// A decr that shortens a number leaves it space-padded.
			value, holder, holders = strings.TrimRight(v, " "), i, holders+1
		}
	}
	return value, holder, holders
}
