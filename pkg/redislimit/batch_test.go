package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// newBatchLimiter returns a Limiter over n with one round trip in flight at
// most, so that concurrent calls queue and share round trips.
func newBatchLimiter(t *testing.T, n *node, clk *clock, prefix string, timeout time.Duration) *redislimit.Limiter {
	t.Helper()
	l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: prefix, Timeout: timeout,
		Batch: redislimit.BatchOptions{MaxInFlight: 1, MaxRequests: 16}})
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		l.SetNow(clk.now)
	}
	return l
}

// TestBatchIndependent: calls batched together are decided each on its
// own, exactly as the twin decides them one by one. 32 callers each drive
// their own counters with requests that pass, requests blocked by a
// descriptor that can never pass, and requests that fail in Redis (a key
// holding a list); none changes another's decisions, in the same batch or
// not, and a failed request consumes nothing.
func TestBatchIndependent(t *testing.T) {
	n := startNode(t)
	clk := newClock(future)
	l := newBatchLimiter(t, n, clk, "batch:", 5*time.Second)
	ctx := context.Background()
	if err := n.client.LPush(ctx, redislimit.Key("batch:", "poison"), "x").Err(); err != nil {
		t.Fatal(err)
	}
	const callers, requests = 32, 30
	before := n.commands.Load()
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			a := limit.Algorithm(g % int(limit.GCRA+1))
			own := limit.Hit{Key: fmt.Sprint("own/", g), Spec: limit.Spec{Algorithm: a, Limit: 12, Window: time.Hour}, Cost: 1}
			other := limit.Hit{Key: fmt.Sprint("other/", g), Spec: limit.Spec{Algorithm: a, Limit: 5, Window: time.Hour}, Cost: 1}
			never := limit.Hit{Key: "never", Spec: limit.Spec{Algorithm: a, Limit: 0, Window: time.Hour}, Cost: 1}
			poison := limit.Hit{Key: "poison", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Hour}, Cost: 1}
			twin := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
			for i := range requests {
				var hits []limit.Hit
				switch i % 4 {
				case 0:
					hits = []limit.Hit{own}
				case 1:
					hits = []limit.Hit{own, other}
				case 2:
					hits = []limit.Hit{own, never}
				case 3:
					hits = []limit.Hit{own, poison}
				}
				got := make([]limit.Decision, len(hits))
				blocked, err := l.Evaluate(ctx, hits, got)
				if i%4 == 3 {
					if !errors.Is(err, redislimit.ErrStore) {
						t.Errorf("caller %d request %d on a list: err = %v, want ErrStore", g, i, err)
					}
					continue
				}
				if err != nil {
					t.Errorf("caller %d request %d: %v", g, i, err)
					return
				}
				want := make([]limit.Decision, len(hits))
				wantBlocked, err := twin.Evaluate(ctx, hits, want)
				if err != nil {
					t.Error(err)
					return
				}
				if !reflect.DeepEqual(got, want) || blocked != wantBlocked {
					t.Errorf("caller %d (%v) request %d %+v:\nredis  %+v blocked %v\nmemory %+v blocked %v", g, a, i, hits, got, blocked, want, wantBlocked)
					return
				}
			}
		})
	}
	wg.Wait()
	calls := int64(callers * requests)
	sent := n.commands.Load() - before
	t.Logf("%d calls in %d round trips", calls, sent)
	if sent > calls/2 {
		t.Errorf("%d calls from %d concurrent callers took %d round trips: want them shared", calls, callers, sent)
	}
	if !l.Healthy() {
		t.Errorf("requests failing on their own data opened the breaker: %v", l.BreakerState())
	}
}

