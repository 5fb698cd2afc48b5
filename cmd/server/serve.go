package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate/floodgate/internal/capture"
	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/internal/promsink"
	"github.com/floodgate/floodgate/internal/rlqs"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/internal/tracing"
	"github.com/floodgate/floodgate/internal/ui"
	"github.com/floodgate/floodgate/pkg/envoy"
)

// app is the server being assembled: settings → rule source → store →
// service → listeners, closed in the reverse order.
type app struct {
	cfg    *settings.Config
	logger *slog.Logger
	reg    *prometheus.Registry

	rules   ruleSource
	follow  func(context.Context) error
	store   *store.Store
	statsd  *statsd.Client
	prom    *promsink.Sink // nil without -prometheus-addr
	metrics *rlsmetrics.Metrics
	tracer  *tracing.Tracer
	closers []func()
}

// refusedError is an error of a setting a part refused, worded with the
// flags and variables behind it: the program exits with code 2, not 1.
type refusedError struct{ error }

func (e refusedError) Unwrap() error { return e.error }

// refused returns err, from a part's constructor, as a refusedError.
func (a *app) refused(err error) error {
	if err == nil {
		return nil
	}
	return refusedError{a.cfg.Explain(err)}
}

// serve runs the server until ctx ends and returns the exit code: 0 after
// a shutdown, 1 when requests were cut or a part failed, 2 for a setting a
// part refused.
func serve(ctx context.Context, cfg *settings.Config, out *logOutput) int {
	a := &app{cfg: cfg, logger: out.logger, reg: prometheus.NewRegistry()}
	a.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	defer a.close()
	srv, err := a.assemble(ctx)
	if err != nil {
		out.fatal(err, "")
		if errors.As(err, new(refusedError)) {
			return 2
		}
		return 1
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := a.follow(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
			a.logger.Error("rules: watching stopped; the loaded rules stay in force", "err", err)
		}
	}()
	if err := srv.Run(ctx); err != nil {
		if !errors.Is(err, server.ErrRequestsCut) {
			// The server logged ErrRequestsCut with the count.
			a.logger.Error("server failed", "err", err)
		}
		return 1
	}
	return 0
}

// close closes the parts opened, last first.
func (a *app) close() {
	for i := len(a.closers) - 1; i >= 0; i-- {
		a.closers[i]()
	}
}

// assemble opens every part and returns the listeners, ready to run.
func (a *app) assemble(ctx context.Context) (*server.Server, error) {
	var err error
	if a.rules, a.follow, err = openRules(ctx, a.cfg, a.logger); err != nil {
		return nil, err
	}
	go releaseAfterLoads(ctx, a.rules)
	if err := a.openStore(ctx); err != nil {
		return nil, err
	}
	if err := a.openMetrics(); err != nil {
		return nil, err
	}
	if a.tracer, err = newTracer(ctx, a.cfg.Tracing, a.store.Name(), a.logger); err != nil {
		return nil, a.refused(err)
	}
	// Closed before the store: the last spans go out once the server has
	// stopped answering.
	a.closers = append(a.closers, func() { shutdownTracer(a.tracer, a.logger) })
	svc, err := a.service()
	if err != nil {
		return nil, err
	}
	return a.listeners(ctx, svc)
}

