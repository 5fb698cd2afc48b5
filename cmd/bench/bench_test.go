package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	fgserver "github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestMain lets the test binary serve the gRPC floor when -grpc-floor
// starts it as its child, as the tool's own main does.
func TestMain(m *testing.M) {
	if addr := os.Getenv(floorAddrEnv); addr != "" {
		if err := serveFloor(addr, os.Getenv(floorRedisEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "grpc floor:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestGRPCFloor drives the floor: every call answered OK, the server's CPU
// measured, no Redis figures, and the result marked as the floor's.
func TestGRPCFloor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"-grpc-floor", "-concurrency", "4", "-conns", "1", "-warmup", "200ms", "-duration", "1s", "-json"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, stdout.String())
	}
	if r.Target != targetFloor || r.Algorithm != "" {
		t.Errorf("target %q, algorithm %q: want %q and none", r.Target, r.Algorithm, targetFloor)
	}
	if r.Decisions <= 0 || r.Errors != 0 || r.OverLimitShare != 0 {
		t.Errorf("%d answers, %d errors, %v over limit: want answers, all OK", r.Decisions, r.Errors, r.OverLimitShare)
	}
	if r.Server == nil || r.Server.CPUMicrosPerDecision <= 0 {
		t.Errorf("server figures %+v, want its CPU", r.Server)
	}
	if r.Redis != nil || r.Ceiling != nil || len(r.Notes) != 0 {
		t.Errorf("Redis %+v, ceiling %+v, notes %q: the floor has no Redis", r.Redis, r.Ceiling, r.Notes)
	}
	if !strings.Contains(stderr.String(), "grpc floor pid") {
		t.Errorf("progress does not name the floor:\n%s", stderr.String())
	}
}

// startTestFloor starts the floor for a test of up to a minute, stopped at
// its end, pinging the Redis at redisAddr unless it is empty, and returns
// the test's context and the floor.
func startTestFloor(t *testing.T, redisAddr string) (context.Context, server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	p, srv, err := startFloor(ctx, redisAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(time.Second) })
	return ctx, srv
}

// TestFloorHealth: the floor answers gRPC's health checks SERVING under
// floodgate's service names, as Envoy's health check of -envoy-peers floor
// asks, and still answers ShouldRateLimit OK after them, whatever the
// number of descriptors.
func TestFloorHealth(t *testing.T) {
	ctx, srv := startTestFloor(t, "")
	conns, err := dial(srv.grpcAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(conns)
	for _, name := range fgserver.HealthServices {
		resp, err := healthpb.NewHealthClient(conns[0]).Check(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health of %q: %v, %v; want SERVING", name, resp.GetStatus(), err)
		}
	}
	req := &pb.RateLimitRequest{Domain: "any"}
	for i := range 3 {
		req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: fmt.Sprint("k", i), Value: "v"}}})
		resp, err := pb.NewRateLimitServiceClient(conns[0]).ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Errorf("%d descriptor(s): %v, %v; want OK", i+1, resp.GetOverallCode(), err)
		}
	}
}

