package envoy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/internal/tracing"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

const tracedRules = `
domain: shop
descriptors:
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`

// TestTracing calls the service over a real gRPC connection, as Envoy
// does, from a client whose span travels as a W3C traceparent in the
// call's metadata, and reads the spans back from a real OTLP receiver: the
// request span's parent is the client's span, the store span is its child,
// each lies within its parent's time, and the attributes say the domain,
// the descriptor count, the answer and the rule that decided it.
func TestTracing(t *testing.T) {
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.GRPCEndpoint())
	tr, err := tracing.New(context.Background(), tracing.Options{Protocol: tracing.ProtocolGRPC, SamplingRate: 1, Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(tracedRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(fixedRules{set}.Current, limit.NewMemory(limit.MemoryOptions{}), Options{TracerProvider: tr.Provider()})
	if err != nil {
		t.Fatal(err)
	}
	client := serveGRPC(t, svc)

	// The caller's side: its own tracer, whose span context the W3C
	// propagator writes into the call's metadata.
	callerTP := sdktrace.NewTracerProvider()
	t.Cleanup(func() { callerTP.Shutdown(context.Background()) })
	call := func(req *pb.RateLimitRequest) (string, time.Time, time.Time, *pb.RateLimitResponse, error) {
		ctx, span := callerTP.Tracer("envoy").Start(context.Background(), "egress ratelimit")
		defer span.End()
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, carrier)
		ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", carrier["traceparent"])
		before := time.Now()
		resp, err := client.ShouldRateLimit(ctx, req)
		return span.SpanContext().SpanID().String(), before, time.Now(), resp, err
	}

	type result struct {
		caller        string
		before, after time.Time
		code          string
		rule          string
		index         int64
		store         bool
		grpcCode      codes.Code
		hits, descs   int64
		domain        string
		statusIsError bool
	}
	var results []result
	for _, tc := range []struct {
		req      *pb.RateLimitRequest
		code     string
		rule     string
		index    int64
		store    bool
		grpcCode codes.Code
	}{
		{request("shop", desc("path", "/a"), desc("user", "u1")), "OK", noRule, -1, true, codes.OK},
		{request("shop", desc("path", "/a"), desc("user", "u1")), "OVER_LIMIT", "shop.user", 1, true, codes.OK},
		{request("other", desc("user", "u1")), "OK", noRule, -1, false, codes.OK},
		{request("shop"), "", noRule, -1, false, codes.InvalidArgument},
	} {
		caller, before, after, resp, err := call(tc.req)
		if status.Code(err) != tc.grpcCode || (err == nil && resp.OverallCode.String() != tc.code) {
			t.Fatalf("%v: %v %v, want %s %v", tc.req, resp, err, tc.code, tc.grpcCode)
		}
		results = append(results, result{caller: caller, before: before, after: after, code: tc.code, rule: tc.rule, index: tc.index,
			store: tc.store, grpcCode: tc.grpcCode, descs: int64(len(tc.req.Descriptors)), domain: tc.req.Domain, statusIsError: err != nil})
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	spans := rcv.Wait(t, requestSpan, len(results), 5*time.Second)
	byParent := map[string]otlptest.Span{}
	for _, s := range spans {
		byParent[s.Parent] = s
	}
	for i, r := range results {
		rs, ok := byParent[r.caller]
		if !ok || rs.Name != requestSpan {
			t.Errorf("request %d: no %s span under the caller's span %s; spans: %+v", i, requestSpan, r.caller, spans)
			continue
		}
		if rs.Start.Before(r.before) || rs.End.After(r.after) || !rs.End.After(rs.Start) {
			t.Errorf("request %d: span %v..%v outside the call %v..%v", i, rs.Start, rs.End, r.before, r.after)
		}
		wantAttr(t, i, rs.Attrs, "ratelimit.domain", r.domain)
		wantAttr(t, i, rs.Attrs, "ratelimit.descriptors", r.descs)
		wantAttr(t, i, rs.Attrs, "ratelimit.rule", r.rule)
		wantAttr(t, i, rs.Attrs, "rpc.response.status_code", int64(r.grpcCode))
		if r.code != "" {
			wantAttr(t, i, rs.Attrs, "ratelimit.overall_code", r.code)
		}
		if r.index >= 0 {
			wantAttr(t, i, rs.Attrs, "ratelimit.descriptor_index", r.index)
		}
		if r.statusIsError != (rs.StatusCode == 2) {
			t.Errorf("request %d: span status %v", i, rs.StatusCode)
		}
		ss, ok := byParent[rs.SpanID]
		if ok != r.store {
			t.Errorf("request %d: a store span: %v, want %v", i, ok, r.store)
			continue
		}
		if !ok {
			continue
		}
		if ss.Name != storeSpan || ss.TraceID != rs.TraceID || ss.Start.Before(rs.Start) || ss.End.After(rs.End) {
			t.Errorf("request %d: store span %+v does not lie within %+v", i, ss, rs)
		}
		wantAttr(t, i, ss.Attrs, "ratelimit.store.counters", int64(2))
		wantAttr(t, i, ss.Attrs, "db.system.name", "memory")
	}
}

func wantAttr(t *testing.T, i int, attrs map[string]any, key string, want any) {
	t.Helper()
	if attrs[key] != want {
		t.Errorf("request %d: %s = %v (%T), want %v (%T)", i, key, attrs[key], attrs[key], want, want)
	}
}

// serveGRPC serves svc on a loopback port and returns a client of it.
func serveGRPC(t *testing.T, svc *Service) pb.RateLimitServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterRateLimitServiceServer(gs, svc)
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewRateLimitServiceClient(conn)
}

// A caller's span, as Envoy would send it.
const (
	callerTrace     = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan      = "00f067aa0ba902b7"
	callerSampled   = "00-" + callerTrace + "-" + callerSpan + "-01"
	callerUnsampled = "00-" + callerTrace + "-" + callerSpan + "-00"
)

// tracedCall answers req from a service on l with the binary's tracer
// (sampling rate, over OTLP/HTTP to a real receiver) under ctx, flushes,
// and returns the spans exported.
func tracedCall(t *testing.T, ctx context.Context, rate float64, l limit.Limiter, opts Options, req *pb.RateLimitRequest) []otlptest.Span {
	t.Helper()
	rcv := otlptest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.HTTPEndpoint())
	tr, err := tracing.New(context.Background(), tracing.Options{SamplingRate: rate})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(tracedRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.TracerProvider = tr.Provider()
	svc, err := New(fixedRules{set}.Current, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	svc.ShouldRateLimit(ctx, req)
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	return rcv.Spans()
}

// TestSpanParents: where the request span's parent comes from, and what
// is sampled: the caller's flag decides for its trace.
func TestSpanParents(t *testing.T) {
	md := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...))
	}
	header := func(kv ...string) context.Context {
		r := httptest.NewRequest(http.MethodPost, "/json", nil)
		for i := 0; i+1 < len(kv); i += 2 {
			r.Header.Set(kv[i], kv[i+1])
		}
		return withHTTPRequest(context.Background(), r)
	}
	const (
		b3Trace = "463ac35c9f6413ad48485a3953bb6124"
		b3Span  = "0020000000000001"
		b3      = b3Trace + "-" + b3Span + "-1"
	)
	multi := []string{"x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "1"}
	for _, tc := range []struct {
		name          string
		rate          float64
		ctx           context.Context
		sampled       bool
		trace, parent string // "" for a root span
	}{
		{"gRPC metadata", 1, md("traceparent", callerSampled), true, callerTrace, callerSpan},
		{"HTTP header", 1, header("traceparent", callerSampled), true, callerTrace, callerSpan},
		{"no traceparent starts a trace", 1, md("x", "y"), true, "", ""},
		{"a malformed traceparent starts a trace", 1, md("traceparent", "00-zz-yy-01"), true, "", ""},
		{"the caller's sampled flag wins over rate 0", 0, md("traceparent", callerSampled), true, callerTrace, callerSpan},
		{"the caller's unsampled flag wins over rate 1", 1, md("traceparent", callerUnsampled), false, "", ""},
		{"rate 0 without a caller samples nothing", 0, context.Background(), false, "", ""},
		{"B3 single header over gRPC", 0, md("b3", b3), true, b3Trace, b3Span},
		{"x-b3-* over gRPC", 0, md(multi...), true, b3Trace, b3Span},
		{"B3 single header over HTTP", 0, header("b3", b3), true, b3Trace, b3Span},
		{"x-b3-* over HTTP", 0, header(multi...), true, b3Trace, b3Span},
		{"B3 wins over a traceparent beside it", 0, md("traceparent", callerSampled, "b3", b3), true, b3Trace, b3Span},
		{"B3 unsampled", 1, md("x-b3-traceid", b3Trace, "x-b3-spanid", b3Span, "x-b3-sampled", "0"), false, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans := tracedCall(t, tc.ctx, tc.rate, limit.NewMemory(limit.MemoryOptions{}), Options{}, request("other", desc("user", "u1")))
			if !tc.sampled {
				if len(spans) != 0 {
					t.Fatalf("exported %v, want nothing", spans)
				}
				return
			}
			if len(spans) != 1 {
				t.Fatalf("exported %d spans, want 1", len(spans))
			}
			if spans[0].Parent != tc.parent || (tc.trace != "" && spans[0].TraceID != tc.trace) {
				t.Errorf("span in trace %s under %q, want %q under %q", spans[0].TraceID, spans[0].Parent, tc.trace, tc.parent)
			}
			if spans[0].Attrs["ratelimit.rule"] != noRule {
				t.Errorf("rule %v, want %q", spans[0].Attrs["ratelimit.rule"], noRule)
			}
		})
	}
}

