package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/floodgate/floodgate/pkg/tracing"
)

// tracingConfig is the OpenTelemetry export, the reference server's
// TRACING_* variables; where the spans go is the OTLP exporter's standard
// OTEL_EXPORTER_OTLP_* variables, which it reads itself.
type tracingConfig struct {
	on                               bool
	protocol                         string
	serviceName, namespace, instance string
	samplingRate                     float64
}

// flags registers the -tracing* flags.
func (t *tracingConfig) flags(fs *flag.FlagSet) {
	fs.BoolVar(&t.on, "tracing", false, "export OpenTelemetry traces over OTLP: a span per request, continuing the caller's W3C traceparent, and one per store call; the endpoint is OTEL_EXPORTER_OTLP_ENDPOINT's (see docs/operations.md)")
	fs.StringVar(&t.protocol, "tracing-protocol", tracing.ProtocolHTTP, "OTLP protocol: http (port 4318) or grpc (port 4317)")
	fs.StringVar(&t.serviceName, "tracing-service-name", tracing.DefaultServiceName, "the spans' service.name")
	fs.StringVar(&t.namespace, "tracing-service-namespace", "", "the spans' service.namespace; empty: none")
	fs.StringVar(&t.instance, "tracing-service-instance-id", "", "the spans' service.instance.id; empty: a random UUID at each start")
	fs.Float64Var(&t.samplingRate, "tracing-sampling-rate", 1, "share of the traces starting here that are sampled, 0 to 1; a caller's traceparent decides for its own trace")
}

// validate refuses what New would, naming the flag, at parse time.
func (t *tracingConfig) validate() error {
	switch strings.ToLower(t.protocol) {
	case tracing.ProtocolHTTP, tracing.ProtocolGRPC, "http/protobuf":
	default:
		return fmt.Errorf("-tracing-protocol %q: want http or grpc", t.protocol)
	}
	if math.IsNaN(t.samplingRate) || t.samplingRate < 0 || t.samplingRate > 1 {
		return fmt.Errorf("-tracing-sampling-rate %v: want a number between 0 and 1", t.samplingRate)
	}
	return nil
}

// newTracer returns the tracer the configuration asks for, or nil with
// tracing off. Export failures (a collector down) are logged as warnings
// by the SDK's error handler, which is process-wide: it is set here, in
// main's package, once. The endpoint logged is read as the exporter reads
// it, from the process environment (not run's env, which tests replace).
func newTracer(ctx context.Context, c tracingConfig, store string, logger *slog.Logger) (*tracing.Tracer, error) {
	if !c.on {
		return nil, nil
	}
	if store == "memcache" {
		store = "memcached" // db.system.name's spelling
	}
	t, err := tracing.New(ctx, tracing.Options{
		Protocol:          c.protocol,
		ServiceName:       c.serviceName,
		ServiceNamespace:  c.namespace,
		ServiceInstanceID: c.instance,
		SamplingRate:      c.samplingRate,
		Store:             store,
	})
	if err != nil {
		return nil, err
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing: exporting spans failed", "err", err)
	}))
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if endpoint == "" {
		endpoint = os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	}
	if endpoint == "" {
		endpoint = "(default) http://localhost:4318"
		if strings.EqualFold(c.protocol, tracing.ProtocolGRPC) {
			endpoint = "(default) http://localhost:4317"
		}
	}
	attrs := []any{"protocol", strings.ToLower(c.protocol), "endpoint", redactedAddr(endpoint), "sampling_rate", c.samplingRate}
	for _, kv := range t.Resource().Attributes() {
		if strings.HasPrefix(string(kv.Key), "service.") {
			attrs = append(attrs, string(kv.Key), kv.Value.Emit())
		}
	}
	logger.Info("exporting OpenTelemetry traces", attrs...)
	warnOtherProtocol(logger, c.protocol)
	return t, nil
}

// warnOtherProtocol warns when the standard protocol variable asks for
// another protocol than the one in force: the exporter is chosen by
// -tracing-protocol (TRACING_EXPORTER_PROTOCOL), as in the reference, and
// does not read it.
func warnOtherProtocol(logger *slog.Logger, protocol string) {
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v := strings.ToLower(os.Getenv(name))
		if v == "" {
			continue
		}
		if want := strings.ToLower(protocol); v != want && !(strings.HasPrefix(v, "http/") && want == tracing.ProtocolHTTP) {
			logger.Warn(name+" is not read: the OTLP protocol is -tracing-protocol's (TRACING_EXPORTER_PROTOCOL)", name, v, "protocol", want)
		}
		return
	}
}

// tracerShutdownTimeout bounds the flush of the last spans at exit.
const tracerShutdownTimeout = 5 * time.Second

// shutdownTracer flushes the spans still buffered, once the server has
// stopped answering.
func shutdownTracer(t *tracing.Tracer, logger *slog.Logger) {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), tracerShutdownTimeout)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		logger.Warn("tracing: the last spans were not all exported", "err", err)
	}
}
