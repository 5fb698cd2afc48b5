package redislimit_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// BenchmarkEvaluate measures decisions per second against a local
// redis-server on Redis's own clock, per algorithm, for requests of one
// and of three descriptors, from 8·GOMAXPROCS callers over 1000 counters. It
// reports round trips per decision from the commands the client sent, and
// the script's execution time inside Redis (INFO commandstats).
func BenchmarkEvaluate(b *testing.B) {
	n := startNode(b)
	l := newLimiter(b, n.client, nil, "bench:")
	for _, a := range limit.Algorithms() {
		sp := limit.Spec{Algorithm: a, Limit: 1_000_000, Window: time.Minute, Precision: 10}
		for _, size := range []int{1, 3} {
			b.Run(fmt.Sprintf("%v/hits=%d", a, size), func(b *testing.B) {
				// Many callers in flight, as a server has: Redis, single
				// threaded, is the bottleneck rather than the client.
				b.SetParallelism(8)
				if _, err := n.srv.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
				before := n.commands.Load()
				start := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					hits := make([]limit.Hit, size)
					d := make([]limit.Decision, size)
					i := 0
					for pb.Next() {
						for j := range hits {
							hits[j] = limit.Hit{Key: fmt.Sprint(a, i%1000, "/", j), Spec: sp, Cost: 1}
						}
						i++
						if _, err := l.Evaluate(context.Background(), hits, d); err != nil {
							b.Error(err)
							return
						}
					}
				})
				decisions := float64(b.N * size)
				b.ReportMetric(decisions/time.Since(start).Seconds(), "decisions/s")
				b.ReportMetric(float64(n.commands.Load()-before)/decisions, "roundtrips/decision")
				// The script's own time inside Redis, which bounds a
				// single Redis's throughput whatever the clients do.
				b.ReportMetric(scriptStat(b, n, "usec")/scriptStat(b, n, "calls"), "redis-µs/call")
				b.ReportMetric(scriptStat(b, n, "usec")/decisions, "redis-µs/decision")
			})
		}
	}
}

// BenchmarkBatch compares batching off and on with 1, 2 and 4 round trips
// in flight, with 64 concurrent callers (32·GOMAXPROCS on 2 cores), as a
// server under load has, each request one fixed-window descriptor over
// 1000 counters. It reports round trips per decision, the script's time in
// Redis per decision (INFO commandstats) and Redis's whole CPU per
// decision (INFO cpu, parsing and replying included): what one Redis core
// can serve.
func BenchmarkBatch(b *testing.B) {
	n := startNode(b)
	sp := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1_000_000, Window: time.Minute}
	for _, inFlight := range []int{0, 1, 2, 4} {
		name := fmt.Sprintf("inflight=%d", inFlight)
		if inFlight == 0 {
			name = "off"
		}
		b.Run(name, func(b *testing.B) {
			l, err := redislimit.New(n.client, redislimit.Options{KeyPrefix: "batch:", Timeout: 5 * time.Second,
				Batch: redislimit.BatchOptions{Disabled: inFlight == 0, MaxInFlight: inFlight}})
			if err != nil {
				b.Fatal(err)
			}
			b.SetParallelism(64 / runtime.GOMAXPROCS(0))
			if _, err := n.srv.Do("CONFIG", "RESETSTAT"); err != nil {
				b.Fatal(err)
			}
			before := n.commands.Load()
			cpu := redisCPU(b, n)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				hits := make([]limit.Hit, 1)
				d := make([]limit.Decision, 1)
				i := 0
				for pb.Next() {
					hits[0] = limit.Hit{Key: strconv.Itoa(i % 1000), Spec: sp, Cost: 1}
					i++
					if _, err := l.Evaluate(context.Background(), hits, d); err != nil {
						b.Error(err)
						return
					}
				}
			})
			decisions := float64(b.N)
			b.ReportMetric(decisions/time.Since(start).Seconds(), "decisions/s")
			b.ReportMetric(float64(n.commands.Load()-before)/decisions, "roundtrips/decision")
			b.ReportMetric(scriptStat(b, n, "usec")/decisions, "script-µs/decision")
			b.ReportMetric((redisCPU(b, n)-cpu)*1e6/decisions, "redis-cpu-µs/decision")
		})
	}
}

// scriptStat sums a field of INFO commandstats (calls, usec) over the
// commands that run the Lua code: FCALL, EVALSHA and EVAL.
func scriptStat(t testing.TB, n *node, field string) float64 {
	t.Helper()
	return commandStat(t, n.srv, "fcall", field) + commandStat(t, n.srv, "evalsha", field) +
		commandStat(t, n.srv, "eval", field)
}

// redisCPU returns the CPU seconds Redis has used, all threads, from INFO
// cpu.
func redisCPU(t testing.TB, n *node) float64 {
	t.Helper()
	out, err := n.srv.Do("INFO", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu %s=%q: %v", k, v, err)
			}
			total += f
		}
	}
	return total
}

