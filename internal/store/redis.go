package store

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// deployment is one Redis deployment the counters are kept in.
type deployment struct {
	role   string // "main" or "per-second", in logs, /rlconfig and metrics
	addr   string // its address, credentials redacted
	client redis.UniversalClient
	lim    *redislimit.Limiter
	watch  *watch
}

// openRedis makes s the Redis store: the main deployment and, when
// PerSecond is set, the per-second one behind a redislimit.Split, probed
// together so that the start waits one probe's timeout.
func (s *Store) openRedis(ctx context.Context, opts Options) error {
	quietRedisLogs(opts.Logger)
	s.name = "redis"
	for _, part := range []struct {
		role string
		r    RedisOptions
	}{{"main", opts.Redis}, {"per-second", opts.PerSecond}} {
		if part.r.URL == "" {
			continue
		}
		d, err := openDeployment(opts, part.role, part.r, s.clock)
		if err != nil {
			s.closeRedis()
			return err
		}
		s.redis = append(s.redis, d)
		s.watches = append(s.watches, d.watch)
		d.logOpened(opts, part.r)
	}
	s.limiter = s.redis[0].lim
	if len(s.redis) == 2 {
		split, err := redislimit.NewSplit(s.redis[0].lim, s.redis[1].lim, nil)
		if err != nil {
			s.closeRedis()
			return fmt.Errorf("redis: %w", err)
		}
		s.limiter = split
	}
	var wg sync.WaitGroup
	for _, d := range s.redis {
		wg.Go(func() {
			if err := d.watch.probe(ctx, startProbeTimeout); err != nil {
				opts.Logger.Error("Redis cannot be used: until it can, requests that need it are answered by the failure policy (each rule's failure_mode, else -failure-mode), the store is reported unhealthy (/rlconfig, floodgate_store_healthy 0), and Redis is probed every second",
					d.logAttrs("err", err)...)
			}
		})
	}
	wg.Wait()
	return nil
}

// quietRedisLogs routes go-redis's own log lines, one per failed dial, to
// l at debug level: the watch reports failures. go-redis has one logger
// per process; call this before making clients.
func quietRedisLogs(l *slog.Logger) {
	redis.SetLogger(debugLog{l})
}

// debugLog is a go-redis logger writing to slog at debug level.
type debugLog struct{ l *slog.Logger }

func (d debugLog) Printf(ctx context.Context, format string, v ...any) {
	if d.l.Enabled(ctx, slog.LevelDebug) {
		d.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
	}
}

// closeRedis closes the clients opened so far.
func (s *Store) closeRedis() {
	for _, d := range s.redis {
		d.client.Close()
	}
}

