package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// faultCluster is a 3-master Cluster without replicas whose masters keep
// serving their slots while another is down (cluster-require-full-coverage
// no), with a Limiter with the default breaker and a deadline of
// faultDeadline.
type faultCluster struct {
	c       *redistest.Cluster
	client  *redis.ClusterClient
	lim     *redislimit.Limiter
	masters []string // addresses, sorted
	byAddr  map[string]*redistest.Server
}

const faultPrefix = "fault:"

// faultDeadline is the deadline of each call: far above production's 50
// ms, which a busy machine running the race detector misses now and then
// on a healthy master (250 ms was missed once with every package's tests
// running at once): the tests are about where a fault lands, not about
// latency, and a deadline missed on a healthy master is not that.
const faultDeadline = time.Second

// hammerPause is how long each of hammer's goroutines waits between
// requests: a steady load that leaves the machine some CPU.
const hammerPause = 500 * time.Microsecond

func startFaultCluster(t *testing.T) *faultCluster {
	c := redistest.StartCluster(t, 3, 0, "--cluster-require-full-coverage", "no")
	uc, err := redislimit.NewClient(redislimit.ClientConfig{Type: "cluster", URL: strings.Join(c.Addrs, ",")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	l, err := redislimit.New(uc, redislimit.Options{KeyPrefix: faultPrefix, Timeout: faultDeadline})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A clock that stands still: no window ends while a phase runs, so
	// that exactly the limit is admitted.
	l.SetNow(func() time.Time { return future })
	fc := &faultCluster{c: c, client: uc.(*redis.ClusterClient), lim: l, byAddr: make(map[string]*redistest.Server)}
	for _, n := range c.Nodes {
		fc.byAddr[n.Addr] = n
		fc.masters = append(fc.masters, n.Addr)
	}
	slices.Sort(fc.masters)
	return fc
}

// counterOn returns a counter named after name whose slot master is addr,
// and, when slots is not nil, whose slot it holds.
func (fc *faultCluster) counterOn(t *testing.T, addr, name string, slots func(uint16) bool) string {
	for i := range 100000 {
		c := fmt.Sprint(name, "-", i)
		if slots != nil && !slots(redislimit.Slot(faultPrefix, c)) {
			continue
		}
		m, err := fc.client.MasterForKey(context.Background(), redislimit.Key(faultPrefix, c))
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == addr {
			return c
		}
	}
	t.Fatalf("no counter of %s on %s", name, addr)
	return ""
}

// faultLimit is the limit of every counter of these tests.
var faultLimit = limit.Spec{Algorithm: limit.FixedWindow, Limit: 50, Window: time.Hour}

// tally counts how calls on one counter ended.
type tally struct {
	allowed, denied, failed, open int
	openTime                      time.Duration // spent in the calls that failed with ErrCircuitOpen
}

// hammer sends requests of one hit on each counter (and, for each pair in
// mixed, of both hits) from a goroutine per counter until stop is closed
// and each has sent at least min, and returns the tallies by counter (a
// pair under "a+b").
func (fc *faultCluster) hammer(counters []string, mixed [][2]string, min int, stop <-chan struct{}) map[string]*tally {
	var mu sync.Mutex
	out := make(map[string]*tally)
	var wg sync.WaitGroup
	run := func(name string, hits []limit.Hit) {
		tl := new(tally)
		for i := 0; ; i++ {
			if i >= min {
				select {
				case <-stop:
					mu.Lock()
					out[name] = tl
					mu.Unlock()
					return
				default:
				}
			}
			d := make([]limit.Decision, len(hits))
			start := time.Now()
			blocked, err := fc.lim.Evaluate(context.Background(), hits, d)
			switch {
			case errors.Is(err, redislimit.ErrCircuitOpen):
				tl.open++
				tl.openTime += time.Since(start)
			case err != nil:
				tl.failed++
			case !blocked:
				tl.allowed++
			default:
				tl.denied++
			}
			time.Sleep(hammerPause)
		}
	}
	hit := func(c string) limit.Hit { return limit.Hit{Key: c, Spec: faultLimit, Cost: 1} }
	for _, c := range counters {
		wg.Go(func() { run(c, []limit.Hit{hit(c)}) })
	}
	for _, p := range mixed {
		wg.Go(func() { run(p[0]+"+"+p[1], []limit.Hit{hit(p[0]), hit(p[1])}) })
	}
	wg.Wait()
	return out
}

// remaining peeks at a counter.
func (fc *faultCluster) remaining(t *testing.T, counter string) int64 {
	d := make([]limit.Decision, 1)
	if _, err := fc.lim.Evaluate(context.Background(), []limit.Hit{{Key: counter, Spec: faultLimit}}, d); err != nil {
		t.Fatalf("peek at %s: %v", counter, err)
	}
	return d[0].Remaining
}

// TestClusterNodeFault: one master of three killed, then frozen (SIGSTOP),
// under load. The counters on the two live masters are decided, every one
// of them, and exactly (50 admitted of more); the calls on the failing
// master fail, at once after the breaker of that master opens (no call
// waits for the deadline then); a request on both loses nothing on the
// live master (what it consumed there is given back); Nodes names the
// failing master. Once the master is back, its calls are decided again
// within the breaker's longest backoff.
func TestClusterNodeFault(t *testing.T) {
	fc := startFaultCluster(t)
	victim := fc.masters[0]
	for _, fault := range []struct {
		name        string
		cause, heal func(*redistest.Server)
	}{
		{"killed", (*redistest.Server).Stop, (*redistest.Server).Restart},
		{"frozen", (*redistest.Server).Freeze, (*redistest.Server).Thaw},
	} {
		t.Run(fault.name, func(t *testing.T) {
			var live []string
			for _, m := range fc.masters[1:] {
				for i := range 2 {
					live = append(live, fc.counterOn(t, m, fmt.Sprint(fault.name, "-live", i), nil))
				}
			}
			dead := fc.counterOn(t, victim, fault.name+"-dead", nil)
			pair := [2]string{fc.counterOn(t, fc.masters[1], fault.name+"-pair", nil), dead}

			fault.cause(fc.byAddr[victim])
			stop := make(chan struct{})
			time.AfterFunc(time.Second, func() { close(stop) })
			// 80 requests on each live counter: 50 admitted, 30 denied.
			got := fc.hammer(append(live, dead), [][2]string{pair}, 80, stop)
			checkLive(t, got, live)
			checkDead(t, got[dead], "the failing master's counter")
			checkDead(t, got[pair[0]+"+"+pair[1]], "requests on both")
			if r := fc.remaining(t, pair[0]); r != faultLimit.Limit {
				t.Errorf("the live counter of requests that also needed the failing master has %d of %d left: their consumption was not given back", r, faultLimit.Limit)
			}
			checkNodes(t, fc.lim, victim)

			fault.heal(fc.byAddr[victim])
			// A restarted master refuses writes for its first 2 s
			// (CLUSTERDOWN) until it has heard from the others: it is
			// back once it says its cluster is ok.
			if err := fc.c.WaitOK(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			healed := time.Now()
			for {
				d := make([]limit.Decision, 1)
				if _, err := fc.lim.Evaluate(context.Background(), []limit.Hit{{Key: dead, Spec: faultLimit, Cost: 1}}, d); err == nil {
					break
				}
				if time.Since(healed) > redislimit.DefaultBreakerMaxBackoff+time.Second {
					t.Fatalf("%v after the master came back, its calls still fail (%+v)", time.Since(healed), fc.lim.Nodes())
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Logf("decided again %v after the master came back", time.Since(healed).Round(time.Millisecond))
		})
	}
}

// TestClusterProbeFrozenMaster: the health probe, while one master of
// three is frozen, finds that master failing and only it, every time,
// and the live masters' counters keep being decided. The probe asks a
// random node for the slot map, and the client reloads its map from a
// random node before the loads: when that is the frozen master, it
// spends its share of the probe's time, not the live masters' (which
// once failed their loads on an expired context and were forced open,
// the slot map's breaker with them, failing every call).
func TestClusterProbeFrozenMaster(t *testing.T) {
	fc := startFaultCluster(t)
	victim := fc.masters[0]
	live := fc.counterOn(t, fc.masters[1], "probe-live", nil)
	fc.byAddr[victim].Freeze()
	defer fc.byAddr[victim].Thaw()
	// Each probe finds the frozen master through the slot map or the
	// client's reload with a chance of 5/9: eight fail to, all of them,
	// once in 650 runs.
	for i := range 8 {
		ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
		err := fc.lim.Probe(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), victim) {
			t.Fatalf("probe %d with %s frozen: %v, want an error naming it", i, victim, err)
		}
		checkNodes(t, fc.lim, victim)
		d := make([]limit.Decision, 1)
		if _, err := fc.lim.Evaluate(context.Background(), []limit.Hit{{Key: live, Spec: faultLimit, Cost: 1}}, d); err != nil || !d[0].Allowed {
			t.Fatalf("after probe %d, a counter on a live master: %+v, %v; want it decided, allowed", i, d[0], err)
		}
	}
}

// checkLive: every call on the live counters was decided, and exactly the
// limit admitted.
func checkLive(t *testing.T, got map[string]*tally, live []string) {
	t.Helper()
	for _, c := range live {
		tl := got[c]
		if tl.failed+tl.open > 0 || tl.allowed != int(faultLimit.Limit) {
			t.Errorf("live counter %s: %+v; want every call decided and %d admitted", c, *tl, faultLimit.Limit)
		}
	}
}

// checkDead: every call failed, and once the breaker opened no call went
// to Redis but the breaker's probes (at most one per minimum backoff).
func checkDead(t *testing.T, tl *tally, what string) {
	t.Helper()
	if tl.allowed+tl.denied > 0 {
		t.Errorf("%s: %+v: decided while the master was down", what, *tl)
	}
	// The calls that reached for Redis: the breaker's threshold, then its
	// probes, one per backoff of at least the minimum, over about a second.
	probes := int(time.Second/redislimit.DefaultBreakerMinBackoff) + 2
	if tl.failed > redislimit.DefaultBreakerFailures+probes || tl.open == 0 {
		t.Errorf("%s: %d calls went to the failing master and %d failed at once; want at most %d and the rest at once",
			what, tl.failed, tl.open, redislimit.DefaultBreakerFailures+probes)
	}
	if tl.open > 0 {
		t.Logf("%s: %d calls failed at once, %v each; %d waited for Redis", what, tl.open, tl.openTime/time.Duration(tl.open), tl.failed)
	}
}

// checkNodes: Nodes names the failing master, and only it, as not closed.
func checkNodes(t *testing.T, l *redislimit.Limiter, victim string) {
	t.Helper()
	if l.Healthy() {
		t.Error("Healthy with a master down")
	}
	for _, n := range l.Nodes() {
		if failing := !n.Healthy(); failing != (n.Addr == victim) {
			t.Errorf("node %q (slots %s): breaker %v, last failure %v; the failing master is %s", n.Addr, n.Slots, n.Breaker, n.LastFailure, victim)
		}
		if n.Addr == victim && n.LastFailure == nil {
			t.Errorf("node %s: no last failure recorded", n.Addr)
		}
	}
}

// TestClusterReshard: 2,000 slots move from one master to another with
// redis-cli under load. The counters of the third master are decided,
// every one, and exactly; those in the moving slots are followed through
// ASK and MOVED (Redis ran nothing then) and never admit more than the
// limit.
func TestClusterReshard(t *testing.T) {
	harness.Require(t, "redis-cli")
	fc := startFaultCluster(t)
	from, to, other := fc.masters[0], fc.masters[1], fc.masters[2]
	ranges, err := fc.client.ClusterSlots(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var first int // the first slot of from: redis-cli moves from there up
	for _, r := range ranges {
		if r.Nodes[0].Addr == from {
			first = r.Start
		}
	}
	moving := func(s uint16) bool { return int(s) >= first && int(s) < first+1000 }
	var live, moved []string
	for i := range 4 {
		live = append(live, fc.counterOn(t, other, fmt.Sprint("reshard-live", i), nil))
		moved = append(moved, fc.counterOn(t, from, fmt.Sprint("reshard-moved", i), moving))
	}

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		defer close(stop)
		done <- reshard(fc, from, to, 2000)
	}()
	got := fc.hammer(append(live, moved...), nil, 80, stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkLive(t, got, live)
	for _, c := range moved {
		tl := got[c]
		if tl.allowed > int(faultLimit.Limit) {
			t.Errorf("moving counter %s: %+v: admitted over the limit", c, *tl)
		}
		t.Logf("moving counter %s: %+v", c, *tl)
	}
	if m, err := fc.client.MasterForKey(context.Background(), redislimit.Key(faultPrefix, moved[0])); err != nil || m.Options().Addr != to {
		t.Errorf("after the reshard %s is on %v (%v), want %s", moved[0], m, err, to)
	}
}

// reshard moves slots slots from the master at from to the one at to with
// redis-cli --cluster reshard.
func reshard(fc *faultCluster, from, to string, slots int) error {
	id := func(addr string) (string, error) { return redistest.Do(addr, "CLUSTER", "MYID") }
	fromID, err := id(from)
	if err != nil {
		return err
	}
	toID, err := id(to)
	if err != nil {
		return err
	}
	args := []string{"--cluster", "reshard", from, "--cluster-from", fromID, "--cluster-to", toID,
		"--cluster-slots", strconv.Itoa(slots), "--cluster-yes", "--cluster-pipeline", "10"}
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return fc.c.WaitOK(30 * time.Second)
}

// liveCounters returns n counters on each live master (all but
// fc.masters[0], the victim).
func liveCounters(t *testing.T, fc *faultCluster, name string, n int) []string {
	var counters []string
	for _, m := range fc.masters[1:] {
		for i := range n {
			counters = append(counters, fc.counterOn(t, m, fmt.Sprint(name, i), nil))
		}
	}
	return counters
}

// TestClusterColdClientFrozenMaster: floodgate starts (a new Cluster client,
// as after a restart or a new pod) while one master of three is frozen
// (SIGSTOP). Requests whose counters live on the two live masters must end
// within their deadline and must not open the live masters' breakers.
//
// go-redis's ClusterClient, with routing policies on (its default, which
// NewClient turns off), fetches COMMAND from up to 3 random nodes, one after
// the other, on the first commands it routes (cmdInfo in routeAndRun),
// under a mutex every command takes (cmdsInfoCache.Get), with a context of
// its own (5 s, bounded by ReadTimeout), not the caller's. When the
// frozen master is asked first (1 chance in 3 per cold client), every
// command of every master waits ReadTimeout; the calls then fail on their
// expired contexts and count as failures of the live masters' breakers.
// Each trial is a fresh client; 12 trials all miss the frozen master
// first with a chance of (2/3)^12, under 1 %.
func TestClusterColdClientFrozenMaster(t *testing.T) {
	fc := startFaultCluster(t)
	victim, live := fc.masters[0], fc.masters[1:]
	// 5 counters per live master: enough failures to open its breaker.
	counters := liveCounters(t, fc, "cold-live", redislimit.DefaultBreakerFailures)
	fc.byAddr[victim].Freeze()
	defer fc.byAddr[victim].Thaw()

	const deadline = 200 * time.Millisecond
	const readTimeout = 1500 * time.Millisecond
	for trial := range 12 {
		// Seeds are the live masters only, so that the client's own slot
		// map load never asks the frozen one.
		uc, err := redislimit.NewClient(redislimit.ClientConfig{Type: "cluster", URL: strings.Join(live, ","), ReadTimeout: readTimeout})
		if err != nil {
			t.Fatal(err)
		}
		l, err := redislimit.New(uc, redislimit.Options{KeyPrefix: faultPrefix, Timeout: deadline})
		if err != nil {
			t.Fatal(err)
		}
		l.SetNow(func() time.Time { return future })
		type res struct {
			took time.Duration
			err  error
		}
		out := make([]res, len(counters))
		var wg sync.WaitGroup
		for i, c := range counters {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				defer cancel()
				start := time.Now()
				_, err := l.Evaluate(ctx, []limit.Hit{{Key: c, Spec: faultLimit}}, make([]limit.Decision, 1))
				out[i] = res{time.Since(start), err}
			})
		}
		wg.Wait()
		uc.Close()
		slow := 0
		for i, r := range out {
			if r.took > deadline+time.Second/2 {
				slow++
				t.Errorf("trial %d: a request on live counter %s took %v (deadline %v): %v", trial, counters[i], r.took.Round(time.Millisecond), deadline, r.err)
			}
		}
		for _, n := range l.Nodes() {
			if n.Addr != "" && n.Addr != victim && !n.Healthy() {
				t.Errorf("trial %d: live master %s: breaker %v (last failure %v): opened by the frozen master", trial, n.Addr, n.Breaker, n.LastFailure)
			}
		}
		if slow > 0 {
			return
		}
		t.Logf("trial %d: every request decided within its deadline", trial)
	}
}

// TestClusterUndecidedFrozenMaster: a Limiter that has not yet decided
// how the Lua code runs (FCALL or EVALSHA) decides on its first call, on
// the request path: Limiter.call -> decide -> loadEach, which loads the
// library on every master (ForEachMaster) and waits for all of them, each
// given the whole Options.Timeout detached from the caller's context. A
// frozen master thus holds the first request on a live master for its
// whole deadline, which it then misses, counted on the live master's
// breaker. Such Limiters: store.LimiterWithin's (RLQS report rounds), which
// nothing probes; the request Limiter while its start probe reached no
// master.
func TestClusterUndecidedFrozenMaster(t *testing.T) {
	fc := startFaultCluster(t) // its client's slot map and command table are loaded
	victim := fc.masters[0]
	counter := liveCounters(t, fc, "undecided-live", 1)[0]
	fc.byAddr[victim].Freeze()
	defer fc.byAddr[victim].Thaw()

	const deadline = 300 * time.Millisecond
	l, err := redislimit.New(fc.client, redislimit.Options{KeyPrefix: faultPrefix, Timeout: deadline})
	if err != nil {
		t.Fatal(err)
	}
	l.SetNow(func() time.Time { return future })
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	d := make([]limit.Decision, 1)
	_, err = l.Evaluate(ctx, []limit.Hit{{Key: counter, Spec: faultLimit, Cost: 1}}, d)
	took := time.Since(start)
	if err != nil || !d[0].Allowed {
		t.Errorf("the first request on a live master's counter, one master frozen: %+v, %v after %v; want it decided at once", d[0], err, took.Round(time.Millisecond))
	}
	for _, n := range l.Nodes() {
		if n.LastFailure != nil && n.Addr != victim {
			t.Errorf("node %q (breaker %v): failure %v recorded against it, caused by the frozen master", n.Addr, n.Breaker, n.LastFailure)
		}
	}
}