// TestMemoryUsage reports Redis's MEMORY USAGE of one counter per
// algorithm, after one hit and after 100 (limit 1000 per minute), for the
// package documentation. It checks only what must hold: a sliding log grows
// with its hits, the other algorithms do not.
func TestMemoryUsage(t *testing.T) {
	n := startNode(t)
	clk := newClock(future)
	l := newLimiter(t, n.client, clk, "mem:")
	ctx := context.Background()
	for _, a := range limit.Algorithms() {
		sp := limit.Spec{Algorithm: a, Limit: 1000, Window: time.Minute}
		if a == limit.SlidingWindow {
			sp.Precision = 1
		}
		usage := func() int64 {
			v, err := n.client.MemoryUsage(ctx, redislimit.Key("mem:", a.String()+"-counter"), 0).Result()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		decide(t, l, limit.Hit{Key: a.String() + "-counter", Spec: sp, Cost: 1})
		one := usage()
		for range 99 {
			clk.add(10 * time.Millisecond)
			decide(t, l, limit.Hit{Key: a.String() + "-counter", Spec: sp, Cost: 1})
		}
		hundred := usage()
		t.Logf("%-14s MEMORY USAGE after 1 hit: %5d B, after 100 hits: %5d B", a, one, hundred)
		grows := hundred > one+100
		if grows != (a == limit.SlidingLog) {
			t.Errorf("%v: %d B after 1 hit, %d B after 100", a, one, hundred)
		}
	}
	// Past 128 entries a sorted set leaves its compact encoding.
	logSpec := limit.Spec{Algorithm: limit.SlidingLog, Limit: 1000, Window: time.Hour}
	decide(t, l, limit.Hit{Key: "log1000", Spec: logSpec, Cost: 1000})
	v, err := n.client.MemoryUsage(ctx, redislimit.Key("mem:", "log1000"), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sliding_log with 1000 entries: %d B (%d B per entry)", v, v/1000)

	// A sliding window with 60 sub-windows keeps up to 61 counters.
	sp := limit.Spec{Algorithm: limit.SlidingWindow, Limit: 1000, Window: time.Minute, Precision: 60}
	for range 120 {
		clk.add(time.Second)
		decide(t, l, limit.Hit{Key: "sw60", Spec: sp, Cost: 1})
	}
	v, err = n.client.MemoryUsage(ctx, redislimit.Key("mem:", "sw60"), 0).Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sliding_window precision 60, every sub-window used: %d B", v)
}

// BenchmarkLuaEvaluate times the library's evaluate inside Redis: a bench
// function added to the library calls it luaBenchLoops times on one call's
// keys and arguments between two readings of TIME, so the figure is the
// Lua code's own time per request, without the network, the client, the
// event loop or the command's parsing, which vary with the machine's load
// far more than the code does. Requests are one-hit fixed-window requests
// under their limit, as in cmd/bench's under-limit scenario; a call
// carries 1 or 10 of them (cmd/bench at 64 callers averages about 10).
// The charge cases are the same requests as usage reports (limit.Hit.Usage,
// a charge at Envoy's stream done), to compare a charge's cost with a
// decision's; over the limit, a charge writes where a decision does not.
func BenchmarkLuaEvaluate(b *testing.B) {
	n := startNode(b)
	ctx := context.Background()
	const name = "floodgate_lua_bench"
	src := redislimit.LibrarySource()
	src = strings.Replace(src, "#!lua name="+redislimit.FunctionName(), "#!lua name="+name, 1)
	src = strings.Replace(src, "redis.register_function('"+redislimit.FunctionName()+"', evaluate)", "", 1)
	src += `
redis.register_function('` + name + `', function(keys, args)
  local loops, rest = tonumber(args[1]), {}
  for i = 2, #args do rest[i - 1] = args[i] end
  local t = redis.call('TIME')
  local t0 = t[1] * 1000000 + t[2]
  for _ = 1, loops do evaluate(keys, rest) end
  t = redis.call('TIME')
  return t[1] * 1000000 + t[2] - t0
end)
`
	if err := n.client.FunctionLoadReplace(ctx, src).Err(); err != nil {
		b.Fatal(err)
	}
	const luaBenchLoops = 200
	for _, c := range []struct {
		requests, hits int
		limit          int64
		charge         bool
	}{
		{1, 1, 1_000_000_000, false}, {10, 1, 1_000_000_000, false}, {10, 3, 1_000_000_000, false}, {10, 3, 0, false},
		{1, 1, 1_000_000_000, true}, {10, 1, 1_000_000_000, true}, {10, 3, 1_000_000_000, true}, {10, 3, 0, true},
	} {
		sub := fmt.Sprintf("requests=%d/hits=%d", c.requests, c.hits)
		flags := "0"
		if c.charge {
			sub, flags = "charge/"+sub, "8" // flagUsage
		}
		if c.limit == 0 {
			// Over the limit: every stored counter is at its limit 1 (the
			// first loop counts them), so the requests are blocked and
			// write nothing, as past the deny cache in cmd/bench's over case.
			sub += "/over"
		}
		b.Run(sub, func(b *testing.B) {
			limit_ := c.limit
			if limit_ == 0 {
				limit_ = 1
			}
			spec := fmt.Sprintf("%d:%d:%d:%d:1", limit.FixedWindow, limit_, time.Minute.Microseconds(), limit_)
			var keys []string
			args := []any{luaBenchLoops}
			for r := range c.requests {
				args = append(args, "", c.hits)
				for h := range c.hits {
					keys = append(keys, fmt.Sprintf("lua-bench:%s:%d:%d:%d", flags, limit_, r, h))
					args = append(args, spec, "1", flags)
				}
			}
			var inside int64
			for range b.N {
				us, err := n.client.FCall(ctx, name, keys, args...).Int64()
				if err != nil {
					b.Fatal(err)
				}
				inside += us
			}
			b.ReportMetric(float64(inside)/float64(b.N*luaBenchLoops*c.requests), "lua-µs/request")
			b.ReportMetric(float64(inside)/float64(b.N*luaBenchLoops*c.requests*c.hits), "lua-µs/hit")
		})
	}
}
