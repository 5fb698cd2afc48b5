package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

const testRules = "domain: srv\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1}\n"

// running starts a Server on loopback ports with real rules, the in-memory
// store and the envoy service, and stops it when the test ends.
func running(t testing.TB, opts Options) (*Server, func() error) {
	t.Helper()
	return runningWith(t, opts, envoy.Options{}, testRules)
}

// runningWith is running with the service's options and rule file.
func runningWith(t testing.TB, opts Options, svcOpts envoy.Options, ruleFile string) (*Server, func() error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "srv.yaml"), []byte(ruleFile), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := rules.NewWatcher(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if svcOpts.Metrics == nil {
		if svcOpts.Metrics, err = rlsmetrics.New(reg, rlsmetrics.Options{Store: "memory"}); err != nil {
			t.Fatal(err)
		}
	}
	if opts.Refused == nil {
		opts.Refused = svcOpts.Metrics.Refused
	}
	svc, err := envoy.New(w.Current, limit.NewMemory(limit.MemoryOptions{Now: svcOpts.Now}), svcOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := rlsmetrics.RegisterRuleLoads(reg, w.Status); err != nil {
		t.Fatal(err)
	}
	if opts.GRPCAddr == "" {
		opts.GRPCAddr, opts.HTTPAddr, opts.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	}
	s, err := New(svc, w.Current, w.Status, reg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(10 * time.Second):
				t.Error("Run did not return after cancel")
			}
		})
		return runErr
	}
	t.Cleanup(func() { stop() })
	select {
	case <-s.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("not ready")
	}
	return s, stop
}

// metricValue returns the value of series (name and labels as exposed)
// on s's /metrics, or -1 when absent.
func metricValue(t *testing.T, s *Server, series string) float64 {
	t.Helper()
	_, body := do(t, "GET", "http://"+s.Addrs().HTTP.String()+"/metrics", "")
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			var v float64
			if _, err := fmt.Sscan(rest, &v); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

func do(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	s, _ := running(t, Options{})
	base := "http://" + s.Addrs().HTTP.String()
	req := `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`
	tests := []struct {
		name, method, path, body string
		code                     int
		want                     string
	}{
		{"health", "GET", "/healthcheck", "", 200, "OK"},
		{"allowed", "POST", "/json", req, 200, "OK"},
		{"over", "POST", "/json", req, 429, "OVER_LIMIT"},
		{"bad JSON", "POST", "/json", "{", 400, "invalid RateLimitRequest"},
		{"empty domain", "POST", "/json", `{"descriptors":[{"entries":[{"key":"k"}]}]}`, 400, "domain: must not be empty"},
		{"GET /json", "GET", "/json", "", 405, "POST"},
		{"rules", "GET", "/rlconfig", "", 200, "srv.user: 1 per day"},
		{"rule version", "GET", "/rlconfig", "", 200, "version: 1"},
		{"metrics", "GET", "/metrics", "", 200, "floodgate_rules_version 1"},
		{"reloads", "GET", "/metrics", "", 200, `floodgate_rules_reloads_total{result="failure"} 0`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, tc.method, base+tc.path, tc.body)
			if code != tc.code || !strings.Contains(body, tc.want) {
				t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, code, body, tc.code, tc.want)
			}
		})
	}
	if code, body := do(t, "GET", "http://"+s.Addrs().Debug.String()+"/debug/pprof/", ""); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("pprof: %d", code)
	}
}

// TestPrometheusListener: the Prometheus listener serves its handler at
// its path and nothing else (floodgate's own metrics stay on the HTTP
// port), is counted among the listeners, and closes at shutdown.
func TestPrometheusListener(t *testing.T) {
	stats := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ratelimit_service_total_requests 1\n") })
	s, stop := running(t, Options{PrometheusAddr: "127.0.0.1:0", PrometheusPath: "/stats", Prometheus: stats})
	base := "http://" + s.Addrs().Prometheus.String()
	if code, body := do(t, "GET", base+"/stats", ""); code != 200 || body != "ratelimit_service_total_requests 1\n" {
		t.Errorf("GET /stats: %d %q, want the handler's answer", code, body)
	}
	for _, path := range []string{"/metrics", "/healthcheck", "/json", "/"} {
		if code, _ := do(t, "GET", base+path, ""); code != http.StatusNotFound {
			t.Errorf("GET %s on the Prometheus listener: %d, want 404", path, code)
		}
	}
	if v := metricValue(t, s, `floodgate_connections_open{listener="prometheus"}`); v < 0 {
		t.Error("no floodgate_connections_open for the Prometheus listener")
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := net.DialTimeout("tcp", s.Addrs().Prometheus.String(), time.Second); err == nil {
		t.Error("the Prometheus port still accepts connections after shutdown")
	}
}

func TestHealthFollowsTheLifecycle(t *testing.T) {
	s, stop := running(t, Options{})
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	health := healthpb.NewHealthClient(conn)
	for _, name := range HealthServices {
		resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q: %v %v", name, resp, err)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if s.Serving() {
		t.Error("still serving after shutdown")
	}
	if _, err := net.DialTimeout("tcp", s.Addrs().HTTP.String(), time.Second); err == nil {
		t.Error("the HTTP port still accepts connections after shutdown")
	}
}

// TestListenFailure: a listener whose address is taken stops the start,
// naming it; those opened before it are closed.
func TestListenFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	w, err := rules.NewWatcher(writeTemp(t), rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(w.Current, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	stats := http.NotFoundHandler()
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: busy.Addr().String()}, "HTTP listener"},
		{Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: busy.Addr().String()}, "debug listener"},
		{Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0",
			PrometheusAddr: busy.Addr().String(), Prometheus: stats}, "Prometheus listener"},
	} {
		s, err := New(svc, w.Current, w.Status, nil, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run = %v, want a %s error", err, tc.want)
		}
	}
}

