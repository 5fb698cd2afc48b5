package redislimit_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// logCap is the largest sliding_log limit pkg/rules accepts (its
// slidingLogMax): a counter holds at most that many entries.
const logCap = 2000

// fillLog logs count hits of cost 1 on key (a Redis key), one per µs from
// start (µs), through the script, a few hundred requests per call, each
// request with its own now: count entries of one hit, the most a counter
// of limit count can hold.
func fillLog(t testing.TB, n *node, key string, sp limit.Spec, start int64, count int) {
	t.Helper()
	script := redis.NewScript(redislimit.ScriptSource())
	spec := fmt.Sprintf("%d:%d:%d:%d:1", sp.Algorithm, sp.Limit, sp.WindowMicros(), sp.Capacity())
	var keys []string
	var args []any
	for i := range count {
		keys = append(keys, key)
		args = append(args, start+int64(i), 1, spec, 1, 0)
		if len(keys) < 200 && i < count-1 {
			continue
		}
		reply, err := script.Run(context.Background(), n.client, keys, args...).Slice()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reply {
			if d, ok := r.([]any); !ok || d[0] != int64(1) {
				t.Fatalf("filling %s: a hit was not admitted: %v", key, r)
			}
		}
		keys, args = keys[:0], args[:0]
	}
}

// pingWhile runs f while another connection PINGs Redis in a loop, and
// returns the longest PING round trip seen: how long Redis, which runs one
// script at a time, kept everyone else waiting.
func pingWhile(t testing.TB, addr string, f func()) time.Duration {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, ReadTimeout: time.Minute})
	defer c.Close()
	var worst time.Duration
	var pings int
	stop, done, warm := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(done)
		defer once.Do(func() { close(warm) })
		for {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Error(err)
				return
			}
			worst = max(worst, time.Since(t0))
			if pings++; pings == 3 {
				once.Do(func() { close(warm) })
			}
		}
	}()
	<-warm
	f()
	close(stop)
	<-done
	return worst
}

// scriptMicros returns the µs Redis spent in scripts and functions since
// the last CONFIG RESETSTAT.
func scriptMicros(t testing.TB, n *node) float64 {
	t.Helper()
	return commandStat(t, n.srv, "evalsha", "usec") + commandStat(t, n.srv, "eval", "usec") +
		commandStat(t, n.srv, "fcall", "usec")
}

