// Command floodgate is an Envoy rate-limit service (RLS v3) that can replace
// envoyproxy/ratelimit: it reads the same rule files and honours the same
// environment variables.
//
//	floodgate                      serve ./config on the in-memory store
//	floodgate -redis host:6379     serve with counters in Redis
//	floodgate -check               validate the rules and exit 0 or 1
//	floodgate -explain rl k=v      show which rule a descriptor matches
//
// Flags win over environment variables; see the README for the table. This
// file only assembles the parts: rules (pkg/rules), a limiter (pkg/limit or
// pkg/redislimit), the service (pkg/envoy) and the listeners (pkg/server).
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
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/pkg/denycache"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/memcachelimit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
	"github.com/floodgate/floodgate/pkg/statsd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code. ctx ends the server
// (SIGTERM, SIGINT).
func run(ctx context.Context, args []string, env lookupFunc, stdout, stderr io.Writer) int {
	cfg, err := parseConfig(args, env, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 2
	}
	logger := newLogger(cfg, stderr)
	ruleOpts := rules.Options{MergeDomains: cfg.mergeDomains}
	if cfg.memcache.on() {
		// Memcached counts fixed windows only: refuse other rules at load.
		ruleOpts.Check = memcachelimit.CheckRules
	}

	switch {
	case cfg.check:
		if rules.Check(stdout, cfg.rulesPath, ruleOpts) != nil {
			return 1
		}
		return 0
	case cfg.explain:
		return explain(stdout, stderr, cfg, ruleOpts)
	}

	for _, n := range cfg.notes {
		logger.Warn(n)
	}
	watcher, err := rules.NewWatcher(cfg.rulesPath, ruleOpts, logger)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: refusing to start, cannot load the rules in %s:\n%v\n", cfg.rulesPath, err)
		return 1
	}

	limiter, store, storeHealth, closeStore, err := newLimiter(ctx, cfg, logger)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 2
	}
	defer closeStore()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if storeHealth != nil {
		registerStoreHealthMetrics(reg, storeHealth)
	}
	if store == "redis" && cfg.denyCache {
		cache := denycache.New(limiter, denycache.Options{MaxEntries: cfg.denyCacheSize, MaxAge: cfg.denyCacheMaxAge})
		registerDenyCacheMetrics(reg, cache)
		go flushOnReload(ctx, watcher, cache)
		limiter = cache
	}
	sd, err := newStatsd(cfg.statsd, env, logger)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 2
	}
	if sd != nil {
		// Closed after the server has stopped, so the last counts go out.
		defer sd.Close()
		sd.RuntimeStats("ratelimit.go")
		envoy.StatsdRuleLoads(sd, watcher.Status)
	}
	metrics, err := envoy.NewMetrics(reg, envoy.MetricsOptions{Store: store, MaxValueSeries: cfg.metricValueSeries, Statsd: sd})
	if err == nil {
		err = server.RegisterRuleMetrics(reg, watcher)
	}
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: metrics: %v\n", err)
		return 1
	}

	svc, err := envoy.New(watcher, limiter, envoy.Options{
		ShadowMode:      cfg.shadowMode,
		DynamicMetadata: cfg.dynMetadata,
		NearLimitRatio:  cfg.nearLimitRatio,
		StoreTimeout:    cfg.redisDeadline,
		FailureMode:     cfg.failureMode,
		Headers:         cfg.headers,
		OverLimitBody:   cfg.overLimitBody,
		Logger:          logger,
		Metrics:         metrics,
		Bounds:          cfg.bounds,
	})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 2
	}
	var tlsConfig *tls.Config
	if cfg.grpcTLS {
		tlsConfig, err = server.NewTLSConfig(server.TLSFiles{CertFile: cfg.grpcTLSCert, KeyFile: cfg.grpcTLSKey, ClientCAFile: cfg.grpcClientCA, ClientSAN: cfg.grpcClientSAN}, logger)
		if err != nil {
			fmt.Fprintf(stderr, "floodgate: %v\n", err)
			return 2
		}
	}
	srv, err := server.New(svc, watcher, reg, server.Options{
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
		Store:                 storeHealth,
		StoreReadiness:        map[bool]server.StoreReadiness{true: server.StoreAlways}[cfg.healthRequiresStore],
		HealthRequiresRules:   cfg.healthRequiresRules,
	})
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 2
	}

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		if err := watcher.Run(watchCtx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("rules: watching stopped; the loaded rules stay in force", "err", err)
		}
	}()

	if err := srv.Run(ctx); err != nil {
		logger.Error("server failed", "err", err)
		return 1
	}
	return 0
}

