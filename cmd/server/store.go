package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/memcachelimit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/server"
)

// counterStore is where the counters are kept, as the rest of the program
// needs it.
type counterStore struct {
	limiter limit.Limiter
	name    string // "memory", "redis" or "memcache", in metrics
	// health is nil for memory, which is always there.
	health func() server.StoreHealth
	// reached reports whether the store has answered at least once since
	// start (a probe succeeded); nil for memory. A store never reached is
	// most likely a wrong address or password rather than an outage.
	reached func() bool
	close   func()
	// collectors are more metrics of the store: each Redis node's health.
	collectors []prometheus.Collector
}

// readiness returns the store's health as the listeners read it
// (server.Options.Store): for Redis and Memcached, their health and whether
// they have answered since start; for memory, the count of counters held.
func (s *counterStore) readiness(cfg *settings.Config) func() server.StoreHealth {
	if s.health == nil {
		var counters server.Counters
		if mem, ok := s.limiter.(*limit.Memory); ok {
			counters = mem
		}
		maxEntries := cfg.Store.MemoryMaxEntries
		if maxEntries <= 0 {
			maxEntries = limit.DefaultMaxEntries
		}
		return server.MemoryStore(counters, maxEntries)
	}
	return func() server.StoreHealth {
		h := s.health()
		h.Reached = s.reached()
		return h
	}
}

// Probe intervals: the first probe at start is bounded by startProbeTimeout;
// then the store is probed every sickProbeInterval while unhealthy, so that
// health follows it without waiting for requests (with no traffic the
// circuit breaker would never probe), and every idleProbeInterval while
// healthy, so that a store that dies under a quiet instance is reported.
const (
	startProbeTimeout = 2 * time.Second
	sickProbeInterval = time.Second
	idleProbeInterval = 5 * time.Second
)

// newStore returns the store: Memcached or Redis when configured (with a
// second Redis for the per-second limits when -redis-persecond is set),
// else the in-memory twin. The Redis and Memcached stores are probed
// before it returns and watched until ctx ends.
func newStore(ctx context.Context, cfg *settings.Config, logger *slog.Logger) (*counterStore, error) {
	if m := cfg.Store.Memcache; m.Servers != "" || m.SRV != "" {
		return newMemcache(ctx, cfg, logger)
	}
	if cfg.Store.Redis.URL == "" {
		logger.Warn("no Redis configured (-redis, REDIS_URL): counters are kept in this process's memory, not shared with other instances and lost on restart")
		mem := limit.NewMemory(limit.MemoryOptions{MaxEntries: cfg.Store.MemoryMaxEntries, Logger: logger})
		return &counterStore{limiter: mem, name: "memory", close: func() {}}, nil
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
		rs   *store.RedisOptions
	}{{"main", &cfg.Store.Redis}, {"per-second", &cfg.Store.PerSecond}} {
		if part.rs.URL == "" {
			continue
		}
		st, err := openRedis(cfg, part.role, part.rs, logger)
		if err != nil {
			closeAll()
			return nil, err
		}
		stores = append(stores, st)
		msg := "counters are kept in Redis"
		if part.role != "main" {
			msg = "the counters of windows shorter than a minute are kept in the per-second Redis"
		}
		attrs := []any{"type", part.rs.Type, "tls", tlsOn(part.rs), "deadline", cfg.Store.Deadline}
		// The pipeline settings only when set, as the reference's
		// variables set them.
		if part.rs.PipelineWindow > 0 {
			attrs = append(attrs, "pipeline_window", part.rs.PipelineWindow)
		}
		if part.rs.PipelineLimit > 0 {
			attrs = append(attrs, "pipeline_limit", part.rs.PipelineLimit)
		}
		attrs = append(attrs, "script_sha", redislimit.ScriptSHA(), "function", redislimit.FunctionName())
		logger.Info(msg, st.logAttrs(attrs...)...)
	}
	var lim limit.Limiter = stores[0].lim
	if len(stores) == 2 {
		split, err := redislimit.NewSplit(stores[0].lim, stores[1].lim, redislimit.PerSecond)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("redis: %w", err)
		}
		lim = split
	}
	// Probed together, so that two Redis that do not answer delay the
	// start by one probe's timeout, not two.
	var wg sync.WaitGroup
	for _, st := range stores {
		wg.Go(func() {
			if err := st.watch.probe(ctx, startProbeTimeout); err != nil {
				logger.Error("Redis cannot be used: until it can, requests that need it are answered by the failure policy (each rule's failure_mode, else -failure-mode), the store is reported unhealthy (/rlconfig, floodgate_store_healthy 0), and Redis is probed every second",
					st.logAttrs("err", err)...)
			}
		})
	}
	wg.Wait()
	for _, st := range stores {
		go st.watch.run(ctx, sickProbeInterval, idleProbeInterval)
	}
	return &counterStore{
		limiter: lim, name: "redis", close: closeAll,
		collectors: []prometheus.Collector{nodeCollector{stores: stores, desc: nodeHealthyDesc}},
		health:     func() server.StoreHealth { return storesHealth(stores, time.Now()) },
		reached: func() bool {
			for _, st := range stores {
				if !st.watch.Reached() {
					return false
				}
			}
			return true
		},
	}, nil
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
	watch  *storeWatch
}

