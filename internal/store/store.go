// Package store opens the store the server keeps its counters in: this
// process's memory, Redis (single, Sentinel or Cluster, with an optional
// second Redis for windows shorter than a minute), or Memcached. Around
// the limiter it owns the validation of its settings, the probes and the
// health watch, the health /rlconfig and readiness read, the metrics, the
// deny cache in front of Redis, and the reset of a counter.
//
// The limiters themselves (pkg/limit, pkg/redislimit,
// internal/memcachelimit, internal/denycache) do not import it, and it
// does not import internal/server, which takes the health as a function.
package store

import (
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
	limiter limit.Limiter // with the deny cache when it is on
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

// Open opens the store opts describe, after Validate. Redis and Memcached
// are probed before it returns, then watched until ctx ends or Close is
// called; one that does not answer is logged and reported unhealthy, not
// refused. Its errors are Validate's and those of settings the clients
// refuse (a URL that does not parse, TLS files that do not load).
func Open(ctx context.Context, opts Options) (*Store, error) {
	return open(ctx, opts, systemClock{})
}

// open is Open on clk.
func open(ctx context.Context, opts Options, clk clock) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Deadline == 0 {
		opts.Deadline = limit.DefaultDeadline
	}
	ctx, stop := context.WithCancel(ctx)
	s := &Store{clock: clk, stop: stop}
	switch {
	case opts.Memcache.on():
		if err := s.openMemcache(ctx, opts); err != nil {
			stop()
			return nil, err
		}
	case opts.Redis.URL != "":
		if err := s.openRedis(ctx, opts); err != nil {
			stop()
			return nil, err
		}
		if !opts.DenyCache.Disabled {
			s.cache = denycache.New(s.limiter, denycache.Options{MaxEntries: opts.DenyCache.MaxEntries, MaxAge: opts.DenyCache.MaxAge})
			s.limiter = s.cache
		}
	default:
		s.openMemory(opts)
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

// Limiter returns the limiter that decides with the store's counters:
// behind the deny cache when it is on.
func (s *Store) Limiter() limit.Limiter { return s.limiter }

// Reset forgets the counter key of a limit of spec, so that its next hit
// finds no state (behind /counters/reset), in whichever store holds it;
// the deny cache forgets the key's denial too. A failure of Redis or
// Memcached is an error wrapping that store's ErrStore.
func (s *Store) Reset(ctx context.Context, key string, spec limit.Spec) error {
	r, ok := s.limiter.(resetter)
	if !ok {
		// Every limiter Open builds has one; a new store must add it.
		return fmt.Errorf("store %s: counters cannot be reset", s.name)
	}
	return r.Reset(ctx, key, spec)
}

// resetter is the Reset every limiter Open builds has.
type resetter interface {
	Reset(ctx context.Context, key string, spec limit.Spec) error
}

// Name returns the store's kind: "memory", "redis" or "memcache", as
// metrics and traces label it.
func (s *Store) Name() string { return s.name }

// Health returns the store's health for /rlconfig and readiness. Memory
// is always healthy and reached; Redis and Memcached are healthy while
// every deployment and Cluster master is, and reached once each has
// answered a probe. Detail names the breakers' states and latest failures.
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
// closed (rules.Watcher.Changed), until ctx ends; it returns at once when
// there is no deny cache.
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

// Close ends the health watches, waits for them, and closes the clients.
// Calls after the first do nothing.
func (s *Store) Close() {
	s.closeOnce.Do(func() {
		s.stop()
		s.running.Wait()
		for _, d := range s.redis {
			d.client.Close()
		}
		if s.memcache != nil {
			s.memcache.Close()
		}
	})
}