// newLimiter returns the store: Redis when configured (with a second
// Redis for the per-second limits when -redis-persecond is set), else the
// in-memory twin, with the name used in metrics, its health (nil for
// memory, always there) and a function releasing it.
func newLimiter(ctx context.Context, cfg *config, logger *slog.Logger) (envoy.Limiter, string, func() server.StoreHealth, func(), error) {
	if cfg.memcache.on() {
		return newMemcache(ctx, cfg, logger)
	}
	if cfg.redis.url == "" {
		logger.Warn("no Redis configured (-redis, REDIS_URL): counters are kept in this process's memory, not shared with other instances and lost on restart")
		return limit.NewMemory(limit.MemoryOptions{MaxEntries: cfg.memoryMaxEntries}), "memory", nil, func() {}, nil
	}
	// go-redis logs each failed dial; floodgate already reports store
	// failures once a second with a count, so its lines go to debug.
	redislimit.QuietLogs(logger)
	var stores []*redisStore
	closeAll := func() {
		for _, st := range stores {
			st.client.Close()
		}
	}
	for _, part := range []struct {
		role string
		rs   *redisSettings
	}{{"main", &cfg.redis}, {"per-second", &cfg.perSecond}} {
		if part.rs.url == "" {
			continue
		}
		st, err := openRedis(cfg, part.role, part.rs)
		if err != nil {
			closeAll()
			return nil, "", nil, nil, err
		}
		stores = append(stores, st)
		msg := "counters are kept in Redis"
		if part.role != "main" {
			msg = "the counters of windows shorter than a minute are kept in the per-second Redis"
		}
		logger.Info(msg, st.logAttrs("type", part.rs.typ, "tls", part.rs.tlsOn(), "deadline", cfg.redisDeadline,
			"script_sha", redislimit.ScriptSHA())...)
	}
	var lim envoy.Limiter = stores[0].lim
	if len(stores) == 2 {
		split, err := redislimit.NewSplit(stores[0].lim, stores[1].lim, redislimit.PerSecond)
		if err != nil {
			closeAll()
			return nil, "", nil, nil, fmt.Errorf("redis: %w", err)
		}
		lim = split
	}
	// Probed together, so that two Redis that do not answer delay the
	// start by one probe's timeout, not two.
	var wg sync.WaitGroup
	for _, st := range stores {
		wg.Go(func() {
			probeCtx, cancel := context.WithTimeout(ctx, startProbeTimeout)
			err := st.lim.Probe(probeCtx)
			cancel()
			if err != nil {
				logger.Error("Redis cannot be used: until it can, requests that need it are answered by the failure policy (each rule's failure_mode, else -failure-mode), the store is reported unhealthy (/rlconfig, floodgate_store_healthy 0), and Redis is probed every second",
					st.logAttrs("err", err)...)
			}
		})
	}
	wg.Wait()
	for _, st := range stores {
		go watchStore(ctx, st.lim, "Redis", st.logAttrs(), logger, storeProbeInterval)
	}
	return lim, "redis", func() server.StoreHealth { return storesHealth(stores, time.Now()) }, closeAll, nil
}