// TestBatchCallerLeaves: a call queued behind a round trip that Redis does
// not answer returns when its own context ends, and the calls that stay
// are answered once Redis is back, in one round trip.
func TestBatchCallerLeaves(t *testing.T) {
	n := startNode(t)
	l := newBatchLimiter(t, n, nil, "leave:", 5*time.Second)
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Hour}, Cost: 1}
	decide(t, l, hit) // loads the script
	if _, err := n.srv.Do("CLIENT", "PAUSE", "700", "ALL"); err != nil {
		t.Fatal(err)
	}
	// The first call is in flight and waits for the pause to end; the
	// others queue behind it. The limiter does not show its queue: each
	// call is given 20 ms to get in line before the next.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
		})
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := l.Evaluate(ctx, []limit.Hit{hit}, make([]limit.Decision, 1))
	if took := time.Since(start); took > 400*time.Millisecond {
		t.Errorf("a queued call with a 50ms deadline returned after %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, redislimit.ErrStore) {
		t.Errorf("queued call past its deadline: err = %v, want ErrStore and DeadlineExceeded", err)
	}
	before := n.commands.Load()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	// The call that left consumed nothing: 1 + 4 hits counted.
	if d := decide(t, l, limit.Hit{Key: "k", Spec: hit.Spec})[0]; d.Remaining != 1000-5 {
		t.Errorf("remaining %d, want %d", d.Remaining, 1000-5)
	}
	if sent := n.commands.Load() - before; sent > 2 {
		t.Errorf("the 3 queued calls took %d round trips after the pause with the peek, want 2", sent)
	}
	if !l.Healthy() {
		t.Errorf("breaker %v", l.BreakerState())
	}
}

// TestBatchWindow: with a window, calls that come one at a time share the
// round trip of the first (the reference server's REDIS_PIPELINE_WINDOW);
// MaxRequests waiting calls leave without waiting out the window; each call
// is still decided on its own, as the twin decides it.
func TestBatchWindow(t *testing.T) {
	for _, tc := range []struct {
		name        string
		window      time.Duration
		maxRequests int
		calls       int
		spacing     time.Duration // between the calls' starts
		wantTrips   int64
		wantUnder   time.Duration // the calls all return within this
	}{
		// Without a window each call finds a round trip free and goes
		// alone.
		{"no window", 0, 16, 5, 20 * time.Millisecond, 5, 30 * time.Second},
		// 5 calls within 80 ms of the first, inside its 2 s window.
		{"window", 2 * time.Second, 16, 5, 20 * time.Millisecond, 1, 30 * time.Second},
		// 4 calls at once fill a batch of 4: they leave long before the
		// minute.
		{"full before the window", time.Minute, 4, 4, 0, 1, 30 * time.Second},
		// A limit of one: the first call fills the batch by itself.
		{"limit of one", time.Minute, 1, 1, 0, 1, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t)
			clk := newClock(future)
			l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "window:", Timeout: 5 * time.Second,
				Batch: redislimit.BatchOptions{MaxInFlight: 2, MaxRequests: tc.maxRequests, Window: tc.window}})
			if err != nil {
				t.Fatal(err)
			}
			l.SetNow(clk.now)
			ctx := context.Background()
			// Load the library first, so that only decisions are counted.
			if err := l.Probe(ctx); err != nil {
				t.Fatal(err)
			}
			spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour}
			twin := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
			var twinMu sync.Mutex
			before := n.commands.Load()
			start := time.Now()
			var wg sync.WaitGroup
			for i := range tc.calls {
				if i > 0 {
					time.Sleep(tc.spacing) // the window runs on the wall clock
				}
				wg.Go(func() {
					// A counter per call: the twin cannot know in which
					// order a batch decided calls on one counter.
					hits := []limit.Hit{{Key: fmt.Sprint("k", i), Spec: spec, Cost: 2}}
					got := make([]limit.Decision, 1)
					if _, err := l.Evaluate(ctx, hits, got); err != nil {
						t.Errorf("call %d: %v", i, err)
						return
					}
					twinMu.Lock()
					defer twinMu.Unlock()
					want := make([]limit.Decision, 1)
					if _, err := twin.Evaluate(ctx, hits, want); err != nil {
						t.Error(err)
						return
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("call %d: redis %+v, memory %+v", i, got, want)
					}
				})
			}
			wg.Wait()
			if took := time.Since(start); took > tc.wantUnder {
				t.Errorf("the calls took %v, want under %v", took, tc.wantUnder)
			}
			if trips := n.commands.Load() - before; trips != tc.wantTrips {
				t.Errorf("%d calls took %d round trips, want %d", tc.calls, trips, tc.wantTrips)
			}
		})
	}
}

