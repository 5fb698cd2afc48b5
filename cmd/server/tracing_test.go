package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/internal/tracing"
)

// running is the program started by startRun.
type running struct {
	grpcAddr, httpAddr string
	logs               *testlog.Buffer
	stop               func() int // ends the program and returns its exit code
}

// servingAddrs reads the addresses from the "serving" line, in either
// LOG_FORMAT.
var servingAddrs = regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)|"msg":"serving","grpc":"([^"]+)","http":"([^"]+)"`)

// startRun runs the program with env and the rules given, on free
// loopback ports, until stop.
func startRun(t *testing.T, rules string, env ...string) *running {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &running{logs: &testlog.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", ""},
			envOf(append(env, "FLOODGATE_CONFIG", dir)...), io.Discard, r.logs)
	}()
	stopped := false
	r.stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		return <-done
	}
	t.Cleanup(func() { r.stop() })
	if !waitFor(10*time.Second, func() bool {
		m := servingAddrs.FindStringSubmatch(r.logs.String())
		if m != nil {
			r.grpcAddr, r.httpAddr = m[1]+m[3], m[2]+m[4]
		}
		return m != nil
	}) {
		t.Fatalf("not serving:\n%s", r.logs)
	}
	return r
}

const tracedRules = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"

// TestTracingEndToEnd runs the program with the reference's TRACING_*
// variables and the standard OTEL_EXPORTER_OTLP_ENDPOINT, for each
// protocol, and follows a gRPC call (traceparent in its metadata) and a
// /json call (traceparent header) to a real OTLP receiver: each request
// span is the child of its caller's span, the resource is what the
// variables say, and the spans still buffered at exit are flushed.
func TestTracingEndToEnd(t *testing.T) {
	const (
		trace    = "0af7651916cd43dd8448eb211c80319c"
		grpcSpan = "b7ad6b7169203331"
		httpSpan = "00f067aa0ba902b7"
	)
	for _, protocol := range []string{"http", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			rcv := otlptest.Start(t)
			endpoint := rcv.HTTPEndpoint()
			if protocol == "grpc" {
				endpoint = rcv.GRPCEndpoint()
			}
			// The exporter reads the process environment itself.
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
			r := startRun(t, tracedRules, "TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", protocol,
				"TRACING_SERVICE_NAME", "rl-test", "TRACING_SERVICE_NAMESPACE", "edge", "TRACING_SERVICE_INSTANCE_ID", "rl-0")
			if !strings.Contains(r.logs.String(), "exporting OpenTelemetry traces") || !strings.Contains(r.logs.String(), endpoint) {
				t.Errorf("the start does not say where the traces go:\n%s", r.logs)
			}

			conn, err := grpc.NewClient(r.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", "00-"+trace+"-"+grpcSpan+"-01")
			req := &pb.RateLimitRequest{Domain: "rl", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}}}}
			if _, err := pb.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, req); err != nil {
				t.Fatal(err)
			}
			hreq, err := http.NewRequest("POST", "http://"+r.httpAddr+"/json", strings.NewReader(`{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`))
			if err != nil {
				t.Fatal(err)
			}
			hreq.Header.Set("traceparent", "00-"+trace+"-"+httpSpan+"-01")
			resp, err := http.DefaultClient.Do(hreq)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("/json answered %d, want 429 (the second hit of a limit of 1)", resp.StatusCode)
			}
			if code := r.stop(); code != 0 {
				t.Fatalf("exit code %d:\n%s", code, r.logs)
			}
			spans := rcv.Wait(t, "ShouldRateLimit Execution", 2, 5*time.Second)
			for _, want := range []struct{ parent, code string }{{grpcSpan, "OK"}, {httpSpan, "OVER_LIMIT"}} {
				var found bool
				for _, s := range spans {
					if s.Name != "ShouldRateLimit Execution" || s.Parent != want.parent {
						continue
					}
					found = true
					if s.TraceID != trace || s.Via != protocol || s.Attrs["ratelimit.overall_code"] != want.code {
						t.Errorf("span under %s: trace %s via %s, code %v", want.parent, s.TraceID, s.Via, s.Attrs["ratelimit.overall_code"])
					}
					// The reference's span name and attribute, and the
					// semantics of the transport: gRPC, or HTTP for /json.
					if s.Name != "ShouldRateLimit Execution" || s.Attrs["domain"] != "rl" {
						t.Errorf("span %q with domain %v, want the reference's \"ShouldRateLimit Execution\" with domain rl", s.Name, s.Attrs["domain"])
					}
					if want.parent == grpcSpan && s.Attrs["rpc.system.name"] != "grpc" {
						t.Errorf("the gRPC call's span: %v", s.Attrs)
					}
					if _, rpc := s.Attrs["rpc.system.name"]; want.parent == httpSpan && (rpc || s.Attrs["http.request.method"] != "POST" || s.Attrs["url.path"] != "/json") {
						t.Errorf("the /json request's span is not an HTTP request's: %v", s.Attrs)
					}
					for k, v := range map[string]string{"service.name": "rl-test", "service.namespace": "edge", "service.instance.id": "rl-0"} {
						if s.Resource[k] != v {
							t.Errorf("resource %s = %v, want %s", k, s.Resource[k], v)
						}
					}
				}
				if !found {
					t.Errorf("no request span under the caller's %s: %+v", want.parent, spans)
				}
			}
			if n := len(spans); n != 4 {
				t.Errorf("%d spans, want 4 (two requests, two store calls)", n)
			}
		})
	}
}

// TestTracingOff: without TRACING_ENABLED nothing is exported, even with
// an endpoint set.
func TestTracingOff(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTPEndpoint())
	r := startRun(t, tracedRules, "TRACING_SERVICE_NAME", "rl-test")
	get(t, "POST", "http://"+r.httpAddr+"/json", `{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`)
	if code := r.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if spans := rcv.Spans(); len(spans) != 0 {
		t.Errorf("tracing off exported %v", spans)
	}
	if strings.Contains(r.logs.String(), "OpenTelemetry") {
		t.Errorf("tracing off logs about tracing:\n%s", r.logs)
	}
}

// TestOtherProtocolWarned: OTEL_EXPORTER_OTLP_PROTOCOL, which the
// exporter does not read, is named in a warning when it disagrees.
func TestOtherProtocolWarned(t *testing.T) {
	for _, tc := range []struct {
		otel, protocol string
		warned         bool
	}{
		{"grpc", "http", true},
		{"http/protobuf", "http", false},
		{"http/json", "grpc", true},
		{"grpc", "GRPC", false},
		{"", "grpc", false},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", tc.otel)
		var logs testlog.Buffer
		warnOtherProtocol(newLogOutput(&logs, "text", nil, &redactor{}).logger, tc.protocol)
		if got := strings.Contains(logs.String(), "OTEL_EXPORTER_OTLP_PROTOCOL is not read"); got != tc.warned {
			t.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s with %s: warned %v, want %v:\n%s", tc.otel, tc.protocol, got, tc.warned, logs.String())
		}
	}
}

// TestTracingRefusals: bad values stop the start, naming the variable.
func TestTracingRefusals(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"TRACING_EXPORTER_PROTOCOL", "udp"}, `-tracing-protocol "udp": want http or grpc (set by TRACING_EXPORTER_PROTOCOL)`},
		{[]string{"TRACING_SAMPLING_RATE", "2"}, "-tracing-sampling-rate 2: want a number between 0 and 1 (set by TRACING_SAMPLING_RATE)"},
		{[]string{"TRACING_SAMPLING_RATE", "often"}, `TRACING_SAMPLING_RATE="often" (for -tracing-sampling-rate)`},
		{[]string{"TRACING_ENABLED", "maybe"}, `TRACING_ENABLED="maybe" (for -tracing)`},
	} {
		_, err := settings.Load(nil, envOf(tc.env...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.env, err, tc.want)
		}
	}
}

// envoyTracing is Envoy with OpenTelemetry tracing, every request sampled
// and its spans sent over OTLP/gRPC to the cluster otlp, asking the
// cluster ratelimit about (generic_key, traced) before passing the
// request to the cluster backend (a direct_response route would skip the
// rate-limit filter). The runtime keys make it export each span at once.
const envoyTracing = `
admin:
  address: {socket_address: {address: 127.0.0.1, port_value: 0}}
layered_runtime:
  layers:
    - name: static
      static_layer:
        tracing.opentelemetry.min_flush_spans: 1
        tracing.opentelemetry.flush_interval_ms: 50
static_resources:
  listeners:
    - name: http
      address: {socket_address: {address: 127.0.0.1, port_value: 0}}
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: traced
                generate_request_id: true
                tracing:
                  random_sampling: {value: 100}
                  provider:
                    name: envoy.tracers.opentelemetry
                    typed_config:
                      "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                      service_name: envoy
                      grpc_service:
                        envoy_grpc: {cluster_name: otlp}
                        timeout: 1s
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      rate_limits:
                        - actions:
                            - generic_key: {descriptor_value: traced}
                      routes:
                        - match: {prefix: "/"}
                          route: {cluster: backend}
                http_filters:
                  - name: envoy.filters.http.ratelimit
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
                      domain: rl
                      failure_mode_deny: true
                      timeout: 1s
                      rate_limit_service:
                        transport_api_version: V3
                        grpc_service:
                          envoy_grpc: {cluster_name: ratelimit}
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: ratelimit
      type: STATIC
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {http2_protocol_options: {}}
      load_assignment:
        cluster_name: ratelimit
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]
    - name: backend
      type: STATIC
      load_assignment:
        cluster_name: backend
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]
    - name: otlp
      type: STATIC
      typed_extension_protocol_options:
        envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
          "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
          explicit_http_config: {http2_protocol_options: {}}
      load_assignment:
        cluster_name: otlp
        endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: 1}}}}]}]