// openRedis returns the client and Limiter of one Redis deployment,
// without contacting it; its errors name the role of the deployment.
func openRedis(cfg *settings.Config, role string, rs *store.RedisOptions, logger *slog.Logger) (*redisStore, error) {
	what := "redis"
	if role != "main" {
		what = role + " redis"
	}
	files := cfg.Store.RedisTLSFiles
	if !tlsOn(rs) {
		// Shared with the other Redis, which may be the one with TLS.
		files = redislimit.TLSFiles{}
	}
	user, pass := credentials(rs)
	client, err := redislimit.NewClient(redislimit.ClientConfig{
		URL:              rs.URL,
		Type:             rs.Type,
		SentinelMaster:   rs.SentinelMaster,
		Username:         user,
		Password:         pass,
		SentinelPassword: rs.SentinelAuth,
		TLS:              rs.TLS,
		TLSFiles:         files,
		PoolSize:         rs.PoolSize,
		DialTimeout:      rs.DialTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	lim, err := redislimit.New(client, redislimit.Options{KeyPrefix: cfg.Store.KeyPrefix, Timeout: cfg.Store.Deadline, Logger: logger,
		Batch: redislimit.BatchOptions{Window: rs.PipelineWindow, MaxRequests: rs.PipelineLimit}})
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	st := &redisStore{role: role, addr: settings.RedactURL(rs.URL), client: client, lim: lim}
	st.watch = &storeWatch{store: lim, name: "Redis", attrs: st.logAttrs(), logger: logger}
	if rs.Type == "cluster" {
		st.watch.nodes = lim.Nodes
	}
	if rs.Type == "cluster" && (rs.PipelineWindow > 0 || rs.PipelineLimit > 0) {
		// Each Cluster call goes to its node at once, unbatched. The
		// reference requires a window or limit with Cluster, so migrated
		// settings have them: worth a line, not a warning.
		logger.Info("the pipeline window and limit have no effect on Redis Cluster: each request goes to its node at once", st.logAttrs(
			"window", rs.PipelineWindow, "limit", rs.PipelineLimit)...)
	}
	return st, nil
}

// logAttrs returns the attributes that name the store in a log line,
// followed by more.
func (st *redisStore) logAttrs(more ...any) []any {
	return append([]any{"redis", st.role, "addr", st.addr}, more...)
}

// storeDetail describes a limiter's health for /rlconfig: the breaker's
// state and, if Redis ever failed, sep and the latest failure; on a
// Cluster, the same for the slot map and then for each master with its
// slots, so that /rlconfig names the master that fails.
func storeDetail(lim *redislimit.Limiter, now time.Time, sep string) string {
	nodes := lim.Nodes()
	var parts []string
	for _, n := range nodes {
		d := "breaker " + n.Breaker.String()
		if n.LastFailure != nil {
			d += fmt.Sprintf("%slast failure %v ago: %v", sep, now.Sub(n.LastFailureAt).Round(time.Second), n.LastFailure)
		}
		switch {
		case n.Addr != "":
			d = "master " + n.Addr + slotsOf(n) + ": " + d
		case len(nodes) > 1:
			d = "slot map: " + d
		}
		parts = append(parts, d)
	}
	return strings.Join(parts, "; ")
}

// slotsOf is " (slots 0-5460)" for a Cluster master whose slots are known.
func slotsOf(n redislimit.NodeHealth) string {
	if n.Slots == "" {
		return ""
	}
	return " (slots " + n.Slots + ")"
}

// probedStore is a counter store whose health storeWatch follows:
// *redislimit.Limiter and *memcachelimit.Limiter. A failed Probe makes it
// unhealthy at once, a successful one healthy.
type probedStore interface {
	Healthy() bool
	Probe(ctx context.Context) error
	LastFailure() (time.Time, error)
}

// storeWatch follows the health of one store and logs each change, with
// attrs naming the store: at error level with the cause when it starts
// failing, at info level when it answers again; one line per change.
type storeWatch struct {
	store  probedStore
	name   string // "Redis" or "Memcached"
	attrs  []any
	logger *slog.Logger
	// nodes, for a Redis Cluster, returns the health of its masters, so
	// that each one's failure and recovery is logged naming it; nil
	// otherwise.
	nodes func() []redislimit.NodeHealth
	// timeout bounds each probe of run; 0 is sickProbeInterval.
	timeout time.Duration
	reached atomic.Bool
}

func (w *storeWatch) probeTimeout() time.Duration {
	if w.timeout > 0 {
		return w.timeout
	}
	return sickProbeInterval
}

// Reached reports whether a probe of the store has succeeded since start.
func (w *storeWatch) Reached() bool { return w.reached.Load() }

// probe probes the store once, within timeout.
func (w *storeWatch) probe(ctx context.Context, timeout time.Duration) error {
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := w.store.Probe(probeCtx)
	if err == nil {
		w.reached.Store(true)
	}
	return err
}

// run probes the store every sick while it is unhealthy and every idle
// while it is healthy, and logs each change of its health, whether a probe
// or a request saw it. It returns when ctx ends.
func (w *storeWatch) run(ctx context.Context, sick, idle time.Duration) {
	healthy := w.store.Healthy()
	failing := make(map[string]bool) // Cluster masters by address
	tick := time.NewTicker(sick)
	defer tick.Stop()
	sinceProbe := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sinceProbe += sick
		if !w.store.Healthy() || sinceProbe >= idle {
			sinceProbe = 0
			if err := w.probe(ctx, w.probeTimeout()); err != nil && ctx.Err() != nil {
				return
			}
		}
		w.logNodes(failing)
		now := w.store.Healthy()
		switch {
		case now && !healthy:
			w.logger.Info(w.name+" answers again: requests are decided by their limits", w.attrs...)
		case !now && healthy:
			_, err := w.store.LastFailure()
			w.logger.Error(w.name+" fails: requests that need it are answered by the failure policy until it answers again", append(w.attrs[:len(w.attrs):len(w.attrs)], "err", err)...)
		}
		healthy = now
	}
}

// logNodes logs each Cluster master that starts failing or answers again
// since the last call, which failing holds.
func (w *storeWatch) logNodes(failing map[string]bool) {
	if w.nodes == nil {
		return
	}
	for _, n := range w.nodes() {
		if n.Addr == "" {
			continue // the cluster as a whole: the store's own line
		}
		was := failing[n.Addr]
		attrs := append(w.attrs[:len(w.attrs):len(w.attrs)], "node", n.Addr, "slots", n.Slots)
		switch {
		case !n.Healthy() && !was:
			w.logger.Error(w.name+" node fails: requests on its slots are answered by the failure policy until it answers again; the other nodes' slots are decided as usual",
				append(attrs, "err", n.LastFailure)...)
		case n.Healthy() && was:
			w.logger.Info(w.name+" node answers again: requests on its slots are decided by their limits", attrs...)
		}
		failing[n.Addr] = !n.Healthy()
	}
}

// registerMetrics exposes the store's own metrics: health for Redis and
// Memcached, fill and refusals for memory.
func (s *counterStore) registerMetrics(reg prometheus.Registerer) {
	if s.health != nil {
		registerStoreHealthMetrics(reg, s.health)
	}
	if mem, ok := s.limiter.(*limit.Memory); ok {
		registerMemoryMetrics(reg, mem)
	}
	reg.MustRegister(s.collectors...)
}

var nodeHealthyDesc = prometheus.NewDesc("floodgate_store_node_healthy",
	"Redis only: 1 while calls reach the node, 0 while its circuit breaker is open or probing (the requests that need it are answered by the failure policy). "+
		"One series per node: node is the address configured (on a Cluster, that series is its slot map) or a Cluster master's.",
	[]string{"redis", "node"}, nil)

// nodeCollector exposes the health of each Redis node: on a Cluster, each
// master, so that an alert names the one that fails.
type nodeCollector struct {
	stores []*redisStore
	desc   *prometheus.Desc
}

func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.stores {
		for _, n := range st.lim.Nodes() {
			addr := n.Addr
			if addr == "" {
				addr = st.addr
			}
			v := 0.0
			if n.Healthy() {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, st.role, addr)
		}
	}
}