// TestBatchWindowNegative: a negative window is refused.
func TestBatchWindowNegative(t *testing.T) {
	n := startNode(t)
	_, err := redislimit.New(n.client, redislimit.Options{Batch: redislimit.BatchOptions{Window: -time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "Window") {
		t.Fatalf("err = %v, want one naming Window", err)
	}
}

// TestBatchWindowCallerLeaves: a call waiting out a long window returns as
// soon as its context ends, unsent, and the window's round trip is free
// again for the next call.
func TestBatchWindowCallerLeaves(t *testing.T) {
	n := startNode(t)
	l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "leave:", Timeout: 5 * time.Second,
		Batch: redislimit.BatchOptions{MaxInFlight: 1, Window: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	hits := []limit.Hit{{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour}, Cost: 1}}
	before := n.commands.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = l.Evaluate(ctx, hits, make([]limit.Decision, 1))
	if !errors.Is(err, redislimit.ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want ErrStore and the deadline", err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("returned after %v: the window held it", took)
	}
	if sent := n.commands.Load() - before; sent != 0 {
		t.Errorf("%d round trips for a call that left before the window ended", sent)
	}
	// The round trip is free again: a call with a short context of its own
	// waits out a window and is sent. 1 round trip.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = l.Evaluate(ctx2, hits, make([]limit.Decision, 1))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("second call: err = %v, want the deadline (the window is a minute)", err)
	}
}

// TestBatchBusyWindow: while a round trip is outstanding, a call that finds
// the other free waits for company (BusyWindow) instead of travelling
// alone; with BusyWindow off it leaves at once. A busy script holds Redis,
// so that the first round trip stays outstanding while the others come.
func TestBatchBusyWindow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		busyWindow time.Duration
		wantTrips  int64
	}{
		{"on", time.Minute, 2}, // the first alone, the other two together
		{"off", -1, 3},         // the second alone at once, the third after
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNode(t)
			l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "busy:", Timeout: 10 * time.Second,
				Batch: redislimit.BatchOptions{MaxInFlight: 2, MaxRequests: 2, BusyWindow: tc.busyWindow}})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := l.Probe(ctx); err != nil {
				t.Fatal(err)
			}
			spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 3, Window: time.Hour}
			before := commandStat(t, n.srv, "fcall", "calls") // before Redis is busy
			// Keep Redis busy for 400 ms from another connection, so that
			// the first call's round trip stays outstanding.
			busy := make(chan error, 1)
			go func() {
				_, err := n.srv.Do("EVAL", `local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end
local t0 = now() while now() - t0 < 400000 do end return 1`, "0")
				busy <- err
			}()
			time.Sleep(50 * time.Millisecond) // for the script to start
			start := time.Now()
			var wg sync.WaitGroup
			for i := range 3 {
				if i > 0 {
					time.Sleep(50 * time.Millisecond) // after the first is outstanding
				}
				wg.Go(func() {
					hits := []limit.Hit{{Key: fmt.Sprint("k", i), Spec: spec, Cost: 1}}
					d := make([]limit.Decision, 1)
					if _, err := l.Evaluate(ctx, hits, d); err != nil || !d[0].Allowed {
						t.Errorf("call %d: %+v, %v", i, d[0], err)
					}
				})
			}
			wg.Wait()
			if err := <-busy; err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("took %v: a full batch waited out the minute", took)
			}
			if trips := int64(commandStat(t, n.srv, "fcall", "calls") - before); trips != tc.wantTrips {
				t.Errorf("3 calls took %d round trips, want %d", trips, tc.wantTrips)
			}
		})
	}
}

