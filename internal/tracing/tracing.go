// Package tracing exports over OTLP the spans pkg/envoy starts (a server
// span per ShouldRateLimit, a child span per store call), as
// envoyproxy/ratelimit does with TRACING_ENABLED. A nil *Tracer exports
// nothing.
//
// The exporter's endpoint, headers, TLS files, timeout and compression come
// from the standard OTEL_EXPORTER_OTLP_* (and OTEL_EXPORTER_OTLP_TRACES_*)
// variables, which the OTLP exporters read from the process environment.
package tracing

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"strings"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate/floodgate/pkg/option"
)

// Protocols of the OTLP exporter, TRACING_EXPORTER_PROTOCOL's values.
const (
	ProtocolHTTP = "http" // OTLP/HTTP with protobuf bodies, port 4318
	ProtocolGRPC = "grpc" // OTLP/gRPC, port 4317
)

// DefaultServiceName is Options.ServiceName when it is empty, the
// reference server's TRACING_SERVICE_NAME default.
const DefaultServiceName = "RateLimit"

// DefaultSamplingRate samples every trace started here, as the
// reference's TRACING_SAMPLING_RATE does by default.
const DefaultSamplingRate = 1.0

// Options configure a Tracer. The zero value exports over OTLP/HTTP to the
// endpoint the OTEL_EXPORTER_OTLP_* variables give (http://localhost:4318
// when none), as service "RateLimit" with a random instance id, sampling
// no request (SamplingRate 0): set SamplingRate to 1 to trace all.
type Options struct {
	// Protocol is ProtocolHTTP or ProtocolGRPC; "" means ProtocolHTTP.
	// "http/protobuf", the OTEL_EXPORTER_OTLP_PROTOCOL spelling, is
	// ProtocolHTTP.
	Protocol string
	// ServiceName, ServiceNamespace and ServiceInstanceID are the
	// resource's service.name, service.namespace and service.instance.id;
	// an empty name is DefaultServiceName, an empty namespace is left out
	// and an empty instance id is a random UUID, as in the reference.
	ServiceName, ServiceNamespace, ServiceInstanceID string
	// SamplingRate is the share of traces started here that are sampled,
	// in [0, 1]. A caller's traceparent decides for its own trace (its
	// sampled flag), so that a trace Envoy keeps is kept whole.
	SamplingRate float64
	// Store names the counter store in the store spans' db.system.name:
	// "redis", "memcached", "memory"; "" leaves it out.
	Store string
}

// Validate reports the first option New refuses as an *option.Error
// ("tracing.Options.SamplingRate 2: want a number between 0 and 1"), or
// nil.
func (o Options) Validate() error {
	if math.IsNaN(o.SamplingRate) || o.SamplingRate < 0 || o.SamplingRate > 1 {
		return &option.Error{Options: "tracing.Options", Field: "SamplingRate", Value: o.SamplingRate, Want: "want a number between 0 and 1"}
	}
	switch strings.ToLower(o.Protocol) {
	case "", ProtocolHTTP, "http/protobuf", ProtocolGRPC:
		return nil
	}
	return &option.Error{Options: "tracing.Options", Field: "Protocol", Value: o.Protocol, Want: "want http or grpc"}
}

// Tracer starts the spans of the service and exports them. It is safe for
// concurrent use. Provider and Shutdown work on a nil *Tracer.
type Tracer struct {
	provider *sdktrace.TracerProvider
	resource *resource.Resource
	// endpoint is where the spans go, endpointVar the variable that
	// said so.
	endpoint, endpointVar string
}

// New returns a Tracer exporting in batches over OTLP as opts say. It does
// not connect: failed exports go to otel.Handle without slowing requests.
// Its error names the option refused, or the OTEL_EXPORTER_OTLP_* or
// OTEL_RESOURCE_ATTRIBUTES variable the exporter could not use, which it
// would only log before falling back to its defaults.
func New(ctx context.Context, opts Options) (*Tracer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	protocol := ProtocolHTTP
	if strings.EqualFold(opts.Protocol, ProtocolGRPC) {
		protocol = ProtocolGRPC
	}
	if err := checkEnv(protocol, os.Getenv); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	client := otlptracehttp.NewClient()
	if protocol == ProtocolGRPC {
		client = otlptracegrpc.NewClient()
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: creating the OTLP exporter: %w", err)
	}
	res, err := newResource(opts)
	if err != nil {
		return nil, err
	}
	popts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SamplingRate))),
		sdktrace.WithBatcher(exporter),
	}
	if opts.Store != "" {
		popts = append(popts, sdktrace.WithSpanProcessor(storeName{semconv.DBSystemNameKey.String(opts.Store)}))
	}
	t := &Tracer{provider: sdktrace.NewTracerProvider(popts...), resource: res}
	t.endpoint, t.endpointVar = endpoint(protocol, os.Getenv)
	return t, nil
}

// newResource describes the process: the SDK's attributes and
// OTEL_RESOURCE_ATTRIBUTES, overridden by opts.
func newResource(opts Options) (*resource.Resource, error) {
	attrs := []attribute.KeyValue{
		semconv.ServiceName(cmp.Or(opts.ServiceName, DefaultServiceName)),
		semconv.ServiceInstanceID(cmp.Or(opts.ServiceInstanceID, uuid.NewString())),
	}
	if opts.ServiceNamespace != "" {
		attrs = append(attrs, semconv.ServiceNamespace(opts.ServiceNamespace))
	}
	own := resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	// The SDK keeps what it could read of a malformed
	// OTEL_RESOURCE_ATTRIBUTES; the pairs lost are those a query needs.
	env, err := resource.New(context.Background(), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w; want comma-separated key=value pairs, values percent-encoded", err)
	}
	res, err := resource.Merge(env, own)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	return res, nil
}

// Provider returns the provider of the spans, for envoy.Options; nil for
// a nil Tracer.
func (t *Tracer) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Resource returns the attributes every span is exported with.
func (t *Tracer) Resource() *resource.Resource {
	return t.resource
}

// Endpoint returns the URL the spans are exported to, which may hold
// credentials, and the variable it came from, "" for the default.
func (t *Tracer) Endpoint() (url, variable string) {
	return t.endpoint, t.endpointVar
}

// Shutdown exports the spans still buffered, within ctx, and stops.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans: %w", err)
	}
	return nil
}

// storeName adds db.system.name to the store spans, the client spans
// pkg/envoy starts around each store call: pkg/envoy knows no store.
type storeName struct{ attr attribute.KeyValue }

func (p storeName) OnStart(_ context.Context, s sdktrace.ReadWriteSpan) {
	if s.SpanKind() == trace.SpanKindClient {
		s.SetAttributes(p.attr)
	}
}

func (storeName) OnEnd(sdktrace.ReadOnlySpan)      {}
func (storeName) Shutdown(context.Context) error   { return nil }
func (storeName) ForceFlush(context.Context) error { return nil }
