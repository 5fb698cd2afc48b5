package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

const testRules = "domain: srv\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1}\n"

// running starts a Server on loopback ports with real rules, the in-memory
// store and the envoy service, and stops it when the test ends.
func running(t *testing.T, opts Options) (*Server, func() error) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "srv.yaml"), []byte(testRules), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := rules.NewWatcher(dir, rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(w, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	if err := RegisterRuleMetrics(reg, w); err != nil {
		t.Fatal(err)
	}
	if opts.GRPCAddr == "" {
		opts.GRPCAddr, opts.HTTPAddr, opts.DebugAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	}
	s, err := New(svc, w, reg, opts)
	if err != nil {
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
	svc, err := envoy.New(w, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(svc, w, nil, Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: busy.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP listener") {
		t.Fatalf("Run = %v, want an HTTP listener error", err)
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

// An unhealthy store shows on /rlconfig but leaves /healthcheck and gRPC
// health SERVING: the server still answers, by the failure policy.
func TestStoreHealthIsReportedNotEnforced(t *testing.T) {
	s, _ := running(t, Options{Store: func() StoreHealth {
		return StoreHealth{Name: "redis", Healthy: false, Detail: "breaker open"}
	}})
	base := "http://" + s.Addrs().HTTP.String()
	if code, body := do(t, "GET", base+"/rlconfig", ""); code != 200 || !strings.Contains(body, "store: redis unhealthy (breaker open)") {
		t.Errorf("/rlconfig: %d %q", code, body)
	}
	if code, body := do(t, "GET", base+"/healthcheck", ""); code != 200 || body != "OK" {
		t.Errorf("/healthcheck: %d %q, want 200 OK", code, body)
	}
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health: %v %v", resp, err)
	}
}

// With HealthRequiresStore (REDIS_HEALTH_CHECK_ACTIVE_CONNECTION),
// /healthcheck and gRPC health follow the store's health both ways.
func TestHealthRequiresStore(t *testing.T) {
	var healthy atomic.Bool
	s, _ := running(t, Options{HealthRequiresStore: true, Store: func() StoreHealth {
		return StoreHealth{Name: "redis", Healthy: healthy.Load(), Detail: "test"}
	}})
	base := "http://" + s.Addrs().HTTP.String()
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for _, want := range []bool{false, true, false} {
		healthy.Store(want)
		code, wantCode, wantStatus := 0, 500, healthpb.HealthCheckResponse_NOT_SERVING
		if want {
			wantCode, wantStatus = 200, healthpb.HealthCheckResponse_SERVING
		}
		if code, _ = do(t, "GET", base+"/healthcheck", ""); code != wantCode {
			t.Errorf("store healthy %v: /healthcheck %d, want %d", want, code, wantCode)
		}
		deadline := time.Now().Add(10 * HealthPollInterval)
		for {
			resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
			if err == nil && resp.Status == wantStatus {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("store healthy %v: gRPC health %v %v, want %v", want, resp, err, wantStatus)
			}
			time.Sleep(HealthPollInterval / 5)
		}
	}
	if _, err := New(s.svc, s.rules, nil, Options{GRPCAddr: ":0", HTTPAddr: ":0", HealthRequiresStore: true}); err == nil {
		t.Error("HealthRequiresStore without a Store was accepted")
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
	svc, err := envoy.New(w, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(svc, w, nil, Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", HealthRequiresRules: true})
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
