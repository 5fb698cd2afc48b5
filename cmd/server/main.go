// Command floodgate is an Envoy rate-limit service (RLS v3) that can replace
// envoyproxy/ratelimit: it reads the same rule files and honours the same
// environment variables.
//
//	floodgate [serve]                  serve ./config on the in-memory store
//	floodgate -redis host:6379         serve with counters in Redis
//	floodgate check                    validate the rules and exit 0 or 1 (also -check)
//	floodgate explain rl k=v           show which rule a descriptor matches (also -explain)
//	floodgate version                  print the version and commit (also -version)
//	floodgate replay -old D -new D -traffic F   rehearse a rule edit on recorded traffic (replay.go)
//	floodgate -h                       every flag by section, with its default and variables
//
// A flag wins over its FLOODGATE_* variable, which wins over the reference
// server's; an override of a variable that is set is logged. The rule path
// falls back last to FLOODGATE_DEFAULT_CONFIG, which the image sets to its
// demo rules. A bad flag or variable is one error line, exit code 2. All
// output to stderr is in the log format asked for, credentials hidden (see
// docs/operations.md).
//
// This package only assembles the parts: rules (pkg/rules), a limiter
// (pkg/limit, pkg/redislimit or pkg/memcachelimit, store.go), the service
// (pkg/envoy) and the listeners (pkg/server); the command line is in
// config.go, reference.go, flagvalues.go and usage.go, the logs in
// logging.go.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/floodgate/floodgate/pkg/denycache"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/memcachelimit"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
	"github.com/floodgate/floodgate/pkg/statsd"
)