// registerMemoryMetrics exposes the in-memory store's fill and the requests
// it refused for lack of room, which the failure policy answered.
func registerMemoryMetrics(reg prometheus.Registerer, mem *limit.Memory) {
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "memory_entries",
			Help: "Counters held by the in-memory store (expired ones dropped), at most -memory-max-entries."},
			func() float64 { return float64(mem.Stats().Entries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "memory_refused_total",
			Help: "Requests refused because a shard of the in-memory store was full of live counters; answered by the failure policy."},
			func() float64 { return float64(mem.Stats().Refused) }),
	)
}

// registerStoreHealthMetrics exposes the store's health: 1 while calls
// reach it, 0 while a circuit breaker fails some of them at once (on a
// Cluster, any master's: floodgate_store_node_healthy says which).
func registerStoreHealthMetrics(reg prometheus.Registerer, health func() server.StoreHealth) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "store_healthy",
		Help: "1 while calls reach the limit store, 0 while a circuit breaker of it is open or probing (answers then come from the failure policy; on a Redis Cluster, only those on the failing master's slots, see floodgate_store_node_healthy)."},
		func() float64 {
			if health().Healthy {
				return 1
			}
			return 0
		}))
}

// tlsOn reports whether the deployment is reached with TLS.
func tlsOn(r *store.RedisOptions) bool { return r.TLS || strings.HasPrefix(r.URL, "rediss://") }