// TestFloorRedis: the floor of -envoy-peers floor-redis makes one Redis
// round trip per call (a PING, counted by Redis) before answering OK, and
// answers UNAVAILABLE, not OK, once Redis is gone.
func TestFloorRedis(t *testing.T) {
	harness.Require(t, "redis-server")
	rs := redistest.Start(t)
	ctx, srv := startTestFloor(t, rs.Addr)
	conns, err := dial(srv.grpcAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(conns)
	client := pb.NewRateLimitServiceClient(conns[0])
	req := &pb.RateLimitRequest{Domain: "any", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	pings := func() int64 {
		st, err := readRedisStats(ctx, rdb)
		if err != nil {
			t.Fatal(err)
		}
		return st.Calls["ping"]
	}
	before := pings()
	const calls = 20
	for range calls {
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil || resp.GetOverallCode() != pb.RateLimitResponse_OK {
			t.Fatalf("with Redis: %v, %v; want OK", resp.GetOverallCode(), err)
		}
	}
	if got := pings() - before; got != calls {
		t.Errorf("Redis counted %d PINGs for %d calls, want one each", got, calls)
	}
	rs.Stop()
	if resp, err := client.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unavailable {
		t.Errorf("without Redis: %v, %v; want UNAVAILABLE", resp.GetOverallCode(), err)
	}
}

// TestSmoke runs the tool's whole path briefly: build and start floodgate
// against a private Redis, load, readings, CPU profile and ceiling. It
// keeps the tool from rotting; it asserts no performance figure.
func TestSmoke(t *testing.T) {
	harness.Require(t, "redis-benchmark")
	rd := redistest.Start(t)
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{
		"-redis-addr", rd.Addr, "-descriptors", "3", "-concurrency", "4", "-conns", "2",
		"-warmup", "500ms", "-duration", "2s", "-ceiling-duration", "500ms", "-cpuprofile", profile, "-json",
	}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var r result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("output is not a result: %v\n%s", err, stdout.String())
	}

	if r.Decisions <= 0 || r.DecisionsPerSec <= 0 {
		t.Errorf("decisions %d (%v/s), want > 0", r.Decisions, r.DecisionsPerSec)
	}
	if r.OverLimitShare != 0 {
		t.Errorf("over-limit share %v under a limit never reached, want 0", r.OverLimitShare)
	}
	l := r.Latency
	if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
		t.Errorf("latency percentiles not positive and ascending: %+v", l)
	}
	if l.Mean <= 0 || l.Mean > l.Max {
		t.Errorf("mean latency %v outside (0, max %v]", l.Mean, l.Max)
	}
	if r.Server == nil || r.Server.CPUMicrosPerDecision <= 0 || r.Server.RSSEndMiB <= 0 {
		t.Errorf("server figures %+v, want CPU and RSS > 0", r.Server)
	}
	if r.Redis == nil {
		t.Fatalf("no Redis figures")
	}
	// Under the limit every decision reaches Redis, in at most one round
	// trip of its own; concurrent requests may share one (batching).
	if rt := r.Redis.RoundTripsPerRequest; rt <= 0 || rt > 1 {
		t.Errorf("%v round trips/request over %d requests, want in (0, 1]", rt, r.Decisions+r.Errors)
	}
	if r.Redis.CPUMicrosPerDecision <= 0 || r.Redis.CommandsPerRequest <= r.Redis.RoundTripsPerRequest {
		t.Errorf("Redis figures %+v: want CPU > 0 and the scripts' own commands counted", r.Redis)
	}
	if r.Redis.CallsPerRequest["info"] != 0 {
		t.Errorf("the tool's INFO calls were counted: %v", r.Redis.CallsPerRequest)
	}
	if r.Ceiling == nil || r.Ceiling.BeforePerSec <= 0 || r.Ceiling.AfterPerSec <= 0 || r.Ceiling.RequestsPerSec != (r.Ceiling.BeforePerSec+r.Ceiling.AfterPerSec)/2 || r.CeilingShare <= 0 {
		t.Errorf("ceiling %+v (share %v), want > 0; notes %q", r.Ceiling, r.CeilingShare, r.Notes)
	} else if !strings.Contains(r.Ceiling.Command, " 3 floodgate-bench-ceiling:1:__rand_int__ floodgate-bench-ceiling:2:__rand_int__ floodgate-bench-ceiling:3:__rand_int__ ") {
		t.Errorf("ceiling command %q does not replay 3 keys", r.Ceiling.Command)
	}
	for _, n := range r.Notes {
		if strings.Contains(n, "limits per request") {
			t.Errorf("note: %s", n)
		}
	}
	b, err := os.ReadFile(profile)
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("cpu profile: want a gzip-compressed pprof file, got %d bytes, err %v", len(b), err)
	}
}