// storesHealth is the health of the Redis deployments holding the
// counters: healthy while every one is, since a call may need any; with
// several, the detail names each by its role and address, so that
// /rlconfig says which one fails.
func storesHealth(stores []*redisStore, now time.Time) server.StoreHealth {
	if len(stores) == 1 {
		return server.StoreHealth{Name: "redis", Healthy: stores[0].lim.Healthy(), Detail: storeDetail(stores[0].lim, now, "; ")}
	}
	h := server.StoreHealth{Name: "redis", Healthy: true}
	parts := make([]string, len(stores))
	for i, st := range stores {
		h.Healthy = h.Healthy && st.lim.Healthy()
		parts[i] = st.role + " " + st.addr + ": " + storeDetail(st.lim, now, ", ")
	}
	h.Detail = strings.Join(parts, "; ")
	return h
}

// redisStore is one Redis deployment the counters are kept in.
type redisStore struct {
	role   string // "main" or "per-second", in logs and /rlconfig
	addr   string // its address, credentials redacted
	client redis.UniversalClient
	lim    *redislimit.Limiter
}

// openRedis returns the client and Limiter of one Redis deployment,
// without contacting it; its errors name the role of the deployment.
func openRedis(cfg *config, role string, rs *redisSettings) (*redisStore, error) {
	what := "redis"
	if role != "main" {
		what = role + " redis"
	}
	files := cfg.redisTLSFiles
	if !rs.tlsOn() {
		// Shared with the other Redis, which may be the one with TLS.
		files = redislimit.TLSFiles{}
	}
	user, pass := rs.credentials()
	client, err := redislimit.NewClient(redislimit.ClientConfig{
		URL:              rs.url,
		Type:             rs.typ,
		SentinelMaster:   rs.sentinelMaster,
		Username:         user,
		Password:         pass,
		SentinelPassword: rs.sentinelAuth,
		TLS:              rs.tls,
		TLSFiles:         files,
		PoolSize:         rs.poolSize,
		DialTimeout:      rs.dialTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	lim, err := redislimit.New(client, redislimit.Options{KeyPrefix: cfg.keyPrefix, Timeout: cfg.redisDeadline})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &redisStore{role: role, addr: redactedAddr(rs.url), client: client, lim: lim}, nil
}

// logAttrs returns the attributes that name the store in a log line,
// followed by more.
func (st *redisStore) logAttrs(more ...any) []any {
	return append([]any{"redis", st.role, "addr", st.addr}, more...)
}

// startProbeTimeout bounds the probe of Redis at start; storeProbeInterval
// is how often Redis is probed while unhealthy.
const (
	startProbeTimeout  = 2 * time.Second
	storeProbeInterval = time.Second
)

// storeDetail describes a limiter's health for /rlconfig: the breaker's
// state and, if Redis ever failed, sep and the latest failure.
func storeDetail(lim *redislimit.Limiter, now time.Time, sep string) string {
	d := "breaker " + lim.BreakerState().String()
	if at, err := lim.LastFailure(); err != nil {
		d += fmt.Sprintf("%slast failure %v ago: %v", sep, now.Sub(at).Round(time.Second), err)
	}
	return d
}

// probedStore is a counter store whose health watchStore follows:
// *redislimit.Limiter and *memcachelimit.Limiter.
type probedStore interface {
	Healthy() bool
	Probe(ctx context.Context) error
	LastFailure() (time.Time, error)
}

// watchStore probes a store every interval while it is unhealthy, so that
// health follows it without waiting for requests (with no traffic the
// circuit breaker would never probe), and logs each change, with attrs
// naming the store: at error level with the cause when it starts failing,
// at info level when it answers again. It returns when ctx ends.
func watchStore(ctx context.Context, lim probedStore, name string, attrs []any, logger *slog.Logger, interval time.Duration) {
	healthy := lim.Healthy()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !lim.Healthy() {
			probeCtx, cancel := context.WithTimeout(ctx, interval)
			_ = lim.Probe(probeCtx) // the outcome is read from lim
			cancel()
		}
		now := lim.Healthy()
		switch {
		case now && !healthy:
			logger.Info(name+" answers again: requests are decided by their limits", attrs...)
		case !now && healthy:
			_, err := lim.LastFailure()
			logger.Error(name+" fails: requests that need it are answered by the failure policy until it answers again", append(attrs, "err", err)...)
		}
		healthy = now
	}
}

// registerStoreHealthMetrics exposes the store's health: 1 while calls
// reach it, 0 while its circuit breaker fails them at once.
func registerStoreHealthMetrics(reg prometheus.Registerer, health func() server.StoreHealth) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "store_healthy",
		Help: "1 while calls reach the limit store, 0 while its circuit breaker is open or probing (answers then come from the failure policy)."},
		func() float64 {
			if health().Healthy {
				return 1
			}
			return 0
		}))
}