// TestSlidingLogBoundedWork: no call on a sliding_log keeps Redis busy for
// long, whatever its cost and however full the log: a concurrent PING gets
// its answer within 20 ms (a 100,000,000-per-hour log and a hit of
// 2,000,000 used to block Redis for 5.5 s and take 241 MB), and the key
// stays small. The worst logs are at logCap, full of single hits: all
// expiring at once, denied with a retry from the middle of the log,
// refunded by half.
func TestSlidingLogBoundedWork(t *testing.T) {
	const maxPing = 20 * time.Millisecond
	n := startNode(t)
	clk := newClock(future)
	l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "bound:", Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l.SetNow(clk.now)
	w := time.Hour
	capped := limit.Spec{Algorithm: limit.SlidingLog, Limit: logCap, Window: w}
	huge := limit.Spec{Algorithm: limit.SlidingLog, Limit: 100_000_000, Window: w}
	half := time.Duration(logCap/2) * us
	tests := []struct {
		name   string
		spec   limit.Spec
		fill   int           // hits of cost 1 logged first, one per µs from t0
		at     time.Duration // the hit's now, after t0
		cost   int64
		refund bool
		want   limit.Decision
		bytes  int64 // most MEMORY USAGE of the key after the hit; 0: no key
	}{
		{"the issue's hit: 2,000,000 on 100,000,000 per hour", huge, 0, 0, 2_000_000, false,
			allow(98_000_000, w), 256},
		{"2,000,000 at the cap", capped, 0, 0, 2_000_000, false,
			limit.Decision{Remaining: logCap, Never: true}, 0},
		{"the whole limit at once", capped, 0, 0, logCap, false, allow(0, w), 256},
		{"a full log expiring at once", capped, logCap, w + logCap*us, 1, false, allow(logCap-1, w), 2048},
		{"half a full log expiring at once", capped, logCap, w + half, 1, false, allow(logCap/2, w), 150_000},
		{"denied at the middle of a full log", capped, logCap, logCap * us, logCap / 2, false,
			deny(0, w-us, w-half-us), 300_000},
		{"peek at a full log", capped, logCap, logCap * us, 0, false, allow(0, w-us), 300_000},
		{"refund of half a full log", capped, logCap, logCap * us, logCap / 2, true, allow(logCap/2, w-half-us), 150_000},
		{"refund of a full log", capped, logCap, logCap * us, 2 * logCap, true, allow(logCap, 0), 0},
		{"refund of 2,000,000 on 100,000,000 per hour", huge, logCap, logCap * us, 2_000_000, true,
			allow(100_000_000, 0), 0},
	}
	ctx := context.Background()
	decide(t, l, limit.Hit{Key: "warm", Spec: capped, Cost: 1}) // loads the script
	for i, tc := range tests {
		// The timing is of a shared machine: a case whose PING waited too
		// long is run again on a fresh counter, up to 3 times; a call that
		// really holds Redis up fails every time.
		for attempt := range 3 {
			counter := fmt.Sprint(i, "/", attempt)
			key := redislimit.Key("bound:", counter)
			t0 := future.Add(time.Duration(3*i+attempt) * 10 * w)
			fillLog(t, n, key, tc.spec, t0.UnixMicro(), tc.fill)
			if tc.fill == logCap && attempt == 0 {
				t.Logf("%s: a log of %d single hits takes %d B", tc.name, logCap, n.client.MemoryUsage(ctx, key, 0).Val())
			}
			clk.set(t0.Add(tc.at))
			hit := limit.Hit{Key: counter, Spec: tc.spec, Cost: tc.cost, Refund: tc.refund}
			if _, err := n.srv.Do("CONFIG", "RESETSTAT"); err != nil {
				t.Fatal(err)
			}
			var got limit.Decision
			ping := pingWhile(t, n.srv.Addr, func() { got = decide(t, l, hit)[0] })
			inRedis := time.Duration(scriptMicros(t, n)) * us
			t.Logf("%s: the script ran %v in Redis, longest PING %v", tc.name, inRedis, ping)
			if got != tc.want {
				t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
			}
			size, err := n.client.MemoryUsage(ctx, key, 0).Result()
			if err == redis.Nil {
				size, err = 0, nil
			}
			if err != nil {
				t.Fatal(err)
			}
			if (size == 0) != (tc.bytes == 0) || size > tc.bytes {
				t.Errorf("%s: the key takes %d B (want at most %d, 0 for none)", tc.name, size, tc.bytes)
			}
			if ping <= maxPing && inRedis <= maxPing {
				break
			}
			if attempt == 2 {
				t.Errorf("%s: the script ran %v in Redis and a PING waited %v (want both under %v)", tc.name, inRedis, ping, maxPing)
			}
		}
	}
}

// logModel is a sliding log as its definition reads: the time of every
// admitted hit, one element per hit, in time order.
type logModel []int64

// step applies one hit to m as limit.stepSlidingLog and evaluate.lua's
// step define it, returning the log after the hit, its decision and whether
// it writes.
func (m logModel) step(sp limit.Spec, now, cost int64, refund bool) (logModel, limit.Decision, bool) {
	if !refund && cost > sp.Capacity() {
		next, d, _ := m.step(sp, now, 0, false)
		d.Allowed, d.Never, d.RetryAfter = false, true, 0
		return next, d, false
	}
	w := sp.WindowMicros()
	i := 0
	for i < len(m) && m[i] <= now-w {
		i++
	}
	live := slices.Clone(m[i:])
	var d limit.Decision
	write := false
	switch n := int64(len(live)); {
	case refund:
		d.Allowed = true
		taken := min(cost, n)
		live, write = live[:n-taken], taken > 0
	case n+cost <= sp.Limit:
		d.Allowed = true
		i, _ := slices.BinarySearch(live, now+1)
		live = slices.Insert(live, i, slices.Repeat([]int64{now}, int(cost))...)
		write = cost > 0
	default:
		d.RetryAfter = time.Duration(live[n+cost-sp.Limit-1]+w-now) * us
	}
	d.Remaining, d.Debt = max(0, sp.Limit-int64(len(live))), max(0, int64(len(live))-sp.Limit)
	if len(live) > 0 {
		d.ResetAfter = time.Duration(live[len(live)-1]+w-now) * us
	}
	return live, d, write
}

