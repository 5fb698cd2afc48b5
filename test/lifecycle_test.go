package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestHotReload: a valid change is in force without a restart; a broken
// file is refused, reported, and the previous rules keep serving.
func TestHotReload(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			v1 := "domain: e2e\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 3}\n"
			p, dir := startWithRules(t, b, v1)
			if got := summary(p.mustCall(request("e2e", desc("user", "a")))); got != "OK OK:2" {
				t.Fatalf("v1: %q", got)
			}

			// The limit drops to 1 per day: same algorithm and window, so
			// the counter (1 hit) carries over and the next hit is over.
			v2 := strings.Replace(v1, "requests_per_unit: 3", "requests_per_unit: 1", 1) +
				"  - key: team\n    rate_limit: {unit: day, requests_per_unit: 5}\n"
			writeRules(t, dir, map[string]string{"e2e.yaml": v2})
			eventually(t, 5*time.Second, func() string {
				if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "version: 2") {
					return "rlconfig still shows:\n" + body
				}
				return ""
			})
			if got := summary(p.mustCall(request("e2e", desc("user", "a")))); got != "OVER OVER:0" {
				t.Fatalf("v2 user: %q", got)
			}
			if got := summary(p.mustCall(request("e2e", desc("team", "x")))); got != "OK OK:4" {
				t.Fatalf("v2 team: %q", got)
			}

			// A broken file: refused with its file:line, v2 keeps serving.
			broken := v2 + "  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"
			writeRules(t, dir, map[string]string{"e2e.yaml": broken})
			where := regexp.MustCompile(`e2e\.yaml:\d+:\d+`)
			eventually(t, 5*time.Second, func() string {
				_, body := p.httpGet("/rlconfig")
				if !strings.Contains(body, "fortnight") || !where.MatchString(body) {
					return "rlconfig shows no reload error with file:line:\n" + body
				}
				return ""
			})
			_, body := p.httpGet("/rlconfig")
			if !strings.Contains(body, "version: 2") {
				t.Errorf("a refused reload changed the version:\n%s", body)
			}
			if got := summary(p.mustCall(request("e2e", desc("team", "x")))); got != "OK OK:3" {
				t.Fatalf("after a broken file, team: %q", got)
			}
			if got := p.metric(`floodgate_rules_reloads_total{result="failure"}`); got < 1 {
				t.Errorf("reload failures = %v", got)
			}
			if got := p.metric(`floodgate_rules_version`); got != 2 {
				t.Errorf("rules version = %v, want 2", got)
			}
			if !strings.Contains(p.Logs.String(), "fortnight") {
				t.Errorf("the refused reload is not logged:\n%s", p.Logs)
			}
		})
	}
}

// runBinary runs floodgate to completion (for -check, -explain and start-up
// failures) with exactly env and returns its exit code and output.
func runBinary(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	out, code := harness.Run(t, harness.Options{Args: args, Env: env})
	return code, out
}

