package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// allOrNothing checks, for every algorithm, that a request whose last
// descriptor is exhausted consumes nothing from the others, and that the
// same request passes and consumes everywhere once the exhausted counter is
// whole. keyOf names the counter of descriptor i so that callers can spread
// them over Cluster slots.
func allOrNothing(t *testing.T, e limit.Limiter, clk *clock, keyOf func(a limit.Algorithm, i int) string) {
	t.Helper()
	for _, a := range limit.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			roomy := limit.Spec{Algorithm: a, Limit: 10, Window: time.Hour}
			tight := limit.Spec{Algorithm: a, Limit: 1, Window: time.Hour}
			request := []limit.Hit{
				{Key: keyOf(a, 0), Spec: roomy, Cost: 1},
				{Key: keyOf(a, 1), Spec: roomy, Cost: 2},
				// Two limits on one descriptor: a per-hour and a per-day one.
				{Key: keyOf(a, 2), Spec: roomy, Cost: 1},
				{Key: keyOf(a, 3), Spec: limit.Spec{Algorithm: a, Limit: 20, Window: 24 * time.Hour}, Cost: 1},
				{Key: keyOf(a, 4), Spec: tight, Cost: 1},
			}
			peek := func() []int64 {
				hits := append([]limit.Hit(nil), request...)
				for i := range hits {
					hits[i].Cost = 0
				}
				var rem []int64
				for _, d := range decide(t, e, hits...) {
					rem = append(rem, d.Remaining)
				}
				return rem
			}
			decide(t, e, request[4]) // exhaust the tight counter
			before := peek()
			if fmt.Sprint(before) != "[10 10 10 20 0]" {
				t.Fatalf("remaining before = %v, want [10 10 10 20 0]", before)
			}
			for range 3 {
				d, blocked := verdict(t, e, request...)
				if d[4].Allowed || !d[0].Allowed || !d[1].Allowed || !d[3].Allowed || !blocked {
					t.Fatalf("decisions %+v, blocked %v: want the last denied, the others allowed, the request blocked", d, blocked)
				}
				// The request consumed nothing, and the allowed decisions
				// say so: their counters as stored.
				if d[1].Remaining != 10 || d[3].Remaining != 20 || d[2].Remaining != 10 {
					t.Fatalf("remaining %d, %d, %d in the denied request, want 10, 10, 20 (nothing consumed)", d[1].Remaining, d[2].Remaining, d[3].Remaining)
				}
			}
			if after := peek(); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Fatalf("a denied request consumed: remaining %v, was %v", after, before)
			}
			clk.add(2 * time.Hour) // the tight counter is whole again
			d, blocked := verdict(t, e, request...)
			for i := range d {
				if !d[i].Allowed || blocked {
					t.Fatalf("hit %d denied after the reset, or blocked (%v): %+v", i, blocked, d)
				}
			}
			if got := fmt.Sprint(peek()); got != "[9 8 9 19 0]" {
				t.Fatalf("remaining after an allowed request = %s, want [9 8 9 19 0]", got)
			}
		})
	}
}

// advisoryDoesNotBlock checks, for every algorithm, that a denied advisory
// hit lets the rest of its request consume, and writes nothing itself.
func advisoryDoesNotBlock(t *testing.T, e limit.Limiter, keyOf func(a limit.Algorithm, i int) string) {
	t.Helper()
	for _, a := range limit.Algorithms() {
		roomy := limit.Spec{Algorithm: a, Limit: 10, Window: time.Hour}
		tight := limit.Spec{Algorithm: a, Limit: 2, Window: time.Hour}
		decide(t, e, limit.Hit{Key: keyOf(a, 1), Spec: tight, Cost: 1})
		d, blocked := verdict(t, e,
			limit.Hit{Key: keyOf(a, 0), Spec: roomy, Cost: 1},
			limit.Hit{Key: keyOf(a, 1), Spec: tight, Cost: 2, Mode: limit.Advisory})
		if !d[0].Allowed || d[1].Allowed || blocked {
			t.Fatalf("%v: %+v, blocked %v: want the first allowed and the advisory one denied, the request not blocked", a, d, blocked)
		}
		p := decide(t, e, limit.Hit{Key: keyOf(a, 0), Spec: roomy}, limit.Hit{Key: keyOf(a, 1), Spec: tight})
		if p[0].Remaining != 9 || p[1].Remaining != 1 {
			t.Fatalf("%v: remaining %d and %d after the request, want 9 (consumed) and 1 (untouched)", a, p[0].Remaining, p[1].Remaining)
		}
	}
}

