package tracing

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc/metadata"

	"github.com/floodgate/floodgate/internal/otlptest"
)

// A caller's span, as Envoy would send it.
const (
	callerTrace     = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan      = "00f067aa0ba902b7"
	callerSampled   = "00-" + callerTrace + "-" + callerSpan + "-01"
	callerUnsampled = "00-" + callerTrace + "-" + callerSpan + "-00"
)

// newTracer returns a Tracer exporting to a fresh receiver over protocol,
// set through the standard OTEL_EXPORTER_OTLP_ENDPOINT variable.
func newTracer(t *testing.T, protocol string, opts Options) (*Tracer, *otlptest.Receiver) {
	t.Helper()
	rcv := otlptest.Start(t)
	endpoint := rcv.HTTPEndpoint()
	if protocol == ProtocolGRPC {
		endpoint = rcv.GRPCEndpoint()
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	opts.Protocol = protocol
	tr, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr, rcv
}

// TestExport follows one request through both protocols to a real OTLP
// receiver: the request span continues the caller's traceparent from
// gRPC metadata, the store span is its child and lies within it, and both
// carry their attributes and the resource.
func TestExport(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			tr, rcv := newTracer(t, protocol, Options{
				ServiceNamespace: "edge", ServiceInstanceID: "rl-0", SamplingRate: 1, Store: "redis",
			})
			ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", callerSampled))
			before := time.Now()
			ctx, req := tr.Start(ctx, "shop", 2)
			if !req.Recording() {
				t.Fatal("a sampled request's span does not record")
			}
			sctx, st := tr.StartStore(ctx, 3)
			RecordBatch(sctx, 4)
			// The store call takes time, measured by the SDK's wall clock,
			// which cannot be injected: the span must last at least this.
			time.Sleep(2 * time.Millisecond)
			st.End(nil)
			req.End(Outcome{Code: "OVER_LIMIT", Rule: "shop.user", Descriptor: 1})
			after := time.Now()
			// Shutdown flushes what the batcher holds.
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Wait(t, StoreSpan, 1, 5*time.Second)
			rs, ok := otlptest.Find(spans, RequestSpan)
			if !ok {
				t.Fatalf("no %s span in %v", RequestSpan, spans)
			}
			ss, _ := otlptest.Find(spans, StoreSpan)
			if rs.Via != protocol || ss.Via != protocol {
				t.Errorf("spans came over %s and %s, want %s", rs.Via, ss.Via, protocol)
			}
			if rs.TraceID != callerTrace || rs.Parent != callerSpan {
				t.Errorf("request span in trace %s under %s, want the caller's %s under %s", rs.TraceID, rs.Parent, callerTrace, callerSpan)
			}
			if ss.TraceID != callerTrace || ss.Parent != rs.SpanID {
				t.Errorf("store span's parent %s, want the request span %s", ss.Parent, rs.SpanID)
			}
			if rs.Kind != tracepb.Span_SPAN_KIND_SERVER || ss.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("kinds %v and %v, want server and client", rs.Kind, ss.Kind)
			}
			if rs.Start.Before(before) || rs.End.After(after) || ss.Start.Before(rs.Start) || ss.End.After(rs.End) {
				t.Errorf("times: request %v..%v, store %v..%v, call %v..%v", rs.Start, rs.End, ss.Start, ss.End, before, after)
			}
			if d := ss.End.Sub(ss.Start); d < 2*time.Millisecond {
				t.Errorf("store span lasted %v, want at least the 2ms it took", d)
			}
			if rs.Name != "ShouldRateLimit Execution" {
				t.Errorf("request span %q, want the reference server's name", rs.Name)
			}
			wantAttrs(t, rs.Attrs, map[string]any{
				"ratelimit.domain": "shop", "domain": "shop", "ratelimit.descriptors": int64(2),
				"ratelimit.overall_code": "OVER_LIMIT", "ratelimit.rule": "shop.user", "ratelimit.descriptor_index": int64(1),
				"rpc.method": rpcMethod, "rpc.system.name": "grpc", "rpc.response.status_code": int64(0),
			})
			wantAttrs(t, ss.Attrs, map[string]any{
				"ratelimit.store.counters": int64(3), "db.system.name": "redis",
				"ratelimit.store.batched": true, "ratelimit.store.batch_calls": int64(4),
			})
			wantAttrs(t, rs.Resource, map[string]any{
				"service.name": DefaultServiceName, "service.namespace": "edge", "service.instance.id": "rl-0",
			})
		})
	}
}