// TestSpanOverHTTP: a request over HTTP is described as one
// (http.request.method, url.path), without the gRPC call's rpc.*
// attributes.
func TestSpanOverHTTP(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/json?x=1", nil)
	spans := tracedCall(t, withHTTPRequest(context.Background(), r), 1, limit.NewMemory(limit.MemoryOptions{}), Options{}, request("other", desc("user", "u1")))
	rs, ok := otlptest.Find(spans, requestSpan)
	if !ok {
		t.Fatal("no request span")
	}
	for k, v := range map[string]any{"http.request.method": "POST", "url.path": "/json", "domain": "other"} {
		wantAttr(t, 0, rs.Attrs, k, v)
	}
	for _, k := range []string{"rpc.system.name", "rpc.method", "rpc.response.status_code"} {
		if v, ok := rs.Attrs[k]; ok {
			t.Errorf("an HTTP request has %s=%v", k, v)
		}
	}
}

// TestSpanOfStoreFailure: a store failure shows on both spans, with what
// the failure policy answered: an answer (allow), or the gRPC error
// Unavailable.
func TestSpanOfStoreFailure(t *testing.T) {
	for _, tc := range []struct {
		mode  rules.FailureMode
		attrs map[string]any
	}{
		{rules.FailureAllow, map[string]any{"ratelimit.store_failure": "error", "ratelimit.failure_policy": "allow",
			"ratelimit.overall_code": "OK", "rpc.response.status_code": int64(codes.OK)}},
		{rules.FailureUnavailable, map[string]any{"ratelimit.store_failure": "error", "ratelimit.failure_policy": "unavailable",
			"rpc.response.status_code": int64(codes.Unavailable)}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			spans := tracedCall(t, context.Background(), 1, failingStore{}, Options{FailureMode: tc.mode}, request("shop", desc("user", "u1")))
			rs, _ := otlptest.Find(spans, requestSpan)
			ss, ok := otlptest.Find(spans, storeSpan)
			if !ok {
				t.Fatalf("no store span in %v", spans)
			}
			if ss.StatusCode != tracepb.Status_STATUS_CODE_ERROR || ss.StatusMessage != "connection refused" {
				t.Errorf("store span status %v %q", ss.StatusCode, ss.StatusMessage)
			}
			if rs.Kind != tracepb.Span_SPAN_KIND_SERVER || ss.Kind != tracepb.Span_SPAN_KIND_CLIENT {
				t.Errorf("kinds %v and %v, want server and client", rs.Kind, ss.Kind)
			}
			for k, v := range tc.attrs {
				wantAttr(t, 0, rs.Attrs, k, v)
			}
			failed := tc.mode == rules.FailureUnavailable
			if failed != (rs.StatusCode == tracepb.Status_STATUS_CODE_ERROR) || (failed && !strings.Contains(rs.StatusMessage, "store failed")) {
				t.Errorf("request span status %v %q", rs.StatusCode, rs.StatusMessage)
			}
			if _, ok := rs.Attrs["ratelimit.overall_code"]; ok && failed {
				t.Errorf("an error answer has an overall code: %v", rs.Attrs)
			}
			if _, ok := ss.Attrs["db.system.name"]; ok {
				t.Errorf("db.system.name without tracing.Options.Store: %v", ss.Attrs)
			}
		})
	}
}
