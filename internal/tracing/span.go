package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

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