// TestBatchBusyWindowAdapts: once two busy windows in a row end without
// company, a call that finds a round trip free while another is
// outstanding leaves at once instead of waiting for company that does not
// come (a server at a few thousand calls a second); a call that finds
// every round trip taken makes such calls wait for company again, and a
// window that drew company, though another round trip took it away,
// counts as one that did. A hook holds chosen round trips outstanding.
func TestBatchBusyWindowAdapts(t *testing.T) {
	const window = 300 * time.Millisecond
	n := startNode(t)
	t.Run("lonely, then under load", func(t *testing.T) {
		b := newHeldBatcher(t, n, window, 2)
		releaseA, doneA := b.held("a")
		for _, k := range []string{"b1", "b2"} {
			if took := b.call(k); took < window {
				t.Errorf("%s took %v: want it to wait out the %v window for company", k, took, window)
			}
			b.waitInFlight(1) // its sender freed the round trip: only a's is out
		}
		if took := b.call("c"); took >= window/2 {
			t.Errorf("c took %v after two windows without company: want it sent at once", took)
		}
		releaseD, doneD := b.held("d") // sent at once too, and held
		var wg sync.WaitGroup
		for _, k := range []string{"e", "f"} {
			wg.Go(func() { b.call(k) })
		}
		b.waitQueued(2)
		close(releaseA) // e and f leave together in a's round trip
		<-doneA
		wg.Wait()
		b.waitInFlight(1)
		if took := b.call("g"); took < window {
			t.Errorf("g took %v after calls found every round trip taken: want it to wait for company again", took)
		}
		close(releaseD)
		<-doneD
	})
	t.Run("company taken by another round trip", func(t *testing.T) {
		// Three round trips, so that the call joining the window finds
		// one free: it does not count as a call that found all taken.
		b := newHeldBatcher(t, n, window, 3)
		releaseA, doneA := b.held("a")
		if took := b.call("lonely"); took < window { // one window without company
			t.Errorf("lonely took %v: want it to wait out the %v window for company", took, window)
		}
		b.waitInFlight(1)
		var wg sync.WaitGroup
		wg.Go(func() { b.call("b") }) // waits for company
		b.waitQueued(1)
		wg.Go(func() { b.call("c") }) // joins it
		b.waitQueued(2)
		close(releaseA) // a's round trip takes b and c before the window ends
		<-doneA
		wg.Wait()
		b.waitInFlight(0)
		releaseD, doneD := b.held("d")
		for _, k := range []string{"e1", "e2"} { // the count starts again
			if took := b.call(k); took < window {
				t.Errorf("%s took %v after a window that drew company: want it to wait for company", k, took)
			}
			b.waitInFlight(1)
		}
		close(releaseD)
		<-doneD
	})
}

// heldBatcher is a Limiter whose batcher waits up to a window for company,
// with inFlight round trips at most, on a client whose round trips a hook
// can hold.
type heldBatcher struct {
	t    *testing.T
	l    *redislimit.Limiter
	hook *holdHook
}

func newHeldBatcher(t *testing.T, n *node, window time.Duration, inFlight int) *heldBatcher {
	hook := &holdHook{holds: make(chan chan struct{}, 1), started: make(chan struct{}, 1)}
	client := redis.NewClient(&redis.Options{Addr: n.srv.Addr})
	client.AddHook(hook)
	t.Cleanup(func() { client.Close() })
	l, err := redislimit.New(client, redislimit.Options{KeyPrefix: "adapt:" + t.Name() + ":", Timeout: time.Minute,
		Batch: redislimit.BatchOptions{MaxInFlight: inFlight, MaxRequests: 4, BusyWindow: window}})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &heldBatcher{t: t, l: l, hook: hook}
}

