package counters_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/pkg/limit"
)

// algorithmRules has one rule per algorithm, keyed by its name, each 4
// per day (a bucket refills 4 a day, a token every 6 hours), so that no
// window ends and no token comes back while a test runs, and one per
// algorithm with a window under a minute ("<name>_short", 4 per 59 s, a
// bucket's token every 15 s), which a per-second Redis holds. only, when
// not nil, keeps the algorithms it accepts.
func algorithmRules(only func(limit.Algorithm) bool) (yaml string, algs []limit.Algorithm) {
	var b strings.Builder
	b.WriteString("domain: t\ndescriptors:\n")
	for _, a := range limit.Algorithms() {
		if only != nil && !only(a) {
			continue
		}
		algs = append(algs, a)
		fmt.Fprintf(&b, "  - key: %s\n    rate_limit: {unit: day, requests_per_unit: 4, algorithm: %s}\n", a, a)
		// Sliding windows need whole milliseconds per sub-window: 59 s is.
		fmt.Fprintf(&b, "  - key: %s_short\n    rate_limit: {unit: second, unit_multiplier: 59, requests_per_unit: 4, algorithm: %s}\n", a, a)
	}
	return b.String(), algs
}

// checkGetReset sends 3 requests of descriptor key=value, checks that GET
// /counters shows 3 used and 1 remaining of 4 (and that looking consumes
// nothing), resets the counter, checks the answer (0 used, 4 remaining, 3
// used before), the log line naming the peer and the metric, and that 4
// requests then pass and a 5th is refused.
// checkOver charges value's counter of key (capacity 4) 7 at once, as
// Envoy charges usage at stream done: GET shows it used past its capacity,
// by what it is over, and nothing remaining.
func checkOver(t *testing.T, f *fixture, key, value string) {
	t.Helper()
	seven := uint64(7)
	if code := f.charge(t, &seven, "t", key, value); code != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a charge of 7 against 4: %v, want OVER_LIMIT", code)
	}
	c := f.answer(t, http.MethodGet, "/counters?domain=t&"+key+"="+value).Limits[0]
	// A bucket pays its debt back as time passes: at most 3 over, at least
	// most of it a moment later.
	if c.Over < 2 || c.Over > 3 || c.Used != c.Capacity+c.Over || c.Remaining != 0 {
		t.Fatalf("GET after a charge of 7 against 4: %+v, want used 4 + over (3, or 2 a moment later), remaining 0", c)
	}
}

func checkGetReset(t *testing.T, f *fixture, key, value string) {
	t.Helper()
	q := "?domain=t&" + key + "=" + value
	for i := range 3 {
		if code := f.decide(t, "t", key, value); code != pb.RateLimitResponse_OK {
			t.Fatalf("request %d: %v", i+1, code)
		}
	}
	for range 2 { // a second look sees the same: looking consumes nothing
		a := f.answer(t, http.MethodGet, "/counters"+q)
		if len(a.Limits) != 1 || a.Rule != "t."+key {
			t.Fatalf("GET: rule %q, %d limits, want t.%s and 1: %+v", a.Rule, len(a.Limits), key, a)
		}
		c := a.Limits[0]
		if !c.Counted || c.Capacity != 4 || c.Used != 3 || c.Remaining != 1 || c.ResetSeconds <= 0 || c.Key == "" || c.Mode != "enforce" {
			t.Fatalf("GET after 3 requests: %+v, want used 3, remaining 1 of 4, a reset ahead and a key", c)
		}
	}
	before := f.resets("t", "t."+key)
	a := f.answer(t, http.MethodPost, "/counters/reset"+q)
	c := a.Limits[0]
	if !a.Reset || c.Used != 0 || c.Remaining != 4 || c.UsedBefore == nil || *c.UsedBefore != 3 {
		t.Fatalf("reset answered %+v (used before %v), want reset, used 0, remaining 4, used before 3", a, c.UsedBefore)
	}
	if got := f.resets("t", "t."+key); got != before+1 {
		t.Errorf("floodgate_counter_resets_total{domain=t,rule=t.%s} went from %v to %v, want one more", key, before, got)
	}
	if l := lines(f.logs.String(), "counters reset", "peer=127.0.0.1:", `descriptor="`+key+"="+value+`"`, "rule=t."+key+" ", "used_before=[3]"); len(l) != 1 {
		t.Errorf("want one warning naming the peer, descriptor and rule of the reset, got %d in:\n%s", len(l), f.logs)
	}
	for i := range 4 {
		if code := f.decide(t, "t", key, value); code != pb.RateLimitResponse_OK {
			t.Fatalf("request %d after the reset: %v, want OK", i+1, code)
		}
	}
	if code := f.decide(t, "t", key, value); code != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("a 5th request after the reset: %v, want OVER_LIMIT", code)
	}
}