// TestSlidingLogMatchesModel drives the script with random requests of
// one to three hits on two counters, costs from 0 to past the limit (hits
// of one instant share an entry: these make entries of many hits, cut by
// refunds), a clock that also goes back (entries later than now), and
// limits that change, and requires the decisions of the log model above,
// to the µs.
func TestSlidingLogMatchesModel(t *testing.T) {
	n := startNode(t)
	specs := []limit.Spec{
		{Algorithm: limit.SlidingLog, Limit: 5, Window: time.Second},
		{Algorithm: limit.SlidingLog, Limit: 200, Window: time.Minute},
		{Algorithm: limit.SlidingLog, Limit: logCap, Window: time.Hour},
	}
	for si, sp := range specs {
		rng := rand.New(rand.NewPCG(uint64(si), 13))
		clk := newClock(future)
		l := newLimiter(t, n.client, clk, fmt.Sprintf("model%d:", si))
		w := sp.WindowMicros()
		logs := map[string]logModel{}
		limits := map[string]limit.Spec{"a": sp, "b": sp}
		for step := range 400 {
			switch r := rng.IntN(10); {
			case r < 5:
				clk.add(time.Duration(rng.Int64N(w/3+1)) * us)
			case r < 7:
				clk.add(-time.Duration(rng.Int64N(w/4+1)) * us)
			case r == 7:
				clk.add(2 * sp.Window)
			case r == 8:
				// A reload changes counter b's limit.
				b := limits["b"]
				b.Limit = 1 + rng.Int64N(2*sp.Limit)
				limits["b"] = b
			}
			now := clk.micros()
			hits := make([]limit.Hit, 1+rng.IntN(3))
			for i := range hits {
				key := []string{"a", "b"}[rng.IntN(2)]
				hsp := limits[key]
				costs := []int64{0, 1, 1, 2, 3, hsp.Limit / 3, hsp.Limit, hsp.Limit + 1, 1 + rng.Int64N(hsp.Limit)}
				hits[i] = limit.Hit{Key: key, Spec: hsp, Cost: costs[rng.IntN(len(costs))],
					Refund: rng.IntN(5) == 0, Mode: limit.Mode(rng.IntN(3))}
			}
			// The request as evaluate.lua decides it: hits in order on
			// working copies; a blocking denial writes nothing, and the
			// allowed hits then report a peek at the stored logs.
			work := map[string]logModel{}
			for k, v := range logs {
				work[k] = v
			}
			want := make([]limit.Decision, len(hits))
			for i, h := range hits {
				next, d, write := work[h.Key].step(h.Spec, now, h.Cost, h.Refund)
				if write {
					work[h.Key] = next
				}
				want[i] = d
			}
			wantBlocked := limit.Blocked(hits, want)
			if wantBlocked {
				for i, h := range hits {
					if want[i].Allowed {
						_, d, _ := logs[h.Key].step(h.Spec, now, 0, false)
						want[i].Remaining, want[i].Debt, want[i].ResetAfter = d.Remaining, d.Debt, d.ResetAfter
						want[i].RetryAfter, want[i].Never = 0, false
					}
				}
			} else {
				logs = work
			}
			got := make([]limit.Decision, len(hits))
			blocked, err := l.Evaluate(context.Background(), hits, got)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) || blocked != wantBlocked {
				t.Fatalf("spec %d step %d at %d µs:\nhits  %+v\nredis %+v blocked %v\nmodel %+v blocked %v", si, step, now, hits, got, blocked, want, wantBlocked)
			}
		}
	}
}

