package envoy

import (
	"context"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/contrib/propagators/b3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	requestSpan     = "ShouldRateLimit Execution" // the reference server's name, which its queries find
	storeSpan       = "ratelimit.store"
	instrumentation = "github.com/floodgate/floodgate" // the spans' instrumentation scope
	rpcMethod       = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	noRule          = "none" // ratelimit.rule when no rule decided
)

// propagator reads the W3C traceparent and tracestate (Envoy's
// OpenTelemetry tracer), then Zipkin's B3 (Istio), which wins when both
// come, then baggage, as the reference server does.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, b3.New(), propagation.Baggage{})

// traceHeaders carry a caller's span context.
var traceHeaders = [...]string{"traceparent", "b3", "x-b3-traceid"}

// withHTTPRequest returns ctx marked as serving r, for the request's span
// to describe an HTTP request (http.request.method, url.path), and holding
// the caller's span context from r's headers.
func withHTTPRequest(ctx context.Context, r *http.Request) context.Context {
	ctx = context.WithValue(ctx, httpRequestKey{}, httpRequest{r.Method, r.URL.Path})
	if !hasTraceContext(func(k string) bool { return r.Header.Get(k) != "" }) {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(r.Header))
}

type httpRequestKey struct{}

type httpRequest struct{ method, path string }

// startSpan starts the request's span, a child of the caller's span in the
// incoming gRPC metadata, else in ctx; it reports whether the request came
// over HTTP (JSONHandler).
func (s *Service) startSpan(ctx context.Context, req *pb.RateLimitRequest) (context.Context, trace.Span, bool) {
	if hasTraceContext(func(h string) bool { return metadata.ValueFromIncomingContext(ctx, h) != nil }) {
		ctx = propagator.Extract(ctx, mdCarrier{ctx})
	}
	hr, isHTTP := ctx.Value(httpRequestKey{}).(httpRequest)
	var attrs [5]attribute.KeyValue
	if isHTTP {
		attrs[0], attrs[1] = semconv.HTTPRequestMethodKey.String(hr.method), semconv.URLPath(hr.path)
	} else {
		attrs[0], attrs[1] = semconv.RPCSystemNameGRPC, semconv.RPCMethod(rpcMethod)
	}
	domain := req.GetDomain()
	attrs[2] = attribute.String("ratelimit.domain", domain)
	attrs[3] = attribute.String("domain", domain) // the reference server's name
	attrs[4] = attribute.Int("ratelimit.descriptors", len(req.GetDescriptors()))
	ctx, span := s.tracer.Start(ctx, requestSpan, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs[:]...))
	return ctx, span, isHTTP
}

// endSpan records what decided the request, if the span records, and ends
// it, before sc is reset.
func endSpan(span trace.Span, isHTTP bool, sc *scratch, resp *pb.RateLimitResponse, err error) {
	if !span.IsRecording() {
		span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	if !isHTTP {
		attrs = append(attrs, semconv.RPCResponseStatusCodeKey.Int(int(status.Code(err))))
	}
	if err == nil {
		attrs = append(attrs, attribute.String("ratelimit.overall_code", resp.GetOverallCode().String()))
	}
	// The deciding rule is the first over its limit, in shadow mode too.
	rule := attribute.String("ratelimit.rule", noRule)
	for i, st := range resp.GetStatuses() {
		if st.GetCode() == pb.RateLimitResponse_OVER_LIMIT && i < len(sc.descs) {
			rule = attribute.String("ratelimit.rule", sc.descs[i].metric)
			attrs = append(attrs, attribute.Int("ratelimit.descriptor_index", i))
			break
		}
	}
	attrs = append(attrs, rule)
	if sc.failure.cause != "" {
		attrs = append(attrs, attribute.String("ratelimit.store_failure", sc.failure.cause),
			attribute.String("ratelimit.failure_policy", sc.failure.policy.String()))
	}
	span.SetAttributes(attrs...)
	if err != nil {
		span.SetStatus(otelcodes.Error, err.Error())
	}
	span.End()
}

func hasTraceContext(has func(header string) bool) bool {
	for _, h := range traceHeaders {
		if has(h) {
			return true
		}
	}
	return false
}

// mdCarrier reads the propagation headers from incoming gRPC metadata
// without copying it whole.
type mdCarrier struct{ ctx context.Context }

func (c mdCarrier) Get(key string) string {
	if v := metadata.ValueFromIncomingContext(c.ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(string, string) {}

func (c mdCarrier) Keys() []string {
	md, _ := metadata.FromIncomingContext(c.ctx)
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	return keys
}