// quotasDecideTogether checks, for every algorithm, the verdict of a
// request of two quotas and an enforced limit: while one quota is over,
// the request is not blocked and the others consume; once both are, it
// is blocked and the enforced limit keeps what it had. keyOf's counter 4
// is the tight one, as in allOrNothing.
func quotasDecideTogether(t *testing.T, e limit.Limiter, keyOf func(a limit.Algorithm, i int) string) {
	t.Helper()
	for _, a := range limit.Algorithms() {
		roomy := limit.Spec{Algorithm: a, Limit: 10, Window: time.Hour}
		tight := limit.Spec{Algorithm: a, Limit: 1, Window: time.Hour}
		request := []limit.Hit{
			{Key: keyOf(a, 4), Spec: tight, Cost: 1, Mode: limit.Quota, Group: 1},
			{Key: keyOf(a, 5), Spec: roomy, Cost: 1, Mode: limit.Quota, Group: 2},
			{Key: keyOf(a, 6), Spec: roomy, Cost: 1},
		}
		decide(t, e, request[0]) // the first quota is over
		d, blocked := verdict(t, e, request...)
		if d[0].Allowed || !d[1].Allowed || !d[2].Allowed || blocked {
			t.Fatalf("%v, one quota over: %+v, blocked %v; want the others allowed, not blocked", a, d, blocked)
		}
		decide(t, e, limit.Hit{Key: keyOf(a, 5), Spec: roomy, Cost: 9}) // the second too
		d, blocked = verdict(t, e, request...)
		if d[0].Allowed || d[1].Allowed || !d[2].Allowed || !blocked {
			t.Fatalf("%v, both quotas over: %+v, blocked %v; want the enforced one allowed, blocked", a, d, blocked)
		}
		if p := decide(t, e, limit.Hit{Key: keyOf(a, 6), Spec: roomy})[0]; p.Remaining != 9 {
			t.Fatalf("%v: the enforced limit has %d left, want 9 (the blocked request consumed nothing)", a, p.Remaining)
		}
	}
}

// usageKept checks that a blocked request keeps its usage hits (charges
// reported after the fact) and nothing else, whatever part of the store
// each counter is in: a plain hit on one counter is not consumed, a charge
// within the limit on another is, and one past the limit on a third leaves
// it in debt.
func usageKept(t *testing.T, e limit.Limiter, keyOf func(a limit.Algorithm, i int) string) {
	t.Helper()
	for _, a := range limit.Algorithms() {
		t.Run("usage kept/"+a.String(), func(t *testing.T) {
			roomy := limit.Spec{Algorithm: a, Limit: 10, Window: time.Hour}
			tight := limit.Spec{Algorithm: a, Limit: 1, Window: time.Hour}
			decide(t, e, limit.Hit{Key: keyOf(a, 4), Spec: tight, Cost: 1}) // exhaust the tight counter
			denied := limit.Hit{Key: keyOf(a, 4), Spec: tight, Cost: 1}
			// The roomy counters' part of the store admits and commits: a
			// Cluster or a Split gives back the plain hit alone.
			d, blocked := verdict(t, e, limit.Hit{Key: keyOf(a, 0), Spec: roomy, Cost: 2},
				limit.Hit{Key: keyOf(a, 1), Spec: roomy, Cost: 3, Usage: true}, denied)
			if !blocked || d[2].Allowed || !d[1].Allowed || d[1].Remaining != 7 {
				t.Fatalf("decisions %+v, blocked %v: want blocked by the last, the charge of 3 allowed, 7 left", d, blocked)
			}
			d, blocked = verdict(t, e, limit.Hit{Key: keyOf(a, 2), Spec: roomy, Cost: 15, Usage: true}, denied)
			if !blocked || d[0].Allowed || d[0].Debt != 5 {
				t.Fatalf("decisions %+v, blocked %v: want the charge of 15 over by 5", d, blocked)
			}
			look := decide(t, e, limit.Hit{Key: keyOf(a, 0), Spec: roomy}, limit.Hit{Key: keyOf(a, 1), Spec: roomy},
				limit.Hit{Key: keyOf(a, 2), Spec: roomy})
			if look[0].Remaining != 10 || look[1].Remaining != 7 || look[2].Allowed || look[2].Debt < 4 {
				t.Errorf("after the blocked request: %+v; want the plain counter whole (10), the charged one at 7, the third in debt", look)
			}
		})
	}
}

