package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/denycache"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// pair is two private redis-servers: the main one and the per-second one.
type pair struct{ main, ps *node }

func startPair(t *testing.T) *pair { return &pair{main: startNode(t), ps: startNode(t)} }

// split returns a Split over limiters of the pair with prefix, on clk
// (nil: Redis TIME); route nil routes by redislimit.PerSecond.
func (p *pair) split(t *testing.T, clk *clock, prefix string, route func(*limit.Spec) bool) (*redislimit.Split, *redislimit.Limiter, *redislimit.Limiter) {
	t.Helper()
	m, ps := newLimiter(t, p.main.client, clk, prefix), newLimiter(t, p.ps.client, clk, prefix)
	s, err := redislimit.NewSplit(m, ps, route)
	if err != nil {
		t.Fatal(err)
	}
	return s, m, ps
}

// keys returns the keys of n that start with prefix, sorted.
func keys(t *testing.T, n *node, prefix string) []string {
	t.Helper()
	out, err := n.srv.Do("KEYS", prefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	if out == "" {
		return nil
	}
	ks := strings.Split(out, "\n")
	slices.Sort(ks)
	return ks
}

func TestPerSecond(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		want   bool
	}{
		{time.Millisecond, true},
		{time.Second, true},     // unit: second
		{5 * time.Second, true}, // unit: second, unit_multiplier: 5
		{59*time.Second + 999*time.Millisecond, true},
		{time.Minute, false},      // unit: minute, or 60 seconds
		{90 * time.Second, false}, // unit: second, unit_multiplier: 90
		{time.Hour, false},
		{30 * 24 * time.Hour, false},
	} {
		if got := redislimit.PerSecond(&limit.Spec{Window: tc.window}); got != tc.want {
			t.Errorf("PerSecond(window %v) = %v, want %v", tc.window, got, tc.want)
		}
	}
}

func TestNewSplitRejects(t *testing.T) {
	n := startNode(t)
	l := newLimiter(t, n.client, nil, "")
	for name, args := range map[string][2]*redislimit.Limiter{
		"no main":        {nil, l},
		"no per-second":  {l, nil},
		"the same twice": {l, l},
	} {
		if _, err := redislimit.NewSplit(args[0], args[1], nil); err == nil {
			t.Errorf("%s: NewSplit accepted it", name)
		}
	}
}

// TestSplitPlacement: the counters of windows shorter than a minute are in
// the per-second Redis and only there, the others in the main one, whether
// a call holds one kind or both.
func TestSplitPlacement(t *testing.T) {
	p := startPair(t)
	clk := newClock(future) // keys expire in 2031: none vanishes before it is looked for
	tests := []struct {
		name      string
		spec      limit.Spec
		perSecond bool
	}{
		{"second", limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Second}, true},
		{"5 seconds, sliding", limit.Spec{Algorithm: limit.SlidingWindow, Limit: 10, Window: 5 * time.Second, Precision: 5}, true},
		{"59 seconds, token bucket", limit.Spec{Algorithm: limit.TokenBucket, Limit: 10, Window: 59 * time.Second}, true},
		{"second, gcra", limit.Spec{Algorithm: limit.GCRA, Limit: 10, Window: time.Second, Burst: 3}, true},
		{"minute", limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: time.Minute}, false},
		{"90 seconds, leaky bucket", limit.Spec{Algorithm: limit.LeakyBucket, Limit: 10, Window: 90 * time.Second}, false},
		{"hour, sliding log", limit.Spec{Algorithm: limit.SlidingLog, Limit: 10, Window: time.Hour}, false},
		{"day", limit.Spec{Algorithm: limit.FixedWindow, Limit: 10, Window: 24 * time.Hour}, false},
	}
	for _, mode := range []string{"alone", "together"} {
		prefix := mode + ":"
		s, _, _ := p.split(t, clk, prefix, nil)
		var all []limit.Hit
		var wantMain, wantPS []string
		for _, tc := range tests {
			h := limit.Hit{Key: tc.name, Spec: tc.spec, Cost: 1}
			all = append(all, h)
			if mode == "alone" {
				decide(t, s, h)
			}
			if tc.perSecond {
				wantPS = append(wantPS, redislimit.Key(prefix, h.Key))
			} else {
				wantMain = append(wantMain, redislimit.Key(prefix, h.Key))
			}
		}
		if mode == "together" {
			for i, d := range decide(t, s, all...) {
				if !d.Allowed {
					t.Fatalf("%s: hit %d denied: %+v", mode, i, d)
				}
			}
		}
		slices.Sort(wantMain)
		slices.Sort(wantPS)
		if got := keys(t, p.main, prefix); !slices.Equal(got, wantMain) {
			t.Errorf("%s: main Redis holds %q, want %q", mode, got, wantMain)
		}
		if got := keys(t, p.ps, prefix); !slices.Equal(got, wantPS) {
			t.Errorf("%s: per-second Redis holds %q, want %q", mode, got, wantPS)
		}
	}
}