// openDeployment returns one Redis deployment, without contacting it; its
// errors name the role, or the field of Options they refuse.
func openDeployment(opts Options, role string, r RedisOptions, clk clock) (*deployment, error) {
	what, name := "redis", "Redis"
	if role != "main" {
		what, name = role+" redis", "PerSecond"
	}
	var tc *tls.Config
	if r.tlsOn() {
		// The files are shared: read them only for a deployment with TLS.
		var err error
		if tc, err = opts.RedisTLSFiles.Config("redis"); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	user, pass := r.credentials()
	client, err := redislimit.NewClient(redislimit.ClientConfig{
		URL: r.URL, Type: r.typ(), SentinelMaster: r.SentinelMaster,
		Username: user, Password: pass, SentinelPassword: r.SentinelAuth,
		TLS: tc, PoolSize: r.PoolSize, DialTimeout: r.DialTimeout,
	})
	own := map[string]string{"redislimit.ClientConfig.URL": name + ".URL", "redislimit.ClientConfig.Type": name + ".Type",
		"redislimit.ClientConfig.SentinelMaster": name + ".SentinelMaster", "redislimit.ClientConfig.SentinelPassword": name + ".SentinelAuth",
		"redislimit.ClientConfig.TLS": name + ".TLS", "redislimit.ClientConfig.PoolSize": name + ".PoolSize",
		"redislimit.ClientConfig.DialTimeout": name + ".DialTimeout", "redislimit.Options.KeyPrefix": "KeyPrefix",
		"redislimit.Options.Timeout": "Deadline", "redislimit.Options.Batch.Window": name + ".PipelineWindow",
		"redislimit.Options.Batch.MaxRequests": name + ".PipelineLimit"}
	if err != nil {
		return nil, asOwn(what, err, own)
	}
	lopts := redislimit.Options{KeyPrefix: opts.KeyPrefix, Timeout: opts.Deadline, Logger: opts.Logger,
		Batch: redislimit.BatchOptions{Window: r.PipelineWindow, MaxRequests: r.PipelineLimit}}
	lim, err := redislimit.New(client, lopts)
	if err != nil {
		client.Close()
		return nil, asOwn(what, err, own)
	}
	d := &deployment{role: role, addr: RedactURL(r.URL), client: client, lim: lim}
	d.watch = &watch{store: lim, name: "Redis", attrs: d.logAttrs(), logger: opts.Logger, clock: clk, nodes: lim.Nodes}
	return d, nil
}

// logOpened logs where the counters are kept and how.
func (d *deployment) logOpened(opts Options, r RedisOptions) {
	msg := "counters are kept in Redis"
	if d.role != "main" {
		msg = "the counters of windows shorter than a minute are kept in the per-second Redis"
	}
	attrs := []any{"type", r.typ(), "tls", r.tlsOn(), "deadline", opts.Deadline}
	if r.PipelineWindow > 0 {
		attrs = append(attrs, "pipeline_window", r.PipelineWindow)
	}
	if r.PipelineLimit > 0 {
		attrs = append(attrs, "pipeline_limit", r.PipelineLimit)
	}
	sha, function := redislimit.Script()
	attrs = append(attrs, "script_sha", sha, "function", function)
	opts.Logger.Info(msg, d.logAttrs(attrs...)...)
	if r.typ() == "cluster" && (r.PipelineWindow > 0 || r.PipelineLimit > 0) {
		// The reference requires them with Cluster, so migrated settings
		// have them: worth a line, not a warning.
		opts.Logger.Info("the pipeline window and limit have no effect on Redis Cluster: each request goes to its node at once", d.logAttrs(
			"window", r.PipelineWindow, "limit", r.PipelineLimit)...)
	}
}

// logAttrs returns the attributes naming the deployment, then more.
func (d *deployment) logAttrs(more ...any) []any {
	return append([]any{"redis", d.role, "addr", d.addr}, more...)
}

// redisHealth is the health of the Redis deployments: healthy while every
// one is; with two, the detail names each by role and address.
func (s *Store) redisHealth() health.Store {
	now := s.clock.Now()
	h := health.Store{Name: s.name, Healthy: true, Reached: true}
	for _, d := range s.redis {
		h.Healthy = h.Healthy && d.lim.Healthy()
		h.Reached = h.Reached && d.watch.Reached()
	}
	if len(s.redis) == 1 {
		h.Detail = redisDetail(s.redis[0].lim, now, "; ")
		return h
	}
	parts := make([]string, len(s.redis))
	for i, d := range s.redis {
		parts[i] = d.role + " " + d.addr + ": " + redisDetail(d.lim, now, ", ")
	}
	h.Detail = strings.Join(parts, "; ")
	return h
}

// redisDetail describes a limiter's health for /rlconfig: each node's
// breaker and, after sep, its latest failure; on a Cluster, the slot map's
// and each master's with its slots.
func redisDetail(lim *redislimit.Limiter, now time.Time, sep string) string {
	nodes := lim.Nodes()
	var parts []string
	for _, n := range nodes {
		d := "breaker " + n.Breaker
		if n.LastFailure != nil {
			d += fmt.Sprintf("%slast failure %v ago: %v", sep, now.Sub(n.LastFailureAt).Round(time.Second), n.LastFailure)
		}
		switch {
		case n.Addr != "" && n.Slots != "":
			d = "master " + n.Addr + " (slots " + n.Slots + "): " + d
		case n.Addr != "":
			d = "master " + n.Addr + ": " + d
		case len(nodes) > 1:
			d = "slot map: " + d
		}
		parts = append(parts, d)
	}
	return strings.Join(parts, "; ")
}

// RedactURL replaces the credentials of a URL, everything before its last
// '@', with "***": "redis://user:pass@h:1" is "redis://***@h:1".
func RedactURL(u string) string {
	if i := strings.LastIndex(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
		return "***@" + u[i+1:]
	}
	return u
}
