// Package store opens the store the server keeps its counters in: this
// process's memory, Redis (single, Sentinel or Cluster, with an optional
// second Redis for windows shorter than a minute), or Memcached. Around
// the limiter it owns the validation of its settings, the health watch and
// what /rlconfig, readiness and the metrics read of it, the deny cache in
// front of Redis, and the reset of a counter.
package store

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/floodgate/floodgate/internal/denycache"
	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// Store is an open limit store. Its methods are safe for concurrent use.
type Store struct {
	name    string
	limiter resetter // with the deny cache when it is on
	clock   clock

	mem      *limit.Memory // the in-memory store, else nil
	redis    []*deployment // main, then per-second; nil without Redis
	memcache *memcachelimit.Limiter
	watches  []*watch // one per Redis deployment, or Memcached's
	cache    *denycache.Cache

	stop      context.CancelFunc // ends the watches
	running   sync.WaitGroup     // the watches
	closeOnce sync.Once
}

// Open opens the store opts describe. Redis and Memcached are probed
// before it returns, then watched until ctx ends or Close; one that does
// not answer is logged and reported unhealthy, not refused. Its errors are
// Validate's and the clients' (a URL that does not parse, TLS files that
// do not load).
func Open(ctx context.Context, opts Options) (*Store, error) {
	return open(ctx, opts, systemClock{})
}

// open is Open on clk.
func open(ctx context.Context, opts Options, clk clock) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.Deadline = cmp.Or(opts.Deadline, limit.DefaultDeadline)
	ctx, stop := context.WithCancel(ctx)
	s := &Store{clock: clk, stop: stop}
	var err error
	switch {
	case opts.Memcache.on():
		err = s.openMemcache(ctx, opts)
	case opts.Redis.URL != "":
		err = s.openRedis(ctx, opts)
	default:
		s.openMemory(opts)
	}
	if err != nil {
		stop()
		return nil, err
	}
	if s.redis != nil && !opts.DenyCache.Disabled {
		s.cache = denycache.New(s.limiter, denycache.Options{MaxEntries: opts.DenyCache.MaxEntries, MaxAge: opts.DenyCache.MaxAge})
		s.limiter = s.cache
	}
	for _, w := range s.watches {
		s.running.Go(func() { w.run(ctx) })
	}
	return s, nil
}

// openMemory makes s the in-memory store.
func (s *Store) openMemory(opts Options) {
	opts.Logger.Warn("no Redis configured (-redis, REDIS_URL): counters are kept in this process's memory, not shared with other instances and lost on restart")
	s.name = "memory"
	s.mem = limit.NewMemory(limit.MemoryOptions{MaxEntries: opts.MemoryMaxEntries, Logger: opts.Logger})
	s.limiter = s.mem
}

// Limiter returns the limiter on the store's counters, behind the deny
// cache when it is on.
func (s *Store) Limiter() limit.Limiter { return s.limiter }

// resetter is a limiter whose counters an operator can reset: every
// store's, and the deny cache.
type resetter interface {
	limit.Limiter
	Reset(ctx context.Context, key string, spec limit.Spec) error
}

// Reset forgets the counter key of a limit of spec (/counters/reset), in
// the store and the deny cache. A failure of Redis or Memcached is an
// error wrapping that store's ErrStore.
func (s *Store) Reset(ctx context.Context, key string, spec limit.Spec) error {
	return s.limiter.Reset(ctx, key, spec)
}

// Name returns the store's kind: "memory", "redis" or "memcache".
func (s *Store) Name() string { return s.name }

// Health returns the store's health for /rlconfig and readiness. Redis and
// Memcached are healthy while every deployment and Cluster master is, and
// reached once each answered a probe; memory always is both.
func (s *Store) Health() health.Store {
	switch {
	case s.mem != nil:
		return health.Store{Name: s.name, Healthy: true, Reached: true,
			Detail: fmt.Sprintf("counters in this process only: not shared with other instances, lost on restart; %d of at most %d counters", s.mem.Len(), s.mem.Cap())}
	case s.memcache != nil:
		return s.memcacheHealth()
	}
	return s.redisHealth()
}

// FollowRules flushes the deny cache each time changed's channel is
// closed (rules.Watcher.Changed), until ctx ends.
func (s *Store) FollowRules(ctx context.Context, changed func() <-chan struct{}) {
	if s.cache == nil {
		return
	}
	for {
		select {
		case <-changed():
			s.cache.Flush()
		case <-ctx.Done():
			return
		}
	}
}

// Close ends the health watches and closes the clients; calls after the
// first do nothing.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.stop()
		s.running.Wait()
		s.closeRedis()
		if s.memcache != nil {
			s.memcache.Close()
		}
	})
}