// TestSplitAllOrNothing runs the all-or-nothing cases of a single node
// over a Split whose route puts the exhausted counter on one side and the
// others on the other, both ways: a denial on either Redis leaves the other
// as it was.
func TestSplitAllOrNothing(t *testing.T) {
	p := startPair(t)
	// The cases' tight counters (limits 1 and 2) go to one Redis, their
	// roomy ones (10, 20) to the other.
	tight := func(sp *limit.Spec) bool { return sp.Limit <= 2 }
	isTight := func(counter string) bool {
		return strings.HasSuffix(counter, "/4") || strings.HasPrefix(counter, "adv/") && strings.HasSuffix(counter, "/1")
	}
	for i, tc := range []struct {
		name          string
		route         func(*limit.Spec) bool
		denier, other *node
	}{
		{"denied by the per-second Redis", tight, p.ps, p.main},
		{"denied by the main Redis", func(sp *limit.Spec) bool { return !tight(sp) }, p.main, p.ps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("aon%d:", i)
			clk := newClock(future)
			s, _, _ := p.split(t, clk, prefix, tc.route)
			allOrNothing(t, s, clk, func(a limit.Algorithm, i int) string { return fmt.Sprintf("%v/%d", a, i) })
			usageKept(t, s, func(a limit.Algorithm, i int) string { return fmt.Sprintf("usage/%v/%d", a, i) })
			advisoryDoesNotBlock(t, s, func(a limit.Algorithm, i int) string { return fmt.Sprintf("adv/%v/%d", a, i) })
			quotasDecideTogether(t, s, func(a limit.Algorithm, i int) string { return fmt.Sprintf("quota/%v/%d", a, i) })
			// The cases did span both Redis: the tight counters are on
			// the denying side, the roomy ones on the other.
			for _, side := range []struct {
				n     *node
				tight bool
			}{{tc.denier, true}, {tc.other, false}} {
				ks := keys(t, side.n, prefix)
				if len(ks) == 0 {
					t.Errorf("%s holds no counter", side.n.srv.Addr)
				}
				for _, k := range ks {
					if c := strings.SplitN(k, "}", 2)[1]; isTight(c) != side.tight {
						t.Errorf("%s holds %q (tight %v)", side.n.srv.Addr, k, isTight(c))
					}
				}
			}
		})
	}
}

// TestSplitRoundTrips: a call on one Redis costs one command there and
// none on the other; a call on both, one on each, plus one compensation
// on the side that admitted when the other denied.
func TestSplitRoundTrips(t *testing.T) {
	p := startPair(t)
	s, _, _ := p.split(t, newClock(future), "rt:", nil)
	sec := limit.Hit{Key: "sec", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Second}, Cost: 1}
	min := limit.Hit{Key: "min", Spec: limit.Spec{Algorithm: limit.TokenBucket, Limit: 100, Window: time.Minute}, Cost: 1}
	decide(t, s, sec, min) // loads the script on both
	tests := []struct {
		name      string
		hits      []limit.Hit
		allowed   bool
		main, ps  int64
		remaining [2]int64 // of min and sec after the call
	}{
		{"per-second only", []limit.Hit{sec}, true, 0, 1, [2]int64{99, 1}},
		{"main only", []limit.Hit{min}, true, 1, 0, [2]int64{98, 1}},
		{"both, allowed", []limit.Hit{sec, min}, true, 1, 1, [2]int64{97, 0}},
		{"both, denied by the per-second Redis", []limit.Hit{sec, min}, false, 2, 1, [2]int64{97, 0}},
	}
	for _, tc := range tests {
		m0, ps0 := p.main.commands.Load(), p.ps.commands.Load()
		d := decide(t, s, tc.hits...)
		if m, ps := p.main.commands.Load()-m0, p.ps.commands.Load()-ps0; m != tc.main || ps != tc.ps {
			t.Errorf("%s: %d commands to the main Redis and %d to the per-second one, want %d and %d", tc.name, m, ps, tc.main, tc.ps)
		}
		allowed := true
		for i := range d {
			allowed = allowed && d[i].Allowed
		}
		if allowed != tc.allowed {
			t.Errorf("%s: decisions %+v, want allowed %v", tc.name, d, tc.allowed)
		}
		peek := decide(t, s, limit.Hit{Key: min.Key, Spec: min.Spec}, limit.Hit{Key: sec.Key, Spec: sec.Spec})
		if got := [2]int64{peek[0].Remaining, peek[1].Remaining}; got != tc.remaining {
			t.Errorf("%s: remaining %v after it, want %v", tc.name, got, tc.remaining)
		}
	}
}

