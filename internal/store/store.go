// Package store opens the limit store the server keeps its counters in,
// from Options: this process's memory, Redis (a single node, Sentinel or
// Cluster, with an optional second Redis for the limits whose window is
// shorter than a minute), or Memcached. It owns what surrounds the
// limiter: the validation of those settings, the probes at start and the
// health watch that follows the store and logs each change, the store's
// health as /rlconfig and readiness read it, its metrics, the deny cache
// in front of Redis, which limits the store can serve, and the reset of a
// counter (Store.Reset) in whichever store is open.
//
// It is the binary's: the limiters themselves are pkg/limit,
// pkg/redislimit, internal/memcachelimit and internal/denycache, which must not
// import it, and neither must internal/server, which takes the store's health
// (package health) as a function; nor does it import internal/server.
package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

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
// are probed before it returns (a store that does not answer is logged
// and reported unhealthy, not refused: requests get the failure policy
// until it answers), then watched until ctx ends or Close is called.
// Its errors are those of Validate and of settings the clients refuse
// (a URL that does not parse, TLS files that do not load).
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
// finds no state (package counters' Resetter, behind /counters/reset): the
// in-memory store drops the entry; Redis deletes the counter's key (on a
// Cluster in its slot's master; with a per-second Redis, in the one spec's
// window routes it to) and the deny cache forgets the key's denial;
// Memcached deletes the key of the current window and of its neighbours.
// A failure of Redis or Memcached is an error wrapping that store's
// ErrStore.
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

// Health returns the store's health for /rlconfig and readiness
// (internal/server's Options.Store). Memory is always healthy and reached; Redis is
// healthy while every deployment and Cluster master is, and reached once
// every deployment has answered a probe; Memcached likewise. Detail says
// the breakers' states and the latest failures, naming each deployment
// when there are two and each Cluster master.
func (s *Store) Health() health.Store {
	switch {
	case s.mem != nil:
		st := s.mem.Stats()
		return health.Store{Name: s.name, Healthy: true, Reached: true,
			Detail: fmt.Sprintf("counters in this process only: not shared with other instances, lost on restart; %d of at most %d counters", st.Entries, st.Capacity)}
	case s.memcache != nil:
		return s.memcacheHealth()
	}
	return s.redisHealth()
}

// FollowRules flushes the deny cache each time changed's channel is
// closed (rules.Watcher.Changed: the rules in force were replaced), until
// ctx ends; it returns at once when there is no deny cache. A denial is a
// fact about a counter under one spec, which a spec change never matches
// anyway; flushing also covers what a reload changes around the spec.
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

// deadline is opts.Deadline, or limit.DefaultDeadline when it is 0: the
// deadline the start line reports.
func (opts Options) deadline() time.Duration {
	if opts.Deadline == 0 {
		return limit.DefaultDeadline
	}
	return opts.Deadline
}