// TestGeneratedRules loads the generated rule files with the server's own
// parser: each regime's domain limits each descriptor key on its own counter
// at the intended rate, and the default algorithm goes unnamed so that the
// reference server reads the files too.
func TestGeneratedRules(t *testing.T) {
	for _, algo := range []limit.Algorithm{limit.FixedWindow, limit.TokenBucket} {
		t.Run(algo.String(), func(t *testing.T) {
			o := &options{matrix: true, matrixConcurrency: []int{1}, algorithm: algo.String()}
			dir := filepath.Join(t.TempDir(), "rules")
			if err := writeRuleFiles(dir, o.ruleSpec()); err != nil {
				t.Fatal(err)
			}
			set, err := rules.Load(dir, rules.Options{})
			if err != nil {
				t.Fatalf("generated rules do not load: %v", err)
			}
			for _, tc := range []struct {
				limit string
				rpu   uint32
			}{{limitUnder, underLimitPerSecond}, {limitOver, 1}} {
				domain := scenario{Limit: tc.limit}.domain()
				for i := range 3 {
					entries := []rules.Entry{{Key: descriptorKey(i), Value: "v42"}}
					rule := set.Match(domain, entries)
					if rule == nil || len(rule.Limits) != 1 {
						t.Fatalf("%s %v: matched %+v, want one rule with one limit", domain, entries, rule)
					}
					l := rule.Limits[0]
					if l.Unit.String() != "second" || l.RequestsPerUnit != tc.rpu || l.Spec.Algorithm != algo {
						t.Errorf("%s %s: %d per %s with %s, want %d per second with %s", domain, descriptorKey(i), l.RequestsPerUnit, l.Unit, l.Spec.Algorithm, tc.rpu, algo)
					}
				}
				if rule := set.Match(domain, []rules.Entry{{Key: descriptorKey(3), Value: "v"}}); rule != nil {
					t.Errorf("%s: key %s matched %s; the matrix needs at most 3 keys", domain, descriptorKey(3), rule.Path)
				}
				b, err := os.ReadFile(filepath.Join(dir, domain+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				if named := strings.Contains(string(b), "algorithm:"); named != (algo != limit.FixedWindow) {
					t.Errorf("%s: algorithm named %v, want it named only when not fixed_window:\n%s", domain, named, b)
				}
			}
		})
	}
}

func TestParseProcStat(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       time.Duration
		wantErr    bool
	}{
		{"plain", "9621 (cat) R 9617 9617 30608 0 -1 4194304 123 0 0 0 250 31 0 0 20 0 1 0", 2810 * time.Millisecond, false},
		{"name with spaces and parentheses", "77 (a) b (c)) S 1 77 77 0 -1 0 0 0 0 0 7 3 0 0 20 0 9 0", 100 * time.Millisecond, false},
		{"no name", "77 S 1", 0, true},
		{"truncated", "77 (x) S 1 2 3", 0, true},
		{"not a number", "77 (x) S 1 77 77 0 -1 0 0 0 0 0 a 3 0 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStat(tc.line)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseProcStat = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseVmRSS(t *testing.T) {
	for _, tc := range []struct {
		name, status string
		want         int64
		wantErr      bool
	}{
		{"present", "Name:\tfloodgate\nVmPeak:\t  9000 kB\nVmRSS:\t   29184 kB\nRssAnon:\t1 kB\n", 29184 << 10, false},
		{"missing", "Name:\tfloodgate\n", 0, true},
		{"other unit", "VmRSS:\t 12 MB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatusBytes(strings.NewReader(tc.status), "VmRSS")
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseStatusBytes(VmRSS) = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestRedisInfoDelta(t *testing.T) {
	before, err := parseRedisInfo("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n" +
		"# Commandstats\r\ncmdstat_evalsha:calls=10,usec=50,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=4,usec=8\r\ncmdstat_hset:calls=7,usec=7\r\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseRedisInfo("used_cpu_sys:1.600000\nused_cpu_user:2.400000\n" +
		"cmdstat_evalsha:calls=110,usec=550\ncmdstat_info:calls=6,usec=12\ncmdstat_hset:calls=107,usec=107\n" +
		"cmdstat_time:calls=100,usec=100\ncmdstat_EVAL:calls=1,usec=1\n")
	if err != nil {
		t.Fatal(err)
	}
	d := after.delta(before)
	if d.CPU != 250*time.Millisecond {
		t.Errorf("CPU delta %v, want 250ms (user + sys, children excluded)", d.CPU)
	}
	want := map[string]int64{"evalsha": 100, "hset": 100, "time": 100, "eval": 1}
	if len(d.Calls) != len(want) {
		t.Errorf("calls %v, want %v", d.Calls, want)
	}
	for cmd, n := range want {
		if d.Calls[cmd] != n {
			t.Errorf("calls of %s: %d, want %d", cmd, d.Calls[cmd], n)
		}
	}
	if d.total() != 301 || d.scripts() != 101 {
		t.Errorf("total %d, scripts %d; want 301, 101", d.total(), d.scripts())
	}

	for _, bad := range []string{"used_cpu_sys:1\n", "used_cpu_sys:x\nused_cpu_user:1\n", "used_cpu_sys:1\nused_cpu_user:1\ncmdstat_get:usec=1\n"} {
		if _, err := parseRedisInfo(bad); err == nil {
			t.Errorf("parseRedisInfo(%q): no error", bad)
		}
	}
}

func TestPercentiles(t *testing.T) {
	seq := func(n int) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = int64(n - i) // descending: percentiles must sort
		}
		return s
	}
	for _, tc := range []struct {
		name    string
		samples []int64
		want    latencies
	}{
		{"1..1000", seq(1000), latencies{P50: 500, P90: 900, P99: 990, P999: 999, Max: 1000, Mean: 500}},
		{"1..10", seq(10), latencies{P50: 5, P90: 9, P99: 10, P999: 10, Max: 10, Mean: 5}},
		{"one sample", []int64{7}, latencies{P50: 7, P90: 7, P99: 7, P999: 7, Max: 7, Mean: 7}},
		{"none", nil, latencies{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentiles(tc.samples); got != tc.want {
				t.Errorf("percentiles = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseMonitorLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		want       scriptCall
		wantErr    bool
	}{
		{"ok reply", "+OK", nil, false},
		{"client command", `+1700000000.123456 [0 127.0.0.1:53422] "EVALSHA" "ab12" "1" "{00ff}k\x00v" "" "0"`,
			scriptCall{"evalsha", "ab12", "1", "{00ff}k\x00v", "", "0"}, false},
		{"escapes", `+1.5 [0 unix:/tmp/r.sock] "set" "a\"b\\c" "\n\r\t\a\b\x7f"`, scriptCall{"set", `a"b\c`, "\n\r\t\a\b\x7f"}, false},
		{"command run by a script", `+1.5 [0 lua] "hset" "k" "f" "1"`, nil, false},
		{"unquoted", `+1.5 [0 127.0.0.1:1] get`, nil, true},
		{"unterminated", `+1.5 [0 127.0.0.1:1] "get`, nil, true},
		{"bad hex", `+1.5 [0 127.0.0.1:1] "\xzz"`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMonitorLine(tc.line)
			if (err != nil) != tc.wantErr || strings.Join(got, "|") != strings.Join(tc.want, "|") || len(got) != len(tc.want) {
				t.Errorf("parseMonitorLine = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestBenchmarkArgs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		call    scriptCall
		want    string
		wantErr bool
	}{
		{"two keys", scriptCall{"evalsha", "old", "2", "k1", "k2", "", "0", ""},
			"evalsha|new|2|floodgate-bench-ceiling:1:__rand_int__|floodgate-bench-ceiling:2:__rand_int__||0|", false},
		{"no keys", scriptCall{"eval", "src", "0", "a"}, "evalsha|new|0|a", false},
		{"function", scriptCall{"fcall", "floodgate_ab12", "1", "k", "", "1"},
			"fcall|new|1|floodgate-bench-ceiling:1:__rand_int__||1", false},
		{"key count past the end", scriptCall{"evalsha", "x", "3", "k"}, "", true},
		{"key count not a number", scriptCall{"evalsha", "x", "n"}, "", true},
		{"too short", scriptCall{"evalsha", "x"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := benchmarkArgs(tc.call, "new")
			if (err != nil) != tc.wantErr || strings.Join(got, "|") != tc.want {
				t.Errorf("benchmarkArgs = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseBenchmarkCSV(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      float64
		wantErr   bool
	}{
		{"result", "\"test\",\"rps\",\"avg_latency_ms\"\n\"evalsha abc 1 k:__rand_int__ \"\"\"\" x\",\"35714.29\",\"0.081\"\n", 35714.29, false},
		{"no result", "\"test\",\"rps\"\n", 0, true},
		{"other header", "\"a\",\"b\"\n\"x\",\"1\"\n", 0, true},
		{"rps not a number", "\"test\",\"rps\"\n\"x\",\"fast\"\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseBenchmarkCSV(tc.out)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseBenchmarkCSV = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		wantErr string // "" for success
	}{
		{nil, ""},
		{[]string{"-matrix", "-matrix-concurrency", "1, 2"}, ""},
		{[]string{"-limit", "sideways"}, "-limit"},
		{[]string{"-descriptors", "0"}, "-descriptors"},
		{[]string{"-keys", "0"}, "-keys"},
		{[]string{"-concurrency", "0"}, "-concurrency"},
		{[]string{"-rate", "-1"}, "-rate"},
		{[]string{"-matrix-concurrency", "16,x"}, "-matrix-concurrency"},
		{[]string{"-algorithm", "lottery"}, "-algorithm"},
		{[]string{"-conns", "0"}, "-conns"},
		{[]string{"-duration", "0s"}, "-duration"},
		{[]string{"-warmup", "-1s"}, "-warmup"},
		{[]string{"-ceiling-duration", "0s"}, "-ceiling-duration"},
		{[]string{"-server-pid", "1"}, "-server-addr"},
		{[]string{"-server-addr", "h:1", "-config", "x"}, "-config"},
		{[]string{"-server-addr", "h:1", "-server-args", "-redis-pool-size 4"}, "-server-args"},
		{[]string{"-server-args", "-redis-pool-size 4"}, ""},
		{[]string{"-server-addr", "h:1", "-cpuprofile", "x"}, "-server-debug-addr"},
		{[]string{"extra"}, "unexpected arguments"},
		{[]string{"-grpc-floor"}, ""},
		{[]string{"-grpc-floor", "-server-addr", "h:1"}, "-grpc-floor"},
		{[]string{"-grpc-floor", "-server-bin", "x"}, "-grpc-floor"},
		{[]string{"-grpc-floor", "-cpuprofile", "x"}, "-grpc-floor"},
		{[]string{"-grpc-floor", "-redis-addr", "h:1"}, "-grpc-floor"},
		{[]string{"-redis-addr", "127.0.0.1:6379"}, ""},
		{[]string{"-redis-addr", "unix:///tmp/redis.sock"}, "-redis-addr"},
		{[]string{"-envoy"}, ""},
		{[]string{"-envoy", "-envoy-stores", " memory"}, ""},
		{[]string{"-envoy", "-matrix"}, "-envoy"},
		{[]string{"-envoy", "-server-addr", "h:1"}, "-envoy"},
		{[]string{"-envoy", "-cpuprofile", "x"}, "-envoy"},
		{[]string{"-envoy", "-rounds", "0"}, "-rounds"},
		{[]string{"-envoy", "-envoy-concurrency", "0"}, "-envoy-concurrency"},
		{[]string{"-envoy", "-envoy-stores", "redis,redis"}, "-envoy-stores"},
		{[]string{"-envoy", "-envoy-stores", "disk"}, "-envoy-stores"},
		{[]string{"-envoy", "-keys", "200000"}, "-keys"},
		{[]string{"-rules", "-1"}, "-rules"},
		{[]string{"-rules", "100000", "-write-rules", "x"}, ""},
		{[]string{"-reloads", "-1"}, "-reloads"},
		{[]string{"-reloads", "3"}, "-rules"},
		{[]string{"-reloads", "3", "-rules", "10"}, ""},
		{[]string{"-reloads", "3", "-rules", "10", "-reference-bin", "ratelimit"}, ""},
		{[]string{"-reloads", "3", "-rules", "10", "-server-addr", "h:1"}, "-reloads"},
		{[]string{"-reloads", "3", "-rules", "10", "-config", "x"}, "-reloads"},
		{[]string{"-reloads", "3", "-rules", "10", "-reference-bin", "r", "-server-bin", "f"}, "-reference-bin"},
		{[]string{"-reloads", "3", "-rules", "10", "-settle", "-1s"}, "-settle"},
		{[]string{"-reference-bin", "ratelimit"}, "-reloads"},
		{[]string{"-limitador-bin", "limitador-server"}, "-peers"},
		{[]string{"-peers", "floodgate"}, ""},
		{[]string{"-peers", "floodgate,reference", "-reference-bin", "r"}, ""},
		{[]string{"-peers", "floodgate,reference"}, "-reference-bin"},
		{[]string{"-peers", "floodgate,limitador"}, "-limitador-bin"},
		{[]string{"-peers", "floodgate,limitador", "-limitador-bin", "l", "-store", "memory"}, ""},
		{[]string{"-peers", "floodgate,reference", "-reference-bin", "r", "-store", "memory"}, "Redis or Memcached only"},
		{[]string{"-peers", "a=floodgate:/x,b=floodgate:/y"}, ""},
		{[]string{"-peers", "a=floodgate:/x,a=floodgate:/y"}, "named twice"},
		{[]string{"-peers", "a=floodgate"}, "NAME=KIND:BIN"},
		{[]string{"-peers", "envoy"}, `-peers: "envoy": the kind must be floodgate, reference or limitador`},
		{[]string{"-peers", "floodgate,floor"}, `-peers: "floor": the gRPC floor decides nothing`},
		{[]string{"-grpc-floor", "-envoy"}, "-envoy -envoy-peers floor"},
		{[]string{"-peers", "floodgate", "-store", "disk"}, "-store"},
		{[]string{"-peers", "floodgate", "-rounds", "0"}, "-rounds"},
		{[]string{"-peers", "floodgate", "-server-addr", "h:1"}, "-peers"},
		{[]string{"-peers", "floodgate", "-redis-addr", "h:1"}, "-redis-addr"},
		{[]string{"-peers", "floodgate", "-cpuprofile", "x"}, "-peers"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			_, err := parseFlags(tc.args, &bytes.Buffer{})
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one naming %s", err, tc.wantErr)
			}
		})
	}
}

func TestScenariosAndProfilePaths(t *testing.T) {
	o, err := parseFlags([]string{"-matrix", "-matrix-concurrency", "16,64", "-keys", "5", "-cpuprofile", "out/cpu.pprof"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sc := range o.scenarios() {
		if sc.Keys != 5 {
			t.Errorf("%s: keys %d, want -keys 5", sc, sc.Keys)
		}
		got = append(got, profilePath(o, sc))
	}
	want := []string{
		"out/cpu-under-d1-c16.pprof", "out/cpu-under-d1-c64.pprof", "out/cpu-under-d3-c16.pprof", "out/cpu-under-d3-c64.pprof",
		"out/cpu-over-d1-c16.pprof", "out/cpu-over-d1-c64.pprof", "out/cpu-over-d3-c16.pprof", "out/cpu-over-d3-c64.pprof",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("matrix profiles\n got %q\nwant %q", got, want)
	}
	o.matrix = false
	if sc := o.scenarios(); len(sc) != 1 || profilePath(o, sc[0]) != "out/cpu.pprof" {
		t.Errorf("single run: %v scenarios, profile %q; want 1, out/cpu.pprof", len(sc), profilePath(o, sc[0]))
	}
}

func TestWriteRulesFlag(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rules")
	args := []string{"-write-rules", dir, "-descriptors", "5"}
	var stderr bytes.Buffer
	if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	set, err := rules.Load(dir, rules.Options{})
	if err != nil {
		t.Fatalf("written rules do not load: %v", err)
	}
	if got := strings.Join(set.Domains(), " "); got != "bench-over bench-under" {
		t.Errorf("domains %q, want bench-over bench-under", got)
	}
	for i, want := range []bool{true, true, true, true, true, false} {
		if got := set.Match("bench-under", []rules.Entry{{Key: descriptorKey(i), Value: "v"}}) != nil; got != want {
			t.Errorf("%s limited: %v, want %v (-descriptors 5 limits key1..key5)", descriptorKey(i), got, want)
		}
	}
	stderr.Reset()
	if code := run(context.Background(), args, &bytes.Buffer{}, &stderr); code != 1 || !strings.Contains(stderr.String(), "exists") {
		t.Errorf("writing into an existing directory: exit code %d, stderr %q; want 1 and an error saying it exists", code, stderr.String())
	}
}

func TestScriptCallOneRequest(t *testing.T) {
	for _, tc := range []struct {
		call scriptCall
		want bool
	}{
		{scriptCall{"evalsha", "sha", "2", "k1", "k2", "", "2", "s", "1", "0", "s", "1", "0"}, true},
		{scriptCall{"evalsha", "sha", "2", "k1", "k2", "", "1", "s", "1", "0", "", "1", "s", "1", "0"}, false},
		{scriptCall{"evalsha", "sha", "x"}, false},
		{scriptCall{"evalsha", "sha", "1", "k1"}, false},
	} {
		if got := tc.call.oneRequest(); got != tc.want {
			t.Errorf("%q.oneRequest() = %v, want %v", tc.call, got, tc.want)
		}
	}
}