// storeCase opens one store for a test.
type storeCase struct {
	name string
	opts func(t *testing.T) store.Options
	// fixedOnly: the store serves fixed windows only (Memcached).
	fixedOnly bool
}

// storeCases are every store the server can keep its counters in, on
// real servers.
func storeCases() []storeCase {
	return []storeCase{
		{name: "memory", opts: func(*testing.T) store.Options { return store.Options{} }},
		{name: "redis", opts: func(t *testing.T) store.Options {
			return store.Options{Redis: store.RedisOptions{URL: redistest.Start(t).Addr}}
		}},
		{name: "sentinel", opts: func(t *testing.T) store.Options {
			return store.Options{Redis: store.RedisOptions{Type: "sentinel", URL: redistest.StartSentinel(t, 1, 1, 5*time.Second).URL()}}
		}},
		{name: "cluster", opts: func(t *testing.T) store.Options {
			return store.Options{Redis: store.RedisOptions{Type: "cluster", URL: strings.Join(redistest.StartCluster(t, 3, 0).Addrs, ",")}}
		}},
		{name: "redis with per-second", opts: func(t *testing.T) store.Options {
			return store.Options{Redis: store.RedisOptions{URL: redistest.Start(t).Addr}, PerSecond: store.RedisOptions{URL: redistest.Start(t).Addr}}
		}},
		{name: "memcached", fixedOnly: true, opts: func(t *testing.T) store.Options {
			return store.Options{Memcache: store.MemcacheOptions{Servers: memcachedtest.Start(t).Addr + "," + memcachedtest.Start(t).Addr}}
		}},
	}
}

// Every store, every algorithm it serves: GET /counters shows what
// requests used, and POST /counters/reset lets the whole limit through
// again at once, logged with the peer and counted. With Redis the deny
// cache is on, as in the server, and a reset must reach it too: the 5th
// request before the reset was refused and remembered there.
func TestEveryStoreEveryAlgorithm(t *testing.T) {
	for _, sc := range storeCases() {
		t.Run(sc.name, func(t *testing.T) {
			opts := sc.opts(t)
			opts.Deadline = 5 * time.Second // a slow moment is not a failure
			st, err := store.Open(context.Background(), opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			var only func(limit.Algorithm) bool
			if sc.fixedOnly {
				only = func(a limit.Algorithm) bool { return a == limit.FixedWindow }
			}
			yaml, algs := algorithmRules(only)
			f := newFixture(t, parseRules(t, yaml, opts.Supports), st.Limiter(), st)
			for _, a := range algs {
				for _, key := range []string{a.String(), a.String() + "_short"} {
					t.Run(key, func(t *testing.T) {
						checkGetReset(t, f, key, "alice")
						checkOver(t, f, key, "bob")
						// The 5th request, refused, is cached by the deny
						// cache; a second reset must forget it.
						f.answer(t, http.MethodPost, "/counters/reset?domain=t&"+key+"=alice")
						if code := f.decide(t, "t", key, "alice"); code != pb.RateLimitResponse_OK {
							t.Errorf("a request after a reset of a refused counter: %v, want OK", code)
						}
					})
				}
			}
		})
	}
}

// A store that does not answer fails a look and a reset with 503 and the
// store's error; the failed reset is logged as an error naming the peer,
// and not counted.
func TestStoreDown(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	st, err := store.Open(context.Background(), store.Options{Redis: store.RedisOptions{URL: srv.Addr}, Deadline: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	yaml, _ := algorithmRules(nil)
	f := newFixture(t, parseRules(t, yaml, nil), st.Limiter(), st)
	for _, e := range endpoints {
		m, path := e.method, e.path
		code, body := f.call(t, m, path+"?domain=t&gcra=x")
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "redis failed") {
			t.Errorf("%s %s with Redis down: %d %s, want 503 naming Redis", m, path, code, body)
		}
	}
	if l := lines(f.logs.String(), "level=ERROR", "counters reset failed", "peer=127.0.0.1:", "rule=t.gcra", "counters=0", "of=1"); len(l) != 1 {
		t.Errorf("want one error line for the failed reset:\n%s", f.logs)
	}
	if n := f.resets("t", "t.gcra"); n != 0 {
		t.Errorf("a failed reset counted %v", n)
	}
}
