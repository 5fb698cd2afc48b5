package main

import (
	"context"
	"io"
	"net/http"
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

	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/tracing"
)

// running is the program started by startRun.
type running struct {
	grpcAddr, httpAddr string
	logs               *testlog.Buffer
	stop               func() int // ends the program and returns its exit code
}

var servingAddrs = regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)`)

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
			r.grpcAddr, r.httpAddr = m[1], m[2]
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
			spans := rcv.Wait(t, tracing.RequestSpan, 2, 5*time.Second)
			for _, want := range []struct{ parent, code string }{{grpcSpan, "OK"}, {httpSpan, "OVER_LIMIT"}} {
				var found bool
				for _, s := range spans {
					if s.Name != tracing.RequestSpan || s.Parent != want.parent {
						continue
					}
					found = true
					if s.TraceID != trace || s.Via != protocol || s.Attrs["ratelimit.overall_code"] != want.code {
						t.Errorf("span under %s: trace %s via %s, code %v", want.parent, s.TraceID, s.Via, s.Attrs["ratelimit.overall_code"])
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
		_, err := parseConfig(nil, envOf(tc.env...))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.env, err, tc.want)
		}
	}
}