// credentials splits REDIS_AUTH's "pass" or "user:pass".
func credentials(r *store.RedisOptions) (user, pass string) {
	if u, p, ok := strings.Cut(r.Auth, ":"); ok {
		return u, p
	}
	return "", r.Auth
}

// serverList splits -memcache at commas, blanks dropped.
func serverList(servers string) []string {
	var out []string
	for _, s := range strings.Split(servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// newMemcache returns the Memcached store, probed once at start (a failure
// is logged and reported unhealthy, and requests get the failure policy)
// and watched as Redis is.
func newMemcache(ctx context.Context, cfg *settings.Config, logger *slog.Logger) (*counterStore, error) {
	m := &cfg.Store.Memcache
	var tc *tls.Config
	if m.TLS {
		var err error
		if tc, err = m.TLSFiles.Config("memcached"); err != nil {
			return nil, fmt.Errorf("memcache: %w", err)
		}
	}
	lim, err := memcachelimit.New(ctx, memcachelimit.Options{
		Servers: serverList(m.Servers), SRV: m.SRV, SRVRefresh: m.SRVRefresh, MaxIdleConns: m.MaxIdleConns,
		TLS: tc, KeyPrefix: cfg.Store.KeyPrefix, Timeout: cfg.Store.Deadline,
	})
	if err != nil {
		return nil, fmt.Errorf("memcache: %w", err)
	}
	logger.Info("counters are kept in Memcached (fixed windows only)", "servers", lim.Servers(), "srv", m.SRV, "tls", m.TLS, "deadline", cfg.Store.Deadline)
	w := &storeWatch{store: lim, name: "Memcached", attrs: []any{"servers", lim.Servers()}, logger: logger}
	if err := w.probe(ctx, startProbeTimeout); err != nil {
		logger.Error("Memcached cannot be used: until it can, requests are answered by the failure policy and the store is reported unhealthy", "err", err)
	}
	go w.run(ctx, sickProbeInterval, idleProbeInterval)
	health := func() server.StoreHealth {
		h := server.StoreHealth{Name: "memcache", Healthy: lim.Healthy(), Detail: "servers " + strings.Join(lim.Servers(), ",")}
		if at, err := lim.LastFailure(); err != nil {
			h.Detail += fmt.Sprintf("; last failure %v ago: %v", time.Since(at).Round(time.Second), err)
		}
		return h
	}
	return &counterStore{limiter: lim, name: "memcache", health: health, reached: w.Reached, close: func() { lim.Close() }}, nil
}
