package tracing

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate/floodgate/internal/otlptest"
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

// TestExport exports a server span and its client child over both
// protocols to a real OTLP receiver: the child carries db.system.name
// (Options.Store) beside its own attributes, and both the resource.
func TestExport(t *testing.T) {
	for _, protocol := range []string{ProtocolHTTP, ProtocolGRPC} {
		t.Run(protocol, func(t *testing.T) {
			tr, rcv := newTracer(t, protocol, Options{
				ServiceNamespace: "edge", ServiceInstanceID: "rl-0", SamplingRate: 1, Store: "redis",
			})
			tracer := tr.Provider().Tracer("test")
			ctx, req := tracer.Start(context.Background(), "request", trace.WithSpanKind(trace.SpanKindServer))
			_, st := tracer.Start(ctx, "store", trace.WithSpanKind(trace.SpanKindClient))
			st.SetAttributes(attribute.Bool("ratelimit.store.batched", true), attribute.Int("ratelimit.store.batch_calls", 4))
			st.End()
			req.End()
			// Shutdown flushes what the batcher holds.
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			spans := rcv.Wait(t, "store", 1, 5*time.Second)
			rs, ok := otlptest.Find(spans, "request")
			ss, _ := otlptest.Find(spans, "store")
			if !ok || rs.Via != protocol || ss.Via != protocol {
				t.Fatalf("spans %+v, want both over %s", spans, protocol)
			}
			if _, ok := rs.Attrs["db.system.name"]; ok {
				t.Errorf("the server span has db.system.name: %v", rs.Attrs)
			}
			wantAttrs(t, ss.Attrs, map[string]any{
				"db.system.name": "redis", "ratelimit.store.batched": true, "ratelimit.store.batch_calls": int64(4),
			})
			wantAttrs(t, rs.Resource, map[string]any{
				"service.name": DefaultServiceName, "service.namespace": "edge", "service.instance.id": "rl-0",
			})
		})
	}
}

// TestNilTracer: a nil Tracer, what the binary holds with tracing off,
// gives no provider and shuts down.
func TestNilTracer(t *testing.T) {
	var tr *Tracer
	if tr.Provider() != nil {
		t.Error("a nil Tracer has a provider")
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Error(err)
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