func wantAttrs(t *testing.T, got, want map[string]any) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v (%T), want %v (%T)", k, got[k], got[k], v, v)
		}
	}
}

// TestParents: where the parent comes from, and what is sampled.
func TestParents(t *testing.T) {
	withMD := func(tp string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", tp))
	}
	withHeader := func(tp string) context.Context {
		h := http.Header{}
		h.Set("Traceparent", tp)
		return WithHTTPHeader(context.Background(), h)
	}
	for _, tc := range []struct {
		name    string
		rate    float64
		ctx     context.Context
		sampled bool
		parent  string // "" for a root span
	}{
		{"gRPC metadata", 1, withMD(callerSampled), true, callerSpan},
		{"HTTP header", 1, withHeader(callerSampled), true, callerSpan},
		{"no traceparent starts a trace", 1, metadata.NewIncomingContext(context.Background(), metadata.Pairs("x", "y")), true, ""},
		{"a malformed traceparent starts a trace", 1, withMD("00-zz-yy-01"), true, ""},
		{"the caller's sampled flag wins over rate 0", 0, withMD(callerSampled), true, callerSpan},
		{"the caller's unsampled flag wins over rate 1", 1, withMD(callerUnsampled), false, ""},
		{"rate 0 without a caller samples nothing", 0, context.Background(), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, rcv := newTracer(t, ProtocolHTTP, Options{SamplingRate: tc.rate})
			_, req := tr.Start(tc.ctx, "d", 1)
			if req.Recording() != tc.sampled {
				t.Fatalf("recording %v, want %v", req.Recording(), tc.sampled)
			}
			req.End(Outcome{Code: "OK"})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if !tc.sampled {
				if len(spans) != 0 {
					t.Fatalf("exported %v, want nothing", spans)
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("exported %d spans, want 1", len(spans))
			}
			if spans[0].Parent != tc.parent {
				t.Errorf("parent %q, want %q", spans[0].Parent, tc.parent)
			}
			if tc.parent != "" && spans[0].TraceID != callerTrace {
				t.Errorf("trace %s, want the caller's", spans[0].TraceID)
			}
			if spans[0].Attrs["ratelimit.rule"] != NoRule {
				t.Errorf("rule %v, want %q", spans[0].Attrs["ratelimit.rule"], NoRule)
			}
		})
	}
}

// TestHTTPSemantics: a request over HTTP is described as one
// (http.request.method, url.path), without the gRPC call's rpc.*
// attributes, whether the handler passes the request or only its headers.
func TestHTTPSemantics(t *testing.T) {
	r, err := http.NewRequest(http.MethodPost, "http://127.0.0.1/json?x=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, ctx := range map[string]context.Context{
		"WithHTTPRequest": WithHTTPRequest(context.Background(), r),
		"WithHTTPHeader":  WithHTTPHeader(context.Background(), http.Header{}),
	} {
		t.Run(name, func(t *testing.T) {
			tr, rcv := newTracer(t, ProtocolHTTP, Options{SamplingRate: 1})
			_, req := tr.Start(ctx, "d", 1)
			req.End(Outcome{Code: "OK"})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			rs, ok := otlptest.Find(rcv.Wait(t, RequestSpan, 1, 5*time.Second), RequestSpan)
			if !ok {
				t.Fatal("no request span")
			}
			wantAttrs(t, rs.Attrs, map[string]any{"http.request.method": "POST", "url.path": "/json", "domain": "d"})
			for _, k := range []string{"rpc.system.name", "rpc.method", "rpc.response.status_code"} {
				if v, ok := rs.Attrs[k]; ok {
					t.Errorf("an HTTP request has %s=%v", k, v)
				}
			}
		})
	}
}