func main() {
	applyGCDefault(os.LookupEnv, "/")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code. ctx ends the server
// (SIGTERM, SIGINT). Everything it reports goes to stderr in the log format
// asked for, with credentials hidden; stdout gets only what a command
// prints (-h, -version, -check, -explain).
func run(ctx context.Context, args []string, env lookupFunc, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "replay" {
		// Its own flags: it serves nothing and reads no environment.
		return replayCommand(ctx, args[1:], stdout, stderr)
	}
	args = commandArgs(args)
	hide := newRedactor(args, env)
	cfg, err := parseConfig(args, env)
	if errors.Is(err, flag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	if err != nil {
		newLogOutput(stderr, startFormat(args, env), slog.LevelInfo, hide).fatal(err, flagHint)
		return 2
	}
	if cfg.version {
		fmt.Fprintln(stdout, version())
		return 0
	}
	out := newLogOutput(stderr, cfg.logFormat, cfg.logLevel, hide)
	logger := out.logger
	ruleOpts := rules.Options{MergeDomains: cfg.mergeDomains}
	if cfg.memcache.on() {
		// Memcached counts fixed windows only: refuse other rules at load.
		ruleOpts.Check = memcachelimit.CheckRules
	}

	logNotes(logger, cfg)
	if cfg.check || cfg.explain {
		if err := offlineRules(cfg); err != nil {
			out.fatal(err, "")
			return 1
		}
	}
	switch {
	case cfg.check:
		if rules.Check(stdout, cfg.rulesPath, ruleOpts) != nil {
			return 1
		}
		return 0
	case cfg.explain:
		return explain(stdout, out, cfg, ruleOpts)
	}

	logRulesOrigin(logger, cfg)
	logGC(logger, env)
	watcher, followRules, err := openRules(ctx, cfg, ruleOpts, logger)
	if err != nil {
		out.fatal(err, "")
		return 1
	}
	go releaseAfterLoads(ctx, watcher)

	store, err := newStore(ctx, cfg, logger)
	if err != nil {
		out.fatal(err, "")
		return 2
	}
	defer store.close()
	limiter := store.limiter

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store.registerMetrics(reg)
	if store.name == "redis" && cfg.denyCache {
		cache := denycache.New(limiter, denycache.Options{MaxEntries: cfg.denyCacheSize, MaxAge: cfg.denyCacheMaxAge})
		registerDenyCacheMetrics(reg, cache)
		go flushOnReload(ctx, watcher, cache)
		limiter = cache
	}
	sd, err := newStatsd(cfg.statsd, env, logger)
	if err != nil {
		out.fatal(err, "")
		return 2
	}
	if sd != nil {
		// Closed after the server has stopped, so the last counts go out.
		defer sd.Close()
		sd.RuntimeStats("ratelimit.go")
		envoy.StatsdRuleLoads(sd, watcher.Status)
	}
	metrics, err := envoy.NewMetrics(reg, envoy.MetricsOptions{Store: store.name, MaxValueSeries: cfg.metricValueSeries, Statsd: sd})
	if err == nil {
		err = server.RegisterRuleMetrics(reg, watcher)
	}
	if err != nil {
		out.fatal(fmt.Errorf("metrics: %w", err), "")
		return 1
	}

	tracer, err := newTracer(ctx, cfg.tracing, store.name, logger)
	if err != nil {
		out.fatal(err, "")
		return 2
	}
	// Deferred after the store's close, so run first: the last spans go
	// out once the server has stopped answering.
	defer shutdownTracer(tracer, logger)

	svc, err := envoy.New(watcher, limiter, envoy.Options{
		ShadowMode:         cfg.shadowMode,
		DynamicMetadata:    cfg.dynMetadata,
		NearLimitRatio:     cfg.nearLimitRatio,
		StoreTimeout:       cfg.redisDeadline,
		FailureMode:        cfg.failureMode,
		Headers:            cfg.headers,
		OverLimitBody:      cfg.overLimitBody,
		StoreFailureHeader: cfg.storeFailureHeader,
		Logger:             logger,
		Metrics:            metrics,
		Tracer:             tracer,
		Bounds:             cfg.bounds,
	})
	if err != nil {
		out.fatal(err, "")
		return 2
	}
	pages, err := newUI(cfg, watcher, reg, metrics, store.readiness(cfg))
	if err != nil {
		out.fatal(err, "")
		return 1
	}
	var tlsConfig *tls.Config
	if cfg.grpcTLS {
		tlsConfig, err = server.NewTLSConfig(server.TLSFiles{CertFile: cfg.grpcTLSCert, KeyFile: cfg.grpcTLSKey, ClientCAFile: cfg.grpcClientCA, ClientSAN: cfg.grpcClientSAN}, logger)
		if err != nil {
			out.fatal(err, "")
			return 2
		}
	}
	rls, stopCapture, err := withCapture(svc, cfg, reg, logger)
	if err != nil {
		out.fatal(err, "")
		return 2
	}
	// After the server has stopped, so the last requests are recorded.
	defer stopCapture()
	srv, err := server.New(rls, watcher, reg, server.Options{
		GRPCAddr:              cfg.grpcAddr,
		HTTPAddr:              cfg.httpAddr,
		DebugAddr:             cfg.debugAddr,
		MaxConnectionAge:      cfg.grpcMaxConnAge,
		MaxConnectionAgeGrace: cfg.grpcMaxConnAgeGrace,
		DrainDelay:            cfg.drainDelay,
		ShutdownTimeout:       cfg.shutdownTimeout,
		Logger:                logger,
		MaxMessageBytes:       cfg.maxMessageBytes,
		TLS:                   tlsConfig,
		Store:                 store.readiness(cfg),
		StoreReadiness:        cfg.storeReadiness(),
		HealthRequiresRules:   cfg.healthRequiresRules,
		Conns:                 cfg.conns,
		Refused:               metrics.Refused,
		UI:                    pages.http,
		DebugUI:               withPushedFiles(pages.debug, watcher),
	})
	if err == nil {
		err = srv.RegisterMetrics(reg)
	}
	if err != nil {
		out.fatal(err, "")
		return 2
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := followRules(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("rules: watching stopped; the loaded rules stay in force", "err", err)
		}
	}()

	if err := srv.Run(ctx); err != nil {
		if errors.Is(err, server.ErrRequestsCut) {
			// Logged by the server with the count; the exit code tells
			// the supervisor that answers were lost.
			return 1
		}
		logger.Error("server failed", "err", err)
		return 1
	}
	return 0
}

// logNotes logs, once each, the remarks about the configuration.
func logNotes(logger *slog.Logger, cfg *config) {
	seen := map[string]bool{}
	for _, n := range cfg.notes {
		if !seen[n] {
			seen[n] = true
			logger.Warn(n)
		}
	}
}

// logRulesOrigin says where the rules come from when a default chose them,
// so that an operator who meant RUNTIME_ROOT sees it was not set.
func logRulesOrigin(logger *slog.Logger, cfg *config) {
	if cfg.xds.on {
		return // openRules says where they come from
	}
	switch cfg.rulesFrom {
	case defaultConfigVar:
		logger.Info("rules from "+defaultConfigVar+", the image's demo rules: mount yours at "+referenceDefaultDir+", or set RUNTIME_ROOT (with RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY as needed) or -config", "path", cfg.rulesPath)
	case referenceDefaultFrom:
		logger.Info("rules from "+referenceDefaultFrom+" (no RUNTIME_* variable set), as the reference server reads them", "path", cfg.rulesPath)
	case "":
		logger.Info("rules from -config's default: set RUNTIME_ROOT (with RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY as needed) or -config for others", "path", cfg.rulesPath)
	}
}

// flushOnReload flushes the deny cache each time the rules change, until
// ctx ends. A denial is a fact about a counter under one spec, which a spec
// change never matches anyway; flushing also covers what a reload changes
// around the spec.
func flushOnReload(ctx context.Context, w ruleSource, cache *denycache.Cache) {
	for {
		select {
		case <-w.Changed():
			cache.Flush()
		case <-ctx.Done():
			return
		}
	}
}

// registerDenyCacheMetrics exposes the deny cache's counts.
func registerDenyCacheMetrics(reg prometheus.Registerer, cache *denycache.Cache) {
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "deny_cache_answers_total",
			Help: "Store calls answered from the deny cache, without Redis."},
			func() float64 { return float64(cache.Stats().Answered) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "deny_cache_misses_total",
			Help: "Store calls the deny cache passed to Redis."},
			func() float64 { return float64(cache.Stats().Evaluated) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "deny_cache_entries",
			Help: "Denials held by the deny cache, expired ones included until swept."},
			func() float64 { return float64(cache.Len()) }),
	)
}

