package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
)

// Span names.
const (
	// RequestSpan is the server span of one ShouldRateLimit, over gRPC or
	// /json. It has the reference server's name, so that the trace
	// queries and dashboards written for it find floodgate's spans.
	RequestSpan = "ShouldRateLimit Execution"
	// StoreSpan is its child around the store call: one round trip for
	// all the request's counters.
	StoreSpan = "ratelimit.store"
)

// Attribute keys of the spans.
const (
	// On RequestSpan.
	KeyDomain      = attribute.Key("ratelimit.domain")           // the request's domain
	KeyRefDomain   = attribute.Key("domain")                     // the same, under the reference server's name
	KeyDescriptors = attribute.Key("ratelimit.descriptors")      // how many descriptors it has
	KeyCode        = attribute.Key("ratelimit.overall_code")     // OK or OVER_LIMIT; absent on an error
	KeyRule        = attribute.Key("ratelimit.rule")             // the rule that decided, or "none"
	KeyDescriptor  = attribute.Key("ratelimit.descriptor_index") // which descriptor it decided, when one did
	KeyFailure     = attribute.Key("ratelimit.store_failure")    // why the failure policy answered
	KeyPolicy      = attribute.Key("ratelimit.failure_policy")   // what it answered: allow, deny, unavailable

	// On StoreSpan.
	KeyHits       = attribute.Key("ratelimit.store.counters") // counters evaluated in the call
	KeyBatched    = attribute.Key("ratelimit.store.batched")  // whether the call shared a round trip
	KeyBatchCalls = attribute.Key("ratelimit.store.batch_calls")
)

// NoRule is KeyRule's value when no rule decided: the request passed.
const NoRule = "none"

// rpcMethod is the gRPC method the request spans answer for.
const rpcMethod = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// Request is the span of one request. Its zero value, what a nil Tracer
// starts, does nothing.
type Request struct {
	span trace.Span
	http bool // over HTTP: no gRPC status code
}

// Start starts the span of a request to domain with n descriptors, as a
// child of the caller's span: the W3C traceparent or B3 headers (b3, or
// x-b3-traceid and the others) of the incoming gRPC metadata, else one
// WithHTTPHeader put in ctx, else the span ctx already holds; a new trace
// without any. The returned context holds the span,
// for StartStore.
func (t *Tracer) Start(ctx context.Context, domain string, n int) (context.Context, Request) {
	if t == nil {
		return ctx, Request{}
	}
	if hasTraceContext(func(h string) bool { return metadata.ValueFromIncomingContext(ctx, h) != nil }) {
		ctx = propagator.Extract(ctx, mdCarrier{ctx})
	}
	// A request over HTTP (/json) is described as one; any other is the
	// gRPC call.
	hr, isHTTP := ctx.Value(httpRequestKey{}).(httpRequest)
	var attrs [5]attribute.KeyValue
	if isHTTP {
		attrs[0], attrs[1] = semconv.HTTPRequestMethodKey.String(hr.method), semconv.URLPath(hr.path)
	} else {
		attrs[0], attrs[1] = semconv.RPCSystemNameGRPC, semconv.RPCMethod(rpcMethod)
	}
	attrs[2], attrs[3], attrs[4] = KeyDomain.String(domain), KeyRefDomain.String(domain), KeyDescriptors.Int(n)
	ctx, span := t.tracer.Start(ctx, RequestSpan, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs[:]...))
	return ctx, Request{span: span, http: isHTTP}
}

// Recording reports whether the span records what End is given; callers
// skip gathering it otherwise.
func (r Request) Recording() bool {
	return r.span != nil && r.span.IsRecording()
}