// TestErrorsAndFailures: an error answer and a store failure show on the
// spans.
func TestErrorsAndFailures(t *testing.T) {
	tr, rcv := newTracer(t, ProtocolGRPC, Options{SamplingRate: 1})
	ctx, req := tr.Start(context.Background(), "d", 1)
	_, st := tr.StartStore(ctx, 1)
	st.End(errors.New("dial tcp: refused"))
	req.End(Outcome{Err: errors.New("rate-limit store failed (error)"), GRPCCode: 14, Failure: "error", Policy: "unavailable"})
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(t, RequestSpan, 1, 5*time.Second)
	rs, _ := otlptest.Find(spans, RequestSpan)
	ss, _ := otlptest.Find(spans, StoreSpan)
	if rs.StatusCode != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(rs.StatusMessage, "store failed") {
		t.Errorf("request span status %v %q", rs.StatusCode, rs.StatusMessage)
	}
	if ss.StatusCode != tracepb.Status_STATUS_CODE_ERROR || ss.StatusMessage != "dial tcp: refused" {
		t.Errorf("store span status %v %q", ss.StatusCode, ss.StatusMessage)
	}
	wantAttrs(t, rs.Attrs, map[string]any{"rpc.response.status_code": int64(14), "ratelimit.store_failure": "error", "ratelimit.failure_policy": "unavailable"})
	if _, ok := rs.Attrs["ratelimit.overall_code"]; ok {
		t.Errorf("an error answer has an overall code: %v", rs.Attrs)
	}
	if _, ok := ss.Attrs["db.system.name"]; ok {
		t.Errorf("db.system.name without Options.Store: %v", ss.Attrs)
	}
}

// TestResourceFromEnv: OTEL_RESOURCE_ATTRIBUTES adds attributes, which
// the TRACING_SERVICE_* options override.
func TestResourceFromEnv(t *testing.T) {
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=prod,service.name=ignored")
	tr, _ := newTracer(t, ProtocolHTTP, Options{ServiceName: "rl"})
	got := map[string]any{}
	for _, kv := range tr.Resource().Attributes() {
		got[string(kv.Key)] = kv.Value.AsInterface()
	}
	wantAttrs(t, got, map[string]any{"deployment.environment.name": "prod", "service.name": "rl"})
	if id, _ := got["service.instance.id"].(string); len(id) != 36 {
		t.Errorf("service.instance.id %q, want a random UUID", id)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Protocol: "udp"}, `Options.Protocol "udp": want http or grpc`},
		{Options{SamplingRate: 1.5}, "Options.SamplingRate 1.5: want a number between 0 and 1"},
		{Options{SamplingRate: -0.1}, "Options.SamplingRate -0.1: want a number between 0 and 1"},
		{Options{SamplingRate: math.NaN()}, "Options.SamplingRate NaN"},
	} {
		if _, err := New(context.Background(), tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v, want an error saying %q", tc.opts, err, tc.want)
		}
	}
}

// TestOffAllocatesNothing: a nil Tracer, what the service holds with
// tracing off, costs no allocation on the request path.
func TestOffAllocatesNothing(t *testing.T) {
	var tr *Tracer
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("traceparent", callerSampled))
	allocs := testing.AllocsPerRun(100, func() {
		c, req := tr.Start(ctx, "d", 1)
		c, st := tr.StartStore(c, 1)
		RecordBatch(c, 2)
		st.End(nil)
		if req.Recording() {
			t.Fatal("a nil Tracer records")
		}
		req.End(Outcome{Code: "OK"})
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request with tracing off, want 0", allocs)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestB3: Zipkin's B3 context is continued in both forms, the single b3
// header and the x-b3-* headers, over gRPC and HTTP, as the reference
// server continues it; B3 wins over a traceparent sent beside it, and its
// unsampled flag is honoured.
func TestB3(t *testing.T) {
	const (
		b3Trace = "463ac35c9f6413ad48485a3953bb6124"
		b3Span  = "0020000000000001"
	)
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	header := func(kv ...string) context.Context {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return WithHTTPHeader(context.Background(), h)
	}
	single := b3Trace + "-" + b3Span + "-1"
	multi := []string{"x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		sampled bool
	}{
		{"single header over gRPC", md("b3", single), true},
		{"x-b3-* over gRPC", md(multi...), true},
		{"single header over HTTP", header("b3", single), true},
		{"x-b3-* over HTTP", header(multi...), true},
		{"B3 wins over a traceparent beside it", md("traceparent", callerSampled, "b3", single), true},
		{"unsampled", md("x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "0"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, rcv := newTracer(t, ProtocolHTTP, Options{SamplingRate: 1})
			_, req := tr.Start(tc.ctx, "d", 1)
			req.End(Outcome{Code: "OK"})
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Spans()
			if !tc.sampled {
				if len(spans) != 0 {
					t.Errorf("exported %v, want nothing: the caller did not sample", spans)
				}
				return
			}
			if len(spans) != 1 || spans[0].TraceID != b3Trace || spans[0].Parent != b3Span {
				t.Fatalf("exported %+v, want one span of trace %s, child of %s", spans, b3Trace, b3Span)
			}
		})
	}
}