func TestAllOrNothingSingleNode(t *testing.T) {
	n := startNode(t)
	clk := newClock(future)
	l := newLimiter(t, n.client, clk, "aon:")
	allOrNothing(t, l, clk, func(a limit.Algorithm, i int) string { return fmt.Sprintf("%v/%d", a, i) })
	usageKept(t, l, func(a limit.Algorithm, i int) string { return fmt.Sprintf("usage/%v/%d", a, i) })
	advisoryDoesNotBlock(t, l, func(a limit.Algorithm, i int) string { return fmt.Sprintf("adv/%v/%d", a, i) })
	quotasDecideTogether(t, l, func(a limit.Algorithm, i int) string { return fmt.Sprintf("quota/%v/%d", a, i) })
}

// TestOneRoundTrip checks that a request of several descriptors, whatever
// their algorithms, costs one Redis call on a single node.
func TestOneRoundTrip(t *testing.T) {
	n := startNode(t)
	l := newLimiter(t, n.client, nil, "rt:")
	var hits []limit.Hit
	for _, a := range limit.Algorithms() {
		hits = append(hits, limit.Hit{Key: a.String(), Spec: limit.Spec{Algorithm: a, Limit: 100, Window: time.Minute}, Cost: 1})
	}
	decide(t, l, hits...) // loads the script
	before := n.commands.Load()
	const requests = 20
	for range requests {
		decide(t, l, hits...)
	}
	if got := n.commands.Load() - before; got != requests {
		t.Fatalf("%d requests of %d hits sent %d commands, want %d", requests, len(hits), got, requests)
	}
}

// TestSameKeyTwice: two hits of one request on one counter see each other.
func TestSameKeyTwice(t *testing.T) {
	n := startNode(t)
	clk := newClock(future)
	l := newLimiter(t, n.client, clk, "twice:")
	for _, a := range limit.Algorithms() {
		sp := limit.Spec{Algorithm: a, Limit: 3, Window: time.Hour}
		d := decide(t, l, limit.Hit{Key: a.String(), Spec: sp, Cost: 2}, limit.Hit{Key: a.String(), Spec: sp, Cost: 2})
		if !d[0].Allowed || d[1].Allowed {
			t.Errorf("%v: %+v; want the second hit denied by the first's consumption", a, d)
		}
		// Denied together: nothing consumed.
		if p := decide(t, l, limit.Hit{Key: a.String(), Spec: sp})[0]; p.Remaining != 3 {
			t.Errorf("%v: remaining %d after a denied request, want 3", a, p.Remaining)
		}
	}
}