func TestCheckExplainAndBrokenStart(t *testing.T) {
	t.Parallel()
	good := t.TempDir()
	writeRules(t, good, map[string]string{"e2e.yaml": e2eRules})
	bad := t.TempDir()
	writeRules(t, bad, map[string]string{"bad.yaml": "domain: e2e\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: -1}\n"})
	merged := t.TempDir()
	writeRules(t, merged, map[string]string{
		"a.yaml": "domain: e2e\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"b.yaml": "domain: e2e\ndescriptors:\n  - key: b\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	})
	freeAddrs := func() []string {
		return []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", ""}
	}
	tests := []struct {
		name string
		env  []string
		args []string
		code int
		want []string
	}{
		{"-check on valid rules", nil, []string{"-check", "-config", good}, 0, []string{"OK", "1 domain"}},
		{"-check on a broken file", nil, []string{"-check", "-config", bad}, 1, []string{"bad.yaml:4:"}},
		{"a broken file at start", nil, append(freeAddrs(), "-config", bad), 1, []string{"refusing to start", "bad.yaml:4:"}},
		{"a domain in two files is refused", nil, append(freeAddrs(), "-config", merged), 1, []string{"refusing to start", "e2e"}},
		{"MERGE_DOMAIN_CONFIG merges it", []string{"MERGE_DOMAIN_CONFIG=true"}, []string{"-check", "-config", merged}, 0, []string{"OK", "1 domain"}},
		{"-explain", nil, []string{"-explain", "-config", good, "e2e", "path=/api/zzz"}, 0, []string{"e2e.path_/api/*", "wildcard"}},
		{"-explain without a match", nil, []string{"-explain", "-config", good, "e2e", "nomatch=x"}, 0, []string{"nomatch"}},
		{"a bad variable", []string{"REDIS_POOL_SIZE=lots"}, []string{"-check", "-config", good}, 2, []string{"REDIS_POOL_SIZE"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runBinary(t, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

// TestHealthReflectionAndDebug: grpc.health.v1, server reflection (what
// grpcurl uses) and the debug port.
func TestHealthReflectionAndDebug(t *testing.T) {
	t.Parallel()
	p, _ := startWithRules(t, backends[1], e2eRules)
	health := healthpb.NewHealthClient(p.Conn)
	for _, svc := range []string{"", "ratelimit"} {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", svc, resp, err)
		}
	}
	stream, err := reflectionpb.NewServerReflectionClient(p.Conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	r, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range r.GetListServicesResponse().GetService() {
		names = append(names, s.Name)
	}
	sort.Strings(names)
	for _, want := range []string{"envoy.service.ratelimit.v3.RateLimitService", "grpc.health.v1.Health"} {
		if !contains(names, want) {
			t.Errorf("reflection lists %v, not %s", names, want)
		}
	}
	if code, body := get("http://" + p.DebugAddr + "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if code, body := get("http://" + p.DebugAddr + "/rlconfig"); code != http.StatusOK || !strings.Contains(body, "e2e.user: 3 per day") {
		t.Errorf("debug /rlconfig: %d\n%s", code, body)
	}
	if code, body := p.httpGet("/healthcheck"); code != http.StatusOK || body != "OK" {
		t.Errorf("/healthcheck: %d %q", code, body)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestShutdownFinishesInFlightRequests: requests held in Redis (paused)
// when SIGTERM arrives still get their answers; health turns NOT_SERVING
// at once; the process exits 0.
func TestShutdownFinishesInFlightRequests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	args, redis := backends[0].args(t)
	p := start(t, options{args: append(args, "-config", dir, "-redis-deadline", "5s", "-drain-delay", "700ms")})
	p.mustCall(request("e2e", desc("user", "warm"))) // open the Redis connections and load the scripts

	const pause = 1500 * time.Millisecond
	if _, err := redis.Do("CLIENT", "PAUSE", fmt.Sprint(pause.Milliseconds()), "ALL"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	const n = 8
	var wg sync.WaitGroup
	results := make([]string, n)
	for i := range n {
		wg.Go(func() {
			resp, err := p.call(request("e2e", desc("user", fmt.Sprintf("inflight-%d", i))))
			if err != nil {
				results[i] = "error: " + err.Error()
				return
			}
			results[i] = summary(resp)
		})
	}
	time.Sleep(300 * time.Millisecond) // the requests are in Redis's queue
	p.signal(syscall.SIGTERM)

	health := healthpb.NewHealthClient(p.Conn)
	eventually(t, time.Second, func() string {
		if code, _ := p.httpGet("/healthcheck"); code != http.StatusInternalServerError {
			return fmt.Sprintf("/healthcheck answers %d during shutdown", code)
		}
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
			return fmt.Sprintf("gRPC health during shutdown: %v %v", resp, err)
		}
		return ""
	})

	wg.Wait()
	if held := time.Since(paused); held < pause-100*time.Millisecond {
		t.Fatalf("requests answered after %v, before Redis resumed: they were not in flight", held)
	}
	for i, r := range results {
		if r != "OK OK:2" {
			t.Errorf("in-flight request %d: %s", i, r)
		}
	}
	if code := p.wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d:\n%s", code, p.Logs)
	}
	logs := p.Logs.String()
	if !strings.Contains(logs, "shutting down") || !strings.Contains(logs, "stopped") {
		t.Errorf("logs:\n%s", logs)
	}
}

// TestRedisFailure: a stalled or dead Redis never holds a request past the
// deadline, and each rule's failure policy answers.
func TestRedisFailure(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	args, redis := backends[0].args(t)
	p := start(t, options{args: append(args, "-config", dir, "-redis-deadline", "100ms")})
	if got := summary(p.mustCall(request("e2e", desc("user", "before")))); got != "OK OK:2" {
		t.Fatalf("before: %q", got)
	}

	checkPolicies := func(t *testing.T, what string) {
		t.Helper()
		for _, tc := range []struct {
			req  *pb.RateLimitRequest
			want string
		}{
			{request("e2e", desc("user", "x")), "OK OK:-"},                           // fail open (default)
			{request("e2e", desc("strict", "x")), "OVER OVER:0"},                     // failure_mode: deny
			{request("e2e", desc("ask", "x")), "Unavailable"},                        // failure_mode: unavailable
			{request("e2e", desc("free", "x"), desc("open", "y")), "OK OK:max OK:-"}, // no store call
		} {
			start := time.Now()
			resp, err := p.call(tc.req)
			took := time.Since(start)
			got := ""
			if err != nil {
				got = statusCode(err)
			} else {
				got = summary(resp)
			}
			if got != tc.want {
				t.Errorf("%s: got %q, want %q", what, got, tc.want)
			}
			if took > time.Second {
				t.Errorf("%s: a request took %v with a 100ms deadline", what, took)
			}
		}
	}

	// Stalled: Redis accepts and does not answer for 2 s.
	if _, err := redis.Do("CLIENT", "PAUSE", "2000", "ALL"); err != nil {
		t.Fatal(err)
	}
	checkPolicies(t, "paused Redis")
	if code, body := p.postJSON(`{"domain":"e2e","descriptors":[{"entries":[{"key":"ask","value":"x"}]}]}`); code != http.StatusServiceUnavailable {
		t.Errorf("/json with an unavailable store: %d %s", code, body)
	}

	// Dead: nothing listens any more.
	failingSince := time.Now()
	redis.Stop()
	for range 40 {
		p.call(request("e2e", desc("user", "burst")))
	}
	checkPolicies(t, "stopped Redis")
	// 3 + 1 (/json) while paused, 40 + 3 while stopped.
	if got := p.metric(`floodgate_store_errors_total{store="redis"}`); got != 47 {
		t.Errorf("store errors = %v, want 47", got)
	}
	if got := p.metricSum("floodgate_store_failure_answers_total", `mode="deny"`); got < 2 {
		t.Errorf("deny answers = %v", got)
	}
	// Rate-limited logs: a line a second at most (plus the first of the
	// paused phase), not one per failure, and nothing else per request.
	maxLines := int(time.Since(failingSince).Seconds()) + 2
	logs := p.Logs.String()
	if n := strings.Count(logs, "rate-limit store failed"); n < 1 || n > maxLines {
		t.Errorf("%d failure log lines for 47 failures, want 1 to %d:\n%s", n, maxLines, logs)
	}
	if n := strings.Count(logs, "\n"); n > maxLines+5 {
		t.Errorf("%d log lines during an outage:\n%s", n, logs)
	}

	// Back: the same port, empty; answers carry limits again.
	redis.Restart()
	eventually(t, 5*time.Second, func() string {
		resp, err := p.call(request("e2e", desc("user", "after")))
		if err != nil || summary(resp) != "OK OK:2" {
			return fmt.Sprintf("after restart: %v %v", resp, err)
		}
		return ""
	})
}

func statusCode(err error) string {
	s := err.Error()
	if i := strings.Index(s, "code = "); i >= 0 {
		s = s[i+len("code = "):]
		if j := strings.IndexByte(s, ' '); j >= 0 {
			s = s[:j]
		}
	}
	return s
}

// TestReferenceEnvironment starts floodgate the way envoyproxy/ratelimit is
// started: only its environment variables, its directory layout, its rule
// file.
func TestReferenceEnvironment(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			// The reference server's README example, unchanged.
			writeRules(t, filepath.Join(root, "ratelimit", "config"), map[string]string{"config.yaml": `domain: mongo_cps
descriptors:
  - key: database
    value: users
    metadata:
      owner: {team: identity, pager: [alice, bob]}
    rate_limit:
      unit: second
      requests_per_unit: 500

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 0
`})
			env := []string{
				"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "RUNTIME_IGNOREDOTFILES=true",
				"USE_STATSD=false", "USE_PROMETHEUS=true", "LOG_LEVEL=debug", "LOG_FORMAT=json",
				"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_LIMIT_HEADER=X-RateLimit-Limit", "NEAR_LIMIT_RATIO=0.8",
				"RESPONSE_DYNAMIC_METADATA=true",
				// USE_PROMETHEUS=true serves on :9090 by default, as the
				// reference: a port of the test's own, moved.
				"PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(harness.FreePort(t)),
			}
			var redis interface {
				Do(...string) (string, error)
			}
			if b.name == "redis" {
				_, srv := b.args(t)
				redis = srv
				env = append(env, "REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+srv.Addr, "REDIS_POOL_SIZE=4", "REDIS_TIMEOUT=1s", "CACHE_KEY_PREFIX=compat_")
			}
			p := start(t, options{env: env, envAddrs: true})

			resp := p.mustCall(request("mongo_cps", desc("database", "users")))
			if got := summary(resp); got != "OK OK:499" {
				t.Fatalf("users: %q", got)
			}
			if md, _ := json.Marshal(resp.GetDynamicMetadata().AsMap()); string(md) != `{"descriptors":[{"entries":["database=users"]}],"domain":"mongo_cps","metadata":{"owner":{"pager":["alice","bob"],"team":"identity"}}}` {
				t.Errorf("RESPONSE_DYNAMIC_METADATA=true: dynamic_metadata %s", md)
			}
			if h := headers(resp); h["X-RateLimit-Limit"] != "500" || h["RateLimit-Remaining"] != "499" {
				t.Errorf("headers %v", h)
			}
			if got := summary(p.mustCall(request("mongo_cps", desc("database", "default")))); got != "OVER OVER:0" {
				t.Errorf("default: %q", got)
			}
			if code, body := get("http://" + p.DebugAddr + "/rlconfig"); code != http.StatusOK || !strings.Contains(body, "mongo_cps.database_users") {
				t.Errorf("DEBUG_PORT /rlconfig: %d\n%s", code, body)
			}
			for _, line := range strings.Split(strings.TrimSpace(p.Logs.String()), "\n") {
				if !strings.HasPrefix(line, "{") {
					t.Errorf("LOG_FORMAT=json but a line is not JSON: %q", line)
				}
			}
			if redis != nil {
				// The counter lives for its 1 s window: a request just
				// before the look, again until one is seen, so that a
				// machine slower than the window does not lose it.
				eventually(t, 10*time.Second, func() string {
					p.mustCall(request("mongo_cps", desc("database", "users")))
					keys, err := redis.Do("KEYS", "*")
					if err != nil || !strings.HasPrefix(keys, "compat_") {
						return fmt.Sprintf("CACHE_KEY_PREFIX not applied: keys %q (%v)", keys, err)
					}
					return ""
				})
			} else if !strings.Contains(p.Logs.String(), "memory") {
				t.Errorf("no log line about the in-memory store:\n%s", p.Logs)
			}
		})
	}
}