// flushOnReload flushes the deny cache each time the rules change, until
// ctx ends. A denial is a fact about a counter under one spec, which a spec
// change never matches anyway; flushing also covers what a reload changes
// around the spec.
func flushOnReload(ctx context.Context, w *rules.Watcher, cache *denycache.Cache) {
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

// redactedAddr drops credentials from a Redis URL for logs.
func redactedAddr(u string) string {
	if i := strings.LastIndex(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
		return "***@" + u[i+1:]
	}
	return u
}

// explain prints which rule -explain's descriptor matches.
func explain(stdout, stderr io.Writer, cfg *config, opts rules.Options) int {
	set, err := rules.Load(cfg.rulesPath, opts)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: cannot load the rules in %s:\n%v\n", cfg.rulesPath, err)
		return 1
	}
	domain := cfg.args[0]
	var entries []rules.Entry
	for _, a := range cfg.args[1:] {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			fmt.Fprintf(stderr, "floodgate: -explain entry %q: want key=value\n", a)
			return 2
		}
		entries = append(entries, rules.Entry{Key: k, Value: v})
	}
	fmt.Fprint(stdout, set.Explain(domain, entries).String())
	return 0
}

// newLogger builds the process logger from -log-level and -log-format.
func newLogger(cfg *config, w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.logLevel}
	if cfg.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
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

// newMemcache returns the Memcached store, probed once at start (a failure
// is logged and reported unhealthy, and requests get the failure policy)
// and again every storeProbeInterval while unhealthy.
func newMemcache(ctx context.Context, cfg *config, logger *slog.Logger) (envoy.Limiter, string, func() server.StoreHealth, func(), error) {
	m := &cfg.memcache
	var tc *tls.Config
	if m.tls {
		var err error
		if tc, err = m.files.Config("memcached"); err != nil {
			return nil, "", nil, nil, fmt.Errorf("memcache: %w", err)
		}
	}
	lim, err := memcachelimit.New(ctx, memcachelimit.Options{
		Servers: m.serverList(), SRV: m.srv, SRVRefresh: m.srvRefresh, MaxIdleConns: m.maxIdle,
		TLS: tc, KeyPrefix: cfg.keyPrefix, Timeout: cfg.redisDeadline,
	})
	if err != nil {
		return nil, "", nil, nil, fmt.Errorf("memcache: %w", err)
	}
	logger.Info("counters are kept in Memcached (fixed windows only)", "servers", lim.Servers(), "srv", m.srv, "tls", m.tls, "deadline", cfg.redisDeadline)
	probe := func() error {
		probeCtx, cancel := context.WithTimeout(ctx, startProbeTimeout)
		defer cancel()
		return lim.Probe(probeCtx)
	}
	if err := probe(); err != nil {
		logger.Error("Memcached cannot be used: until it can, requests are answered by the failure policy and the store is reported unhealthy", "err", err)
	}
	go watchStore(ctx, lim, "Memcached", []any{"servers", lim.Servers()}, logger, storeProbeInterval)
	health := func() server.StoreHealth {
		h := server.StoreHealth{Name: "memcache", Healthy: lim.Healthy(), Detail: "servers " + strings.Join(lim.Servers(), ",")}
		if at, err := lim.LastFailure(); err != nil {
			h.Detail += fmt.Sprintf("; last failure %v ago: %v", time.Since(at).Round(time.Second), err)
		}
		return h
	}
	return lim, "memcache", health, func() { lim.Close() }, nil
}