// Outcome is how a request ended, for Request.End.
type Outcome struct {
	// Code is the answer's overall code, OK or OVER_LIMIT; "" when the
	// request failed with Err.
	Code string
	// Rule is the path of the rule of the first descriptor over its
	// limit; "" means NoRule. Descriptor is that descriptor's index.
	Rule       string
	Descriptor int
	// Failure and Policy, when Failure is not "", say that the store
	// failed and what the failure policy answered.
	Failure, Policy string
	// Err is the gRPC error returned instead of an answer, and GRPCCode
	// its code.
	Err      error
	GRPCCode int
}

// End records o and ends the span.
func (r Request) End(o Outcome) {
	if r.span == nil {
		return
	}
	if r.span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 6)
		if !r.http {
			attrs = append(attrs, semconv.RPCResponseStatusCodeKey.Int(o.GRPCCode))
		}
		if o.Code != "" {
			attrs = append(attrs, KeyCode.String(o.Code))
		}
		if o.Rule == "" {
			attrs = append(attrs, KeyRule.String(NoRule))
		} else {
			attrs = append(attrs, KeyRule.String(o.Rule), KeyDescriptor.Int(o.Descriptor))
		}
		if o.Failure != "" {
			attrs = append(attrs, KeyFailure.String(o.Failure), KeyPolicy.String(o.Policy))
		}
		r.span.SetAttributes(attrs...)
		if o.Err != nil {
			r.span.SetStatus(codes.Error, o.Err.Error())
		}
	}
	r.span.End()
}

// Store is the span of a store call. Its zero value does nothing.
type Store struct {
	span trace.Span
}

// StartStore starts the span of a store call evaluating n counters, as a
// child of the request span in ctx.
func (t *Tracer) StartStore(ctx context.Context, n int) (context.Context, Store) {
	if t == nil {
		return ctx, Store{}
	}
	attrs := []attribute.KeyValue{KeyHits.Int(n)}
	if t.store.Valid() {
		attrs = append(attrs, t.store)
	}
	ctx, span := t.tracer.Start(ctx, StoreSpan, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return ctx, Store{span: span}
}

// End records err, the store call's error, and ends the span.
func (s Store) End(err error) {
	if s.span == nil {
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
	}
	s.span.End()
}

// RecordBatch lets a limiter say, with the ctx its Evaluate was given, that
// the call went to the store in a round trip shared by calls calls (1: it
// went alone). It sets KeyBatched and KeyBatchCalls on the store span in
// ctx, and does nothing, allocating nothing, when that span is not
// recording (tracing off, or a request not sampled).
func RecordBatch(ctx context.Context, calls int) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(KeyBatched.Bool(calls > 1), KeyBatchCalls.Int(calls))
}

// WithHTTPRequest returns ctx marked as serving r, for Start to describe
// the span as an HTTP request (http.request.method, url.path) rather than
// the gRPC call, and holding the caller's span context read from r's W3C
// traceparent (and tracestate, baggage), for Start to continue: what an
// HTTP handler calls before the service.
func WithHTTPRequest(ctx context.Context, r *http.Request) context.Context {
	return withHTTP(ctx, r.Method, r.URL.Path, r.Header)
}

// WithHTTPHeader is WithHTTPRequest for a POST to /json, the service's
// HTTP endpoint, for a handler that passes only the headers. Prefer
// WithHTTPRequest, which reads the method and path.
func WithHTTPHeader(ctx context.Context, h http.Header) context.Context {
	return withHTTP(ctx, http.MethodPost, "/json", h)
}

func withHTTP(ctx context.Context, method, path string, h http.Header) context.Context {
	ctx = context.WithValue(ctx, httpRequestKey{}, httpRequest{method, path})
	if !hasTraceContext(func(k string) bool { return h.Get(k) != "" }) {
		return ctx
	}
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// hasTraceContext reports whether has finds one of the headers that carry
// a caller's span context (traceHeaders).
func hasTraceContext(has func(header string) bool) bool {
	for _, h := range traceHeaders {
		if has(h) {
			return true
		}
	}
	return false
}

// httpRequestKey is the context key of the httpRequest being served.
type httpRequestKey struct{}

type httpRequest struct{ method, path string }

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