`

// TestTracingBehindEnvoy puts the real Envoy, tracing with OpenTelemetry,
// in front of the program, both exporting to one OTLP receiver: the
// request span of floodgate is in Envoy's trace, the child of the span
// Envoy made for its call to the rate-limit service, which Envoy
// propagated as a traceparent on the gRPC call.
func TestTracingBehindEnvoy(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.GRPCEndpoint())
	r := startRun(t, "domain: rl\ndescriptors:\n  - key: generic_key\n    value: traced\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
		"TRACING_ENABLED", "true", "TRACING_EXPORTER_PROTOCOL", "grpc")
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer backend.Close()
	e := envoytest.Start(t, envoytest.Config{
		Bootstrap: []byte(envoyTracing),
		Upstreams: map[string][]string{"ratelimit": {r.grpcAddr}, "otlp": {rcv.GRPCAddr()}, "backend": {backend.Listener.Addr().String()}},
	})
	if body := get(t, "GET", "http://"+e.Listener("http")+"/", ""); body != "ok" {
		t.Fatalf("Envoy answered %q, want ok", body)
	}
	if code := r.stop(); code != 0 {
		t.Fatalf("exit code %d", code)
	}
	// Envoy's spans come on their own, within its flush interval.
	var ours otlptest.Span
	var envoys map[string]otlptest.Span
	if !waitFor(10*time.Second, func() bool {
		envoys = map[string]otlptest.Span{}
		for _, s := range rcv.Spans() {
			switch s.Resource["service.name"] {
			case "envoy":
				envoys[s.SpanID] = s
			case tracing.DefaultServiceName:
				if s.Name == "ShouldRateLimit Execution" {
					ours = s
				}
			}
		}
		_, ok := envoys[ours.Parent]
		return ours.Name != "" && ok
	}) {
		t.Fatalf("floodgate's span %+v has no parent among Envoy's spans %+v", ours, envoys)
	}
	parent := envoys[ours.Parent]
	t.Logf("Envoy's %q (%s) -> floodgate's %q (%s), trace %s", parent.Name, parent.SpanID, ours.Name, ours.SpanID, ours.TraceID)
	if parent.TraceID != ours.TraceID {
		t.Errorf("floodgate's span is in trace %s, Envoy's call in %s", ours.TraceID, parent.TraceID)
	}
	if !strings.Contains(parent.Name, "ShouldRateLimit") {
		t.Errorf("the parent is Envoy's %q, want its span of the ShouldRateLimit call", parent.Name)
	}
	if ours.Start.Before(parent.Start) || ours.End.After(parent.End) {
		t.Errorf("floodgate's span %v..%v is not within Envoy's call %v..%v", ours.Start, ours.End, parent.Start, parent.End)
	}
	if ours.Attrs["ratelimit.overall_code"] != "OK" || ours.Attrs["ratelimit.domain"] != "rl" {
		t.Errorf("attributes %v", ours.Attrs)
	}
}

// TestTracingStoreSpanOverRedis: with Redis, the store span says how many
// calls shared the round trip (one here: a single caller).
func TestTracingStoreSpanOverRedis(t *testing.T) {
	srv := redistest.Start(t)
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTPEndpoint())
	r := startRun(t, tracedRules, "TRACING_ENABLED", "true", "REDIS_URL", srv.Addr)
	get(t, "POST", "http://"+r.httpAddr+"/json", `{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`)
	if code := r.stop(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, r.logs)
	}
	spans := rcv.Wait(t, "ratelimit.store", 1, 5*time.Second)
	for _, s := range spans {
		if s.Name != "ratelimit.store" {
			continue
		}
		if s.Attrs["ratelimit.store.batch_calls"] != int64(1) || s.Attrs["ratelimit.store.batched"] != false {
			t.Errorf("store span attributes %v: want batch_calls 1, batched false", s.Attrs)
		}
		return
	}
	t.Errorf("no store span in %+v", spans)
}

// TestTracingRefusesExporterEnv: an OTEL_* value the exporter would log
// and replace by its default stops the start, as one JSON line under
// LOG_FORMAT=json that names the variable; the server never serves.
func TestTracingRefusesExporterEnv(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318", "want an absolute URL, http://host:port or https://host:port"},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector.example:4318", "is not an absolute URL"},
		{"OTEL_EXPORTER_OTLP_HEADERS", "noequals", "is not key=value"},
		{"OTEL_EXPORTER_OTLP_TIMEOUT", "abc", "want a whole number of milliseconds"},
		{"OTEL_RESOURCE_ATTRIBUTES", "bad", "want comma-separated key=value pairs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(tracedRules), 0o644); err != nil {
				t.Fatal(err)
			}
			var logs testlog.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", ""},
					envOf("FLOODGATE_CONFIG", dir, "TRACING_ENABLED", "true", "LOG_FORMAT", "json"), io.Discard, &logs)
			}()
			// A start that goes through serves until cancelled.
			var code int
			waitFor(10*time.Second, func() bool {
				select {
				case code = <-done:
					return true
				default:
				}
				if servingAddrs.MatchString(logs.String()) {
					cancel()
					code = <-done
					return true
				}
				return false
			})
			if code == 0 {
				t.Fatalf("started with %s=%s:\n%s", tc.name, tc.value, logs.String())
			}
			var refused bool
			for line := range strings.Lines(logs.String()) {
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Errorf("not a JSON line: %q", line)
					continue
				}
				if rec["msg"] == "refusing to start" {
					err, _ := rec["err"].(string)
					refused = strings.Contains(err, tc.name) && strings.Contains(err, tc.want)
				}
				if rec["msg"] == "serving" {
					t.Errorf("served: %s", line)
				}
			}
			if !refused {
				t.Errorf("no refusal naming %s and saying %q:\n%s", tc.name, tc.want, logs.String())
			}
		})
	}
}

// TestTracingSDKLogsAsJSON: what OpenTelemetry's SDK says itself (here
// its warning that a span has more attributes than
// OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT allows) comes out as the server's JSON
// log line at warn level, not on stderr in another format; and the start
// names the per-signal endpoint in use.
func TestTracingSDKLogsAsJSON(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", rcv.HTTPEndpoint()+"/v1/traces")
	t.Setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1")
	r := startRun(t, tracedRules, "TRACING_ENABLED", "true", "LOG_FORMAT", "json")
	get(t, "POST", "http://"+r.httpAddr+"/json", `{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`)
	if code := r.stop(); code != 0 {
		t.Fatalf("exit code %d:\n%s", code, r.logs)
	}
	var warned, started bool
	for line := range strings.Lines(r.logs.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		msg, _ := rec["msg"].(string)
		if strings.HasPrefix(msg, "tracing: limit reached") && rec["level"] == "WARN" {
			warned = true
		}
		if msg == "exporting OpenTelemetry traces" {
			started = rec["endpoint"] == rcv.HTTPEndpoint()+"/v1/traces" && rec["endpoint_from"] == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
		}
	}
	if !warned {
		t.Errorf("the SDK's warning is not a JSON warn line:\n%s", r.logs)
	}
	if !started {
		t.Errorf("the start does not name the per-signal endpoint:\n%s", r.logs)
	}
}