func writeTemp(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "srv.yaml")
	if err := os.WriteFile(p, []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Readiness (/healthcheck, gRPC health, /rlconfig's health line) in each
// StoreReadiness mode, for a store in each state.
func TestStoreReadiness(t *testing.T) {
	const (
		notReached = "NOT_SERVING: store redis has not answered since start; readiness waits until it has"
		unhealthy  = "NOT_SERVING: store redis is unhealthy; readiness requires it always"
	)
	tests := []struct {
		mode             StoreReadiness
		reached, healthy bool
		want             string // /rlconfig's "health: " line
	}{
		{StoreReachedOnce, false, false, notReached},
		{StoreReachedOnce, false, true, notReached},
		{StoreReachedOnce, true, false, "SERVING"},
		{StoreReachedOnce, true, true, "SERVING"},
		{StoreAlways, false, true, notReached},
		{StoreAlways, true, false, unhealthy},
		{StoreAlways, true, true, "SERVING"},
		{StoreIgnored, false, false, "SERVING"},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%v reached=%v healthy=%v", tc.mode, tc.reached, tc.healthy), func(t *testing.T) {
			s, _ := running(t, Options{StoreReadiness: tc.mode, Store: func() health.Store {
				return health.Store{Name: "redis", Healthy: tc.healthy, Reached: tc.reached, Detail: "breaker open"}
			}})
			checkHealth(t, s, tc.want == "SERVING")
			_, body := do(t, "GET", "http://"+s.Addrs().HTTP.String()+"/rlconfig", "")
			if !strings.Contains(body, "\nhealth: "+tc.want+"\n") {
				t.Errorf("/rlconfig lacks \"health: %s\":\n%s", tc.want, body)
			}
		})
	}
}

// checkHealth asserts /healthcheck and, within a few polls, gRPC health.
func checkHealth(t *testing.T, s *Server, serving bool) {
	t.Helper()
	wantCode, wantBody, wantStatus := 500, "NOT_SERVING\n", healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		wantCode, wantBody, wantStatus = 200, "OK", healthpb.HealthCheckResponse_SERVING
	}
	if code, body := do(t, "GET", "http://"+s.Addrs().HTTP.String()+"/healthcheck", ""); code != wantCode || body != wantBody {
		t.Errorf("/healthcheck: %d %q, want %d %q", code, body, wantCode, wantBody)
	}
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(10 * HealthPollInterval)
	for {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		if err == nil && resp.Status == wantStatus {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gRPC health %v %v, want %v", resp, err, wantStatus)
		}
		time.Sleep(HealthPollInterval / 5)
	}
}

// In the default mode, a store that has never answered holds readiness
// (a wrong address stalls a rolling deploy); once it has, its outages do
// not, even if it later claims it never answered. The transitions are
// logged with their reason.
func TestReadinessWaitsForTheStoreOnce(t *testing.T) {
	var reached, healthy atomic.Bool
	logs := &testlog.Buffer{}
	s, _ := running(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil)), Store: func() health.Store {
		return health.Store{Name: "redis", Healthy: healthy.Load(), Reached: reached.Load()}
	}})
	checkHealth(t, s, false)
	if !strings.Contains(logs.String(), `msg="not ready yet: health is NOT_SERVING" reason="store redis has not answered since start; readiness waits until it has"`) {
		t.Errorf("no start-up line says why health is NOT_SERVING:\n%s", logs)
	}
	reached.Store(true)
	healthy.Store(true)
	checkHealth(t, s, true)
	healthy.Store(false)
	reached.Store(false)
	// Nothing polls the store for readiness any more, and a poll, made
	// here rather than waited for, keeps health SERVING.
	if s.followsHealth() {
		t.Error("gRPC health still follows a store that has answered once")
	}
	s.updateHealth(true)
	checkHealth(t, s, true)
	if n := strings.Count(logs.String(), `msg="health changed" status=SERVING`); n != 1 {
		t.Errorf("%d lines say health became SERVING, want 1:\n%s", n, logs)
	}
}