// openStore opens the counter store and its metrics.
func (a *app) openStore(ctx context.Context) error {
	opts := a.cfg.Store
	opts.Logger = a.logger
	st, err := store.Open(ctx, opts)
	if err != nil {
		return a.refused(err)
	}
	a.store = st
	a.closers = append(a.closers, st.Close)
	go st.FollowRules(ctx, a.rules.Changed)
	if err := st.Register(a.reg); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// openMetrics opens the reference's stats, when asked, and the
// Prometheus metrics.
func (a *app) openMetrics() error {
	if err := a.openStatsd(); err != nil {
		return a.refused(err)
	}
	mo := a.cfg.Metrics
	mo.Store, mo.Statsd = a.store.Name(), a.statsd
	// Only the debug listener's live page shows every rule's hot values.
	mo.KeepHotValues = a.cfg.UI && a.cfg.Server.DebugAddr != ""
	m, err := rlsmetrics.New(a.reg, mo)
	if err == nil {
		err = rlsmetrics.RegisterRuleLoads(a.reg, a.rules.Status)
	}
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	a.metrics = m
	return nil
}

// openStatsd starts the reference's statsd stats when asked: sent to a
// statsd server (-statsd), served to Prometheus (-prometheus-addr), or both.
func (a *app) openStatsd() error {
	st, promAddr := a.cfg.Statsd, a.cfg.Server.PrometheusAddr
	if !st.On && promAddr == "" {
		return nil
	}
	opts := st.Options
	opts.Logger = a.logger
	if promAddr != "" {
		po := a.cfg.Prometheus
		po.Logger = a.logger
		sink, err := promsink.New(po)
		if err != nil {
			return err
		}
		// Closed after the statsd client, whose last flush it takes.
		a.closers = append(a.closers, sink.Close)
		a.prom = sink
		opts.Sink, opts.NoServer = sink, !st.On
		mapping := cmp.Or(po.MapperFile, "the reference's own")
		a.logger.Info("serving the reference's stats to Prometheus", "addr", promAddr, "path", a.cfg.Server.PrometheusPath,
			"mapping", mapping, "flush_interval", opts.FlushInterval.String())
	}
	sd, err := statsd.New(opts)
	if err != nil {
		return err
	}
	if st.On {
		a.logger.Info("sending statsd", "addr", opts.Addr, "protocol", opts.Network, "dogstatsd", opts.DogStatsD, "flush_interval", opts.FlushInterval.String())
	}
	// Closed after the server has stopped, so the last counts go out.
	a.closers = append(a.closers, func() { sd.Close() })
	sd.RuntimeStats("ratelimit.go")
	rlsmetrics.StatsdRuleLoads(sd, a.rules.Status)
	a.statsd = sd
	return nil
}

// service returns the RLS service, recording requests when -capture asks.
func (a *app) service() (pb.RateLimitServiceServer, error) {
	opts := a.cfg.Service
	opts.Logger, opts.Metrics, opts.TracerProvider = a.logger, a.metrics, a.tracer.Provider()
	svc, err := envoy.New(a.rules.Current, a.store.Limiter(), opts)
	if err != nil {
		return nil, a.refused(err)
	}
	return a.withCapture(svc)
}

// quota returns the Rate Limit Quota Service over RLS's rules, store,
// failure mode, shadow mode and entry bound; nil when -rlqs is off or the
// store cannot keep the fleet's demand (Memcached).
func (a *app) quota() (server.QuotaService, error) {
	if !a.cfg.RLQS.On {
		return nil, nil
	}
	opts := a.cfg.RLQS.Options
	if err := a.cfg.Store.Supports(rlqs.DemandSpec(opts)); err != nil {
		a.logger.Warn("rlqs: not served: the store cannot keep the counters of the fleet's demand (docs/rlqs.md)", "store", a.store.Name(), "err", err)
		return nil, nil
	}
	svc := a.cfg.Service
	opts.FailureMode, opts.ShadowMode, opts.MaxBucketEntries = svc.FailureMode, svc.ShadowMode, svc.Bounds.MaxEntries
	opts.Logger = a.logger
	var err error
	if opts.Metrics, err = rlqs.NewMetrics(a.reg); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	q, err := rlqs.New(a.rules.Current, a.store.Limiter(), opts)
	if err != nil {
		return nil, a.refused(err)
	}
	return q, nil
}

// listeners returns the gRPC, HTTP and debug listeners of svc.
func (a *app) listeners(ctx context.Context, svc pb.RateLimitServiceServer) (*server.Server, error) {
	opts := a.cfg.Server
	opts.Logger, opts.Store, opts.Refused = a.logger, a.store.Health, a.metrics.Refused
	var debugUI http.Handler
	if a.cfg.UI {
		// One history for both pages. The HTTP listener's shows the request
		// values /metrics names (detailed_metric, value_to_metric); the
		// debug listener's, on loopback like pprof, every rule's.
		page, err := ui.New(ui.Options{Rules: a.rules.Current, RuleStatus: a.rules.Status, Gatherer: a.reg,
			Metrics: a.metrics, Store: a.store.Health, Values: rlsmetrics.HotOptedIn})
		if err != nil {
			return nil, fmt.Errorf("-ui: %w", err)
		}
		go page.Run(ctx)
		opts.UI, debugUI = page, page.WithValues(rlsmetrics.HotAll)
	}
	opts.DebugUI = withPushedFiles(debugUI, a.rules)
	if a.prom != nil {
		opts.Prometheus = a.prom.Handler()
	}
	var err error
	if opts.RLQS, err = a.quota(); err != nil {
		return nil, err
	}
	// On the debug listener only; the HTTP listener refuses it.
	if opts.Counters, err = counters.New(counters.Options{Rules: a.rules.Current, Limiter: a.store.Limiter(), Resetter: a.store,
		Logger: a.logger, Registerer: a.reg}); err != nil {
		return nil, err
	}
	if t := a.cfg.GRPCTLS; t.On {
		if opts.TLS, err = server.NewTLSConfig(t.Files, a.logger); err != nil {
			return nil, a.refused(err)
		}
	}
	srv, err := server.New(svc, a.rules.Current, a.rules.Status, a.reg, opts)
	if err == nil {
		err = srv.RegisterMetrics(a.reg)
	}
	return srv, a.refused(err)
}

// withCapture returns svc wrapped in a capture.Recorder when -capture is
// set, with its counts in the registry; the recording stops at close.
func (a *app) withCapture(svc pb.RateLimitServiceServer) (pb.RateLimitServiceServer, error) {
	cfg, logger := &a.cfg.Capture, a.logger
	if cfg.Path == "" {
		return svc, nil
	}
	opts := cfg.Options
	opts.Logger = logger
	c, err := capture.New(svc, cfg.Path, opts)
	if err != nil {
		return nil, a.refused(a.cfg.FlagError("capture", err))
	}
	for _, o := range []struct {
		outcome string
		count   func(capture.Stats) int64
	}{
		{"written", func(s capture.Stats) int64 { return s.Written }},
		{"dropped", func(s capture.Stats) int64 { return s.Dropped }},
		{"over_size", func(s capture.Stats) int64 { return s.OverSize }},
	} {
		a.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "floodgate", Name: "capture_lines_total",
			Help:        "Requests recorded by -capture (written), not recorded because the writer was behind (dropped) or the file full (over_size).",
			ConstLabels: prometheus.Labels{"outcome": o.outcome},
		}, func() float64 { return float64(o.count(c.Stats())) }))
	}
	logger.Info("recording requests for floodgate replay", "capture", cfg.Path, "sample", opts.Sample, "max_bytes", opts.MaxBytes)
	// Closed after the server has stopped, so the last requests are recorded.
	a.closers = append(a.closers, func() {
		if err := c.Close(); err != nil {
			logger.Error("capture: closing the file", "capture", cfg.Path, "err", err)
		}
		st := c.Stats()
		logger.Info("capture stopped", "capture", cfg.Path, "written", st.Written, "dropped", st.Dropped, "over_size", st.OverSize)
	})
	return c, nil
}
