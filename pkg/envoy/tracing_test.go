package envoy

import (
	"context"
	"net"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/otlptest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/tracing"
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
	svc, err := New(fixedRules{set}, limit.NewMemory(limit.MemoryOptions{}), Options{Tracer: tr})
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
		{request("shop", desc("path", "/a"), desc("user", "u1")), "OK", tracing.NoRule, -1, true, codes.OK},
		{request("shop", desc("path", "/a"), desc("user", "u1")), "OVER_LIMIT", "shop.user", 1, true, codes.OK},
		{request("other", desc("user", "u1")), "OK", tracing.NoRule, -1, false, codes.OK},
		{request("shop"), "", tracing.NoRule, -1, false, codes.InvalidArgument},
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
	spans := rcv.Wait(t, tracing.RequestSpan, len(results), 5*time.Second)
	byParent := map[string]otlptest.Span{}
	for _, s := range spans {
		byParent[s.Parent] = s
	}
	for i, r := range results {
		rs, ok := byParent[r.caller]
		if !ok || rs.Name != tracing.RequestSpan {
			t.Errorf("request %d: no %s span under the caller's span %s; spans: %+v", i, tracing.RequestSpan, r.caller, spans)
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
		if ss.Name != tracing.StoreSpan || ss.TraceID != rs.TraceID || ss.Start.Before(rs.Start) || ss.End.After(rs.End) {
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