// explain prints which rule -explain's descriptor matches.
func explain(stdout io.Writer, out *logOutput, cfg *config, opts rules.Options) int {
	set, err := rules.Load(cfg.rulesPath, opts)
	if err != nil {
		out.fatal(fmt.Errorf("cannot load the rules in %s:\n%w", cfg.rulesPath, err), "")
		return 1
	}
	domain := cfg.args[0]
	var entries []rules.Entry
	for _, a := range cfg.args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			out.fatal(fmt.Errorf("-explain entry %q: want key=value", a), flagHint)
			return 2
		}
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	fmt.Fprint(stdout, set.Explain(domain, entries).String())
	return 0
}

// newStatsd returns the statsd client the configuration asks for, or nil
// when statsd is off. Mogrifiers read their DOG_STATSD_MOGRIFIER_* variables
// from env, as the reference does.
func newStatsd(c statsdConfig, env lookupFunc, logger *slog.Logger) (*statsd.Client, error) {
	if !c.on && !c.dog {
		return nil, nil
	}
	tags, err := statsd.ParseTags(c.tags)
	if err != nil {
		return nil, fmt.Errorf("-statsd-tags (EXTRA_TAGS): %w", err)
	}
	var mogs []statsd.Mogrifier
	if c.mogrifiers != "" {
		if !c.dog {
			return nil, errors.New("-dogstatsd-mogrifiers (USE_DOG_STATSD_MOGRIFIERS) needs -dogstatsd (USE_DOG_STATSD=true)")
		}
		if mogs, err = statsd.MogrifiersFromEnv(c.mogrifiers, env); err != nil {
			return nil, fmt.Errorf("-dogstatsd-mogrifiers (USE_DOG_STATSD_MOGRIFIERS): %w", err)
		}
	}
	network := c.protocol
	if network == "" {
		network = "tcp"
		if c.dog {
			network = "udp"
		}
	}
	if c.flush <= 0 {
		return nil, fmt.Errorf("-statsd-flush-interval (STATS_FLUSH_INTERVAL) %v: must be positive", c.flush)
	}
	sd, err := statsd.New(statsd.Options{
		Addr: c.addr, Network: network, FlushInterval: c.flush, Tags: tags,
		DogStatsD: c.dog, Mogrifiers: mogs, Logger: logger,
	})
	if err != nil {
		return nil, fmt.Errorf("statsd: %w", err)
	}
	logger.Info("sending statsd", "addr", c.addr, "protocol", network, "dogstatsd", c.dog, "flush_interval", c.flush.String())
	return sd, nil
}