// With StoreAlways (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION), /healthcheck
// and gRPC health follow the store's health both ways.
func TestReadinessAlwaysRequiresTheStore(t *testing.T) {
	var healthy atomic.Bool
	s, _ := running(t, Options{StoreReadiness: StoreAlways, Store: func() health.Store {
		return health.Store{Name: "redis", Healthy: healthy.Load(), Reached: true, Detail: "test"}
	}})
	for _, want := range []bool{false, true, false, true} {
		healthy.Store(want)
		checkHealth(t, s, want)
	}
}

func TestStoreReadinessOptions(t *testing.T) {
	s, _ := running(t, Options{})
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{StoreReadiness: StoreAlways}, "server.Options.StoreReadiness always: needs server.Options.Store"},
		{Options{StoreReadiness: StoreIgnored + 1}, "Options.StoreReadiness StoreReadiness(3): unknown"},
		{Options{StoreReadiness: -1}, "Options.StoreReadiness StoreReadiness(-1): unknown"},
	} {
		tc.opts.GRPCAddr, tc.opts.HTTPAddr = ":0", ":0"
		if _, err := New(s.svc, s.current, s.status, nil, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
	for mode, name := range map[StoreReadiness]string{StoreReachedOnce: "reached-once", StoreAlways: "always", StoreIgnored: "ignored"} {
		if mode.String() != name {
			t.Errorf("%d.String() = %q, want %q", int(mode), mode.String(), name)
		}
		var got StoreReadiness
		if err := got.UnmarshalText([]byte(strings.ToUpper(name))); got != mode || err != nil {
			t.Errorf("UnmarshalText(%q) = %v, %v; want %v", strings.ToUpper(name), got, err, mode)
		}
	}
	var r StoreReadiness
	if err := r.UnmarshalText([]byte("sometimes")); err == nil || !strings.Contains(err.Error(), `"sometimes" (want reached-once, always or ignored)`) {
		t.Errorf("UnmarshalText(sometimes) = %v", err)
	}
}

// The gRPC port can be a unix socket (the reference server's GRPC_UDS).
func TestGRPCOnUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "ratelimit.sock")
	s, _ := running(t, Options{GRPCAddr: "unix:" + sock, HTTPAddr: "127.0.0.1:0"})
	if got := s.Addrs().GRPC.String(); got != sock {
		t.Errorf("gRPC address %q, want %q", got, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health over the socket: %v %v", resp, err)
	}
}

// With HealthRequiresRules (HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED), an
// empty rule directory is NOT_SERVING until a rule file appears.
func TestHealthRequiresRules(t *testing.T) {
	dir := t.TempDir()
	w, err := rules.NewWatcher(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go w.Run(ctx)
	svc, err := envoy.New(w.Current, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(svc, w.Current, w.Status, nil, Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", HealthRequiresRules: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Run(ctx)
	<-s.Ready()
	url := "http://" + s.Addrs().HTTP.String() + "/healthcheck"
	if code, _ := do(t, "GET", url, ""); code != 500 {
		t.Errorf("no rules: /healthcheck %d, want 500", code)
	}
	if err := os.WriteFile(filepath.Join(dir, "srv.yaml"), []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for code, _ := do(t, "GET", url, ""); code != 200; code, _ = do(t, "GET", url, "") {
		if time.Now().After(deadline) {
			t.Fatalf("a rule file appeared but /healthcheck is still %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A health watch is a stream that lasts as long as its client wants: at
// shutdown it must hear NOT_SERVING and then end, not hold the exit until
// the shutdown timeout.
func TestShutdownEndsHealthWatches(t *testing.T) {
	const timeout = 10 * time.Second
	s, stop := running(t, Options{ShutdownTimeout: timeout})
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	watch, err := healthpb.NewHealthClient(conn).Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first status %v, %v; want SERVING", resp, err)
	}
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	var statuses []healthpb.HealthCheckResponse_ServingStatus
	for {
		resp, err := watch.Recv()
		if err != nil {
			break
		}
		statuses = append(statuses, resp.Status)
	}
	if want := []healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_NOT_SERVING}; !slices.Equal(statuses, want) {
		t.Errorf("the watch heard %v before it ended, want %v", statuses, want)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Run: %v, want nil (no request was in flight)", err)
	}
	if took := time.Since(start); took > timeout/2 {
		t.Errorf("shutdown took %v with a health watch open, want well within the %v timeout", took, timeout)
	}
}