// call decides one hit on key and returns how long it took.
func (b *heldBatcher) call(key string) time.Duration {
	start := time.Now()
	d := make([]limit.Decision, 1)
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Hour}
	if _, err := b.l.Evaluate(context.Background(), []limit.Hit{{Key: key, Spec: spec, Cost: 1}}, d); err != nil || !d[0].Allowed {
		b.t.Errorf("call %s: %+v, %v", key, d[0], err)
	}
	return time.Since(start)
}

// held starts a call whose round trip the hook holds until release is
// closed, and returns once that round trip is outstanding.
func (b *heldBatcher) held(key string) (release, done chan struct{}) {
	release, done = make(chan struct{}), make(chan struct{})
	b.hook.holds <- release
	go func() {
		defer close(done)
		b.call(key)
	}()
	<-b.hook.started
	return release, done
}

// waitQueued returns once n calls wait in the batcher.
func (b *heldBatcher) waitQueued(n int) { b.waitCount("calls queued", n, b.l.Queued) }

// waitInFlight returns once n round trips are outstanding. A caller is
// answered before its round trip's sender takes the next batch or frees
// it: a call made meanwhile would find that round trip still taken, and
// the sender would take it from the queue at once, company or not.
func (b *heldBatcher) waitInFlight(n int) { b.waitCount("round trips outstanding", n, b.l.InFlight) }

// waitCount returns once count() reports n, polling it; it fails the test
// if it does not within a generous bound.
func (b *heldBatcher) waitCount(what string, n int, count func() int) {
	deadline := time.Now().Add(30 * time.Second)
	for got := count(); got != n; got = count() {
		if time.Now().After(deadline) {
			b.t.Fatalf("%d %s after 30s, want %d", got, what, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdHook holds the FCALL of each call it is handed a channel for, until
// that channel is closed, having said so on started.
type holdHook struct {
	holds   chan chan struct{}
	started chan struct{}
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "fcall" {
			select {
			case release := <-h.holds:
				h.started <- struct{}{}
				<-release
			default:
			}
		}
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBatchBound: on a Redis that answers nothing, every call ends within
// Options.Timeout of its start though its context has no deadline,
// whether it was in flight, queued, or sent in a batch whose other call
// started later: the server relies on it to set no deadline of its own per
// request.
func TestBatchBound(t *testing.T) {
	const timeout = time.Second
	n := startNode(t)
	l := newBatchLimiter(t, n, nil, "bound:", timeout)
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Hour}, Cost: 1}
	decide(t, l, hit) // loads the script
	n.srv.Freeze()
	defer n.srv.Thaw()
	// The first call is in flight until its deadline; the second queues
	// behind it, the third half a Timeout later: both leave in one batch
	// when the first fails, the batch's round trip lasting until the
	// third's deadline, half a Timeout past the second's.
	starts := []time.Duration{0, 20 * time.Millisecond, timeout / 2}
	took := make([]time.Duration, len(starts))
	errs := make([]error, len(starts))
	var wg sync.WaitGroup
	begin := time.Now()
	for i, at := range starts {
		time.Sleep(time.Until(begin.Add(at)))
		wg.Go(func() {
			start := time.Now()
			_, errs[i] = l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
			took[i] = time.Since(start)
		})
	}
	wg.Wait()
	// A timer fires late on a busy machine; the slack is well under the
	// half Timeout that the second call would overstay without its own end.
	const slack = 300 * time.Millisecond
	for i := range starts {
		// The call in flight meets its connection's deadline first.
		late := errors.Is(errs[i], context.DeadlineExceeded) || errors.Is(errs[i], os.ErrDeadlineExceeded)
		if !errors.Is(errs[i], redislimit.ErrStore) || !late {
			t.Errorf("call %d: err = %v, want ErrStore and a deadline exceeded", i, errs[i])
		}
		if took[i] < timeout-10*time.Millisecond || took[i] > timeout+slack {
			t.Errorf("call %d (started at +%v) ended after %v, want its Timeout %v (+%v at most)", i, starts[i], took[i], timeout, slack)
		}
	}
}