// TestConcurrentExactLimit hammers one counter from 8 goroutines over 2
// clients (separate connection pools) on Redis's own clock: exactly the
// limit is admitted. Bucket rates are so slow that no refill happens
// during the test.
func TestConcurrentExactLimit(t *testing.T) {
	n := startNode(t)
	clients := []*redis.Client{n.client, newCountingClient(t, n.srv.Addr, n.commands)}
	// A window so long (about 417 days, aligned to the epoch) that the test
	// cannot straddle two of them, unless it starts in its last minute.
	window := 10000 * time.Hour
	if time.Until(time.Now().Truncate(window).Add(window)) < time.Minute {
		window += time.Hour
	}
	const limitN, workers, perWorker = 100, 8, 40
	tests := []limit.Spec{
		{Algorithm: limit.FixedWindow, Limit: limitN, Window: window},
		{Algorithm: limit.SlidingLog, Limit: limitN, Window: window},
		{Algorithm: limit.SlidingWindow, Limit: limitN, Window: window},
		{Algorithm: limit.TokenBucket, Limit: 1, Window: window, Burst: limitN},
		{Algorithm: limit.LeakyBucket, Limit: 1, Window: window, Burst: limitN},
		{Algorithm: limit.GCRA, Limit: 1, Window: window, Burst: limitN},
	}
	for _, sp := range tests {
		t.Run(sp.Algorithm.String(), func(t *testing.T) {
			limiters := []*redislimit.Limiter{
				newLimiter(t, clients[0], nil, "conc:"),
				newLimiter(t, clients[1], nil, "conc:"),
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			total := 0
			for w := range workers {
				wg.Go(func() {
					l := limiters[w%2]
					ok := 0
					for range perWorker {
						d := make([]limit.Decision, 1)
						_, err := l.Evaluate(context.Background(), []limit.Hit{{Key: sp.Algorithm.String(), Spec: sp, Cost: 1}}, d)
						if err != nil {
							t.Error(err)
							return
						}
						if d[0].Allowed {
							ok++
						}
					}
					mu.Lock()
					total += ok
					mu.Unlock()
				})
			}
			wg.Wait()
			if total != limitN {
				t.Fatalf("%d of %d hits admitted, want exactly %d", total, workers*perWorker, limitN)
			}
		})
	}
}

// TestStoreErrors checks that Redis failures wrap ErrStore and respect the
// deadline, and bad input wraps limit.ErrInvalidSpec without calling Redis.
func TestStoreErrors(t *testing.T) {
	n := startNode(t)
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.GCRA, Limit: 1, Window: time.Second}, Cost: 1}

	l, err := redislimit.New(n.client, redislimit.Options{Timeout: 30 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	bad := hit
	bad.Spec.Window = 0
	if _, err := l.Evaluate(context.Background(), []limit.Hit{bad}, make([]limit.Decision, 1)); !errors.Is(err, limit.ErrInvalidSpec) || errors.Is(err, redislimit.ErrStore) {
		t.Errorf("invalid spec: err = %v, want ErrInvalidSpec and not ErrStore", err)
	}
	neg := hit
	neg.Cost = -1
	if _, err := l.Evaluate(context.Background(), []limit.Hit{neg}, make([]limit.Decision, 1)); !errors.Is(err, limit.ErrInvalidSpec) || !strings.Contains(fmt.Sprint(err), "negative cost") || errors.Is(err, redislimit.ErrStore) {
		t.Errorf("negative cost: err = %v, want ErrInvalidSpec, negative cost and not ErrStore", err)
	}
	if _, err := l.Evaluate(context.Background(), []limit.Hit{hit}, nil); err == nil {
		t.Error("no room for decisions: no error")
	}

	// A Redis busy in a script cannot answer: the call gives up at its
	// deadline with ErrStore, instead of hanging until the script ends, a
	// second after it started.
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = n.srv.Do("EVAL", `local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end
local t0 = now() while now() - t0 < 1000000 do end return 1`, "0")
	}()
	// Until the script runs (starting redis-cli may take a while on a
	// loaded machine), calls pass.
	for {
		start := time.Now()
		_, err = l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
		if err == nil {
			select {
			case <-done:
				t.Fatal("the busy script ended before a call saw Redis busy")
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		if !errors.Is(err, redislimit.ErrStore) {
			t.Errorf("busy Redis: err = %v, want ErrStore", err)
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("busy Redis: gave up after %v, want about the 30ms deadline, well before the script ends", took)
		}
		break
	}
	<-done

	n.srv.Stop()
	if _, err := l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1)); !errors.Is(err, redislimit.ErrStore) {
		t.Errorf("stopped Redis: err = %v, want ErrStore", err)
	}
}

func TestNewRejects(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	tests := []struct {
		name   string
		client redis.UniversalClient
		opts   redislimit.Options
		want   string
	}{
		{"nil client", nil, redislimit.Options{}, "nil client"},
		{"brace in prefix", client, redislimit.Options{KeyPrefix: "rl_{x}"}, `redislimit.Options.KeyPrefix "rl_{x}": must not contain '{' or '}'`},
		{"closing brace in prefix", client, redislimit.Options{KeyPrefix: "}"}, "'{' or '}'"},
		{"negative timeout", client, redislimit.Options{Timeout: -time.Second}, "redislimit.Options.Timeout -1s: must not be negative"},
		{"negative backoff", client, redislimit.WithBreaker(redislimit.Options{}, redislimit.BreakerOptions{MinBackoff: -time.Second}), "redislimit.Options.Breaker.MinBackoff -1s: must not be negative"},
		{"negative batch size", client, redislimit.Options{Batch: redislimit.BatchOptions{MaxRequests: -1}}, "redislimit.Options.Batch.MaxRequests -1: must not be negative"},
		{"negative batches in flight", client, redislimit.Options{Batch: redislimit.BatchOptions{MaxInFlight: -2}}, "redislimit.Options.Batch.MaxInFlight -2: must not be negative"},
		{"backoffs reversed", client, redislimit.WithBreaker(redislimit.Options{}, redislimit.BreakerOptions{MinBackoff: time.Second, MaxBackoff: time.Millisecond}), "redislimit.Options.Breaker.MaxBackoff 1ms: want at least redislimit.Options.Breaker.MinBackoff (1s)"},
	}
	for _, tc := range tests {
		if _, err := redislimit.New(tc.client, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := redislimit.New(client, redislimit.Options{KeyPrefix: "ratelimit_"}); err != nil {
		t.Errorf("valid options: %v", err)
	}
}