// TestSplitOneDown: with one Redis down, only the calls that need it
// fail, with an error naming it, and a call that spans both consumes
// nothing on the one that answers.
func TestSplitOneDown(t *testing.T) {
	p := startPair(t)
	clk := newClock(future)
	// A short deadline, as in production (50 ms): the client's own
	// redials would otherwise hold each failed call for seconds.
	var lims [2]*redislimit.Limiter
	for i, n := range []*node{p.main, p.ps} {
		l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "down:", Timeout: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		l.SetNow(clk.now)
		lims[i] = l
	}
	mainLim, psLim := lims[0], lims[1]
	s, err := redislimit.NewSplit(mainLim, psLim, nil)
	if err != nil {
		t.Fatal(err)
	}
	sec := limit.Hit{Key: "sec", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Second}, Cost: 1}
	min := limit.Hit{Key: "min", Spec: limit.Spec{Algorithm: limit.SlidingLog, Limit: 100, Window: time.Hour}, Cost: 1}
	ctx := context.Background()
	remaining := func(h limit.Hit) int64 { return decide(t, s, limit.Hit{Key: h.Key, Spec: h.Spec})[0].Remaining }

	for _, tc := range []struct {
		name           string
		down           *node
		up, needs      limit.Hit
		downLim, upLim *redislimit.Limiter
		errorNames     string
	}{
		{"per-second Redis down", p.ps, min, sec, psLim, mainLim, "per-second redis"},
		{"main Redis down", p.main, sec, min, mainLim, psLim, "main redis"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := remaining(tc.up)
			tc.down.srv.Stop()
			stopped := time.Now()
			// 3 failed calls each: the breaker opens on the way.
			const calls = 2*redislimit.DefaultBreakerFailures/3 + 1
			for i := range calls {
				d := make([]limit.Decision, 1)
				if _, err := s.Evaluate(ctx, []limit.Hit{tc.up}, d); err != nil || !d[0].Allowed {
					t.Fatalf("call %d on the Redis that answers: %+v, %v", i, d, err)
				}
				for _, hits := range [][]limit.Hit{{tc.needs}, {tc.needs, tc.up}, {tc.up, tc.needs}} {
					d := make([]limit.Decision, len(hits))
					_, err := s.Evaluate(ctx, hits, d)
					if !errors.Is(err, redislimit.ErrStore) || !strings.Contains(err.Error(), tc.errorNames) {
						t.Fatalf("call %d of %d hits needing the Redis that is down: %v, want ErrStore naming %q", i, len(hits), err, tc.errorNames)
					}
				}
			}
			// Only the calls on the live Redis consumed there: the
			// spanning ones were given back.
			if got, want := remaining(tc.up), before-calls; got != want {
				t.Errorf("remaining %d on the Redis that answers, want %d", got, want)
			}
			if !tc.upLim.Healthy() || tc.downLim.Healthy() {
				t.Errorf("healthy: answering %v, down %v; want true, false", tc.upLim.Healthy(), tc.downLim.Healthy())
			}
			// The calls, not only probes, tell why (refused, or timed out
			// while the client redials).
			if _, err := tc.downLim.LastFailure(); err == nil {
				t.Error("no last failure recorded for the Redis that is down")
			}
			if at, err := tc.upLim.LastFailure(); err != nil && at.After(stopped) {
				t.Errorf("the Redis that answers failed meanwhile: %v", err)
			}
			// Back, empty: a probe closes the breaker (once the client
			// dials again, within a second) and calls go on.
			tc.down.srv.Restart()
			for deadline := time.Now().Add(3 * time.Second); tc.downLim.Probe(ctx) != nil; time.Sleep(20 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("3 s after Redis came back the breaker is %v", tc.downLim.BreakerState())
				}
			}
			decide(t, s, tc.needs, tc.up)
		})
	}
}

