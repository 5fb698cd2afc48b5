package main

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/internal/tracing"
)

// newTracer returns the tracer the configuration asks for, or nil with
// tracing off. It sets OpenTelemetry's process-wide logger and error
// handler, so that what they say goes out as the server's log lines.
func newTracer(ctx context.Context, c settings.Part[tracing.Options], storeName string, logger *slog.Logger) (*tracing.Tracer, error) {
	if !c.On {
		return nil, nil
	}
	if storeName == "memcache" {
		storeName = "memcached" // db.system.name's spelling
	}
	otel.SetLogger(logr.FromSlogHandler(otelLogLevels{logger.Handler()}))
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing: exporting spans failed", "err", err)
	}))
	opts := c.Options
	opts.Store = storeName
	t, err := tracing.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	endpoint, from := t.Endpoint()
	attrs := []any{"protocol", strings.ToLower(opts.Protocol), "endpoint", store.RedactURL(endpoint),
		"endpoint_from", cmp.Or(from, "default"), "sampling_rate", opts.SamplingRate}
	for _, kv := range t.Resource().Attributes() {
		if strings.HasPrefix(string(kv.Key), "service.") {
			attrs = append(attrs, string(kv.Key), kv.Value.Emit())
		}
	}
	logger.Info("exporting OpenTelemetry traces", attrs...)
	warnOtherProtocol(logger, opts.Protocol)
	return t, nil
}

// otelLogLevels is the slog handler under OpenTelemetry's logr logger: it
// maps OpenTelemetry's warnings (V(1), slog level -1) to Warn, its news
// (V(4)) to Debug and drops its chatter (V(8)).
type otelLogLevels struct{ slog.Handler }

func (h otelLogLevels) level(l slog.Level) (slog.Level, bool) {
	switch {
	case l >= slog.LevelInfo:
		return l, true
	case l >= slog.LevelInfo-1:
		return slog.LevelWarn, true
	case l >= slog.LevelInfo-4:
		return slog.LevelDebug, true
	}
	return l, false
}

func (h otelLogLevels) Enabled(ctx context.Context, l slog.Level) bool {
	l, ok := h.level(l)
	return ok && h.Handler.Enabled(ctx, l)
}

func (h otelLogLevels) Handle(ctx context.Context, r slog.Record) error {
	l, ok := h.level(r.Level)
	if !ok {
		return nil
	}
	r.Level = l
	r.Message = "tracing: " + r.Message
	return h.Handler.Handle(ctx, r)
}

func (h otelLogLevels) WithAttrs(attrs []slog.Attr) slog.Handler {
	return otelLogLevels{h.Handler.WithAttrs(attrs)}
}

func (h otelLogLevels) WithGroup(name string) slog.Handler {
	return otelLogLevels{h.Handler.WithGroup(name)}
}

// warnOtherProtocol warns when OTEL_EXPORTER_OTLP_*PROTOCOL asks for
// another protocol than -tracing-protocol's, which chooses it, as in the
// reference.
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