// TestSlidingLogLegacyEntries: a log written before entries carried counts
// (one member "<time>:<seq>" per hit, no total) keeps its meaning, and the
// next write converts it.
func TestSlidingLogLegacyEntries(t *testing.T) {
	n := startNode(t)
	clk := newClock(future)
	l := newLimiter(t, n.client, clk, "legacy:")
	sp := limit.Spec{Algorithm: limit.SlidingLog, Limit: 5, Window: time.Second}
	key := redislimit.Key("legacy:", "k")
	t0 := clk.micros()
	ctx := context.Background()
	// Three hits: two at t0 (seq 0 and 1), one at t0 + 100 ms.
	members := []redis.Z{
		{Score: float64(t0), Member: fmt.Sprintf("%d:10", t0)},
		{Score: float64(t0), Member: fmt.Sprintf("%d:11", t0)},
		{Score: float64(t0 + 100_000), Member: fmt.Sprintf("%d:10", t0+100_000)},
	}
	if err := n.client.ZAdd(ctx, key, members...).Err(); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		at     time.Duration
		cost   int64
		refund bool
		want   limit.Decision
	}{
		{200 * time.Millisecond, 0, false, allow(2, 900*time.Millisecond)},
		{200 * time.Millisecond, 3, false, deny(2, 900*time.Millisecond, 800*time.Millisecond)},
		{200 * time.Millisecond, 1, true, allow(3, 800*time.Millisecond)}, // the newest leaves
		{200 * time.Millisecond, 3, false, allow(0, time.Second)},
		{1100 * time.Millisecond, 0, false, allow(2, 100*time.Millisecond)}, // the two at t0 left
	}
	for i, s := range steps {
		clk.set(time.UnixMicro(t0).Add(s.at))
		if got := decide(t, l, limit.Hit{Key: "k", Spec: sp, Cost: s.cost, Refund: s.refund})[0]; got != s.want {
			t.Errorf("step %d: got %+v, want %+v", i, got, s.want)
		}
	}
}

// BenchmarkSlidingLogWorstCase measures the longest calls on a log at
// logCap, full of single hits: every entry expiring at once, half of them
// expiring, a retry and a refund at the middle of the log. Each iteration
// restores the full log first (not timed); redis-µs/call is the script's
// own time inside Redis, what every other client waits for.
func BenchmarkSlidingLogWorstCase(b *testing.B) {
	n := startNode(b)
	clk := newClock(future)
	l := newLimiter(b, n.client, clk, "worst:")
	w := time.Hour
	sp := limit.Spec{Algorithm: limit.SlidingLog, Limit: logCap, Window: w}
	full := redislimit.Key("worst:", "full")
	t0 := future.UnixMicro()
	fillLog(b, n, full, sp, t0, logCap)
	ctx := context.Background()
	b.Logf("a log of %d single hits: MEMORY USAGE %d B", logCap, n.client.MemoryUsage(ctx, full, 0).Val())
	cases := []struct {
		name   string
		at     time.Duration
		cost   int64
		refund bool
	}{
		{"all-expire", w + logCap*us, 1, false},
		{"half-expire", w + logCap/2*us, 1, false},
		{"retry-middle", logCap * us, logCap / 2, false},
		{"refund-half", logCap * us, logCap / 2, true},
		{"peek", logCap * us, 0, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			clk.set(time.UnixMicro(t0).Add(c.at))
			hit := limit.Hit{Key: "copy", Spec: sp, Cost: c.cost, Refund: c.refund}
			copyKey := redislimit.Key("worst:", "copy")
			if _, err := n.srv.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			var worst float64
			for b.Loop() {
				b.StopTimer()
				if err := n.client.Copy(ctx, full, copyKey, 0, true).Err(); err != nil {
					b.Fatal(err)
				}
				before := scriptMicros(b, n)
				b.StartTimer()
				decide(b, l, hit)
				b.StopTimer()
				worst = max(worst, scriptMicros(b, n)-before)
				b.StartTimer()
			}
			b.ReportMetric(scriptStat(b, n, "usec")/scriptStat(b, n, "calls"), "redis-µs/call")
			b.ReportMetric(worst, "redis-µs-max")
		})
	}
}