// TestSplitConcurrentExact: concurrent callers, some with calls on the
// per-second Redis alone and some with calls on both, admit exactly the
// limit of the per-second counter, whatever the algorithm, and the main
// counter keeps exactly what the admitted spanning calls took.
func TestSplitConcurrentExact(t *testing.T) {
	p := startPair(t)
	clk := newClock(future) // no window or refill ends during the test
	const tightN, roomyN, workers, perWorker = 20, 1000, 8, 16
	for _, a := range limit.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			s, _, _ := p.split(t, clk, "conc:"+a.String()+":", nil)
			tight := limit.Hit{Key: "tight", Spec: limit.Spec{Algorithm: a, Limit: tightN, Window: 30 * time.Second}, Cost: 1}
			roomy := limit.Hit{Key: "roomy", Spec: limit.Spec{Algorithm: a, Limit: roomyN, Window: time.Hour}, Cost: 1}
			if a.HasBurst() {
				// No refill within the test's fixed instant anyway; a rate
				// of 1 per window says so.
				tight.Spec.Limit, tight.Spec.Burst = 1, tightN
				roomy.Spec.Limit, roomy.Spec.Burst = 1, roomyN
			}
			var alone, spanning atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range perWorker {
						hits := []limit.Hit{tight, roomy}
						if (w+i)%3 == 0 {
							hits = hits[:1]
						}
						d := make([]limit.Decision, len(hits))
						if _, err := s.Evaluate(context.Background(), hits, d); err != nil {
							t.Error(err)
							return
						}
						switch {
						case !d[0].Allowed:
						case len(hits) == 1:
							alone.Add(1)
						default:
							spanning.Add(1)
						}
					}
				})
			}
			wg.Wait()
			if got := alone.Load() + spanning.Load(); got != tightN {
				t.Fatalf("%d calls admitted (%d alone, %d spanning) of %d, want exactly %d", got, alone.Load(), spanning.Load(), workers*perWorker, tightN)
			}
			t.Logf("%d calls: %d admitted alone, %d spanning", workers*perWorker, alone.Load(), spanning.Load())
			peek := decide(t, s, limit.Hit{Key: tight.Key, Spec: tight.Spec}, limit.Hit{Key: roomy.Key, Spec: roomy.Spec})
			if peek[0].Remaining != 0 || peek[1].Remaining != roomyN-spanning.Load() {
				t.Fatalf("remaining %d and %d, want 0 and %d: the denied spanning calls were not all given back", peek[0].Remaining, peek[1].Remaining, roomyN-spanning.Load())
			}
		})
	}
}

// TestSplitDenyCache: the deny cache in front of a Split, as the server
// puts it, answers calls on windows it saw used up, on either Redis,
// without calling them, and still sends a call with a limit it knows
// nothing of.
func TestSplitDenyCache(t *testing.T) {
	p := startPair(t)
	// At the start of a 30 s window (future is a whole minute): the
	// per-second denial holds for 30 s, longer than the test.
	s, _, _ := p.split(t, newClock(future), "deny:", nil)
	cache := denycache.New(s, denycache.Options{MaxAge: time.Minute})
	sec := limit.Hit{Key: "sec", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: 30 * time.Second}, Cost: 1}
	day := limit.Hit{Key: "day", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: 24 * time.Hour}, Cost: 1}
	roomy := limit.Hit{Key: "roomy", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour}, Cost: 1}
	decide(t, cache, sec, day) // exhausts both, one on each Redis: both learnt
	tests := []struct {
		name   string
		hits   []limit.Hit
		cached bool
	}{
		{"per-second denial", []limit.Hit{sec}, true},
		{"main denial", []limit.Hit{day}, true},
		{"both denials", []limit.Hit{sec, day}, true},
		{"a denial and an unknown limit", []limit.Hit{sec, roomy}, false},
	}
	for _, tc := range tests {
		before := p.main.commands.Load() + p.ps.commands.Load()
		d := decide(t, cache, tc.hits...)
		if d[0].Allowed {
			t.Errorf("%s: allowed: %+v", tc.name, d)
		}
		if sent := p.main.commands.Load() + p.ps.commands.Load() - before; (sent == 0) != tc.cached {
			t.Errorf("%s: %d commands sent, want them answered from the cache: %v", tc.name, sent, tc.cached)
		}
	}
	if r := decide(t, s, limit.Hit{Key: roomy.Key, Spec: roomy.Spec})[0].Remaining; r != 100 {
		t.Errorf("the denied call took from the main Redis: %d remaining, want 100", r)
	}
}
