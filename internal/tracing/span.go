package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// RecordBatch lets a limiter say, with the ctx its Evaluate was given, that
// the call went to the store in a round trip shared by calls calls (1: it
// went alone), on the store span in ctx. It does nothing, allocating
// nothing, when that span is not recording (tracing off, or a request not
// sampled).
func RecordBatch(ctx context.Context, calls int) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(attribute.Bool("ratelimit.store.batched", calls > 1), attribute.Int("ratelimit.store.batch_calls", calls))
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
