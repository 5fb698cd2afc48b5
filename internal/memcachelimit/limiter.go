package memcachelimit

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
)

// ErrStore reports that Memcached could not decide: a server unreachable,
// too slow, or answering with an error. Every error a Limiter returns
// because of Memcached wraps it.
var ErrStore = errors.New("memcached failed")

// ErrUnsupported reports a hit whose algorithm is not limit.FixedWindow.
// It wraps limit.ErrInvalidSpec: Supports refuses such rules when they
// load, so the hit is floodgate's mistake, not the store's.
var ErrUnsupported = fmt.Errorf("algorithm not supported by Memcached: %w", limit.ErrInvalidSpec)

// Supports returns nil if a Limiter can decide limits of spec (any fixed
// window), else an error naming the algorithm and what to do instead. The
// rule loader (rules.Options.Supports) refuses such rules with it, at
// their position, rather than each request failing with ErrUnsupported.
func Supports(spec limit.Spec) error {
	if spec.Algorithm == limit.FixedWindow {
		return nil
	}
	return fmt.Errorf("algorithm %v cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis", spec.Algorithm)
}

// DefaultMaxIdleConns is Options.MaxIdleConns when it is 0 or less.
const DefaultMaxIdleConns = 16

// maxRelativeExpiry is the longest expiry Memcached reads as seconds from
// now; a larger one is a Unix time.
const maxRelativeExpiry = 30 * 24 * 60 * 60

// Options configures a Limiter.
type Options struct {
	// Servers are the Memcached servers as host:port (MEMCACHE_HOST_PORT).
	Servers []string
	// SRV is a DNS SRV name listing the servers (MEMCACHE_SRV), resolved
	// by New; give Servers or SRV, not both.
	SRV string
	// SRVRefresh, when positive, resolves SRV again at this interval
	// (MEMCACHE_SRV_REFRESH); a failed refresh keeps the servers in force.
	SRVRefresh time.Duration
	// Resolver resolves SRV; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// MaxIdleConns is the number of idle connections kept per server
	// (MEMCACHE_MAX_IDLE_CONNS); 0 or less means DefaultMaxIdleConns.
	MaxIdleConns int
	// TLS, when not nil, connects to every server with TLS (MEMCACHE_TLS);
	// an empty ServerName verifies each server for the host dialed.
	TLS *tls.Config
	// KeyPrefix starts every key (CACHE_KEY_PREFIX): at most MaxPrefixLen
	// bytes of printable ASCII without spaces.
	KeyPrefix string
	// Timeout bounds each call, unless its context's deadline is sooner,
	// and each compensation; 0 means limit.DefaultDeadline.
	Timeout time.Duration
	// Now is the clock that places hits in windows; nil means time.Now.
	Now func() time.Time
}

// Limiter decides fixed-window limits in Memcached. It is safe for
// concurrent use.
type Limiter struct {
	pool        pool
	opts        Options
	scratch     sync.Pool // *call
	lastFailure atomic.Pointer[failure]
	stop        context.CancelFunc
	refreshed   chan struct{} // closed when the SRV refresh loop ends
}

// failure is a failure of Memcached and when it happened.
type failure struct {
	err error
	at  time.Time
}

// Validate returns the first field of o New refuses, as an
// *option.Error, or nil. It resolves nothing: New finds an SRV name that
// does not resolve.
func (o Options) Validate() error {
	switch {
	case len(o.Servers) > 0 && o.SRV != "":
		return &option.Error{Options: "memcachelimit.Options", Field: "Servers", Want: "and %s: give one, not both", With: []string{"SRV"}}
	case len(o.Servers) == 0 && o.SRV == "":
		return &option.Error{Options: "memcachelimit.Options", Field: "Servers", Want: "and %s are empty: give one", With: []string{"SRV"}}
	case o.Timeout < 0:
		return refused("Timeout", o.Timeout, "must not be negative")
	case o.SRVRefresh < 0:
		return refused("SRVRefresh", o.SRVRefresh, "must not be negative")
	}
	if err := validPrefix(o.KeyPrefix); err != nil {
		return err
	}
	for _, a := range o.Servers {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return &option.Error{Options: "memcachelimit.Options", Field: "Servers", Value: a, Want: "want host:port", Err: err}
		}
	}
	return nil
}

// refused is the error of an Options field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "memcachelimit.Options", Field: field, Value: v, Want: want}
}

// New returns a Limiter on the servers opts lists, resolving opts.SRV
// under ctx, without contacting them (see Probe). Close releases it.
func New(ctx context.Context, opts Options) (*Limiter, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Timeout = cmp.Or(opts.Timeout, limit.DefaultDeadline)
	opts.Resolver = cmp.Or(opts.Resolver, net.DefaultResolver)
	if opts.MaxIdleConns <= 0 {
		opts.MaxIdleConns = DefaultMaxIdleConns
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	l := &Limiter{opts: opts, pool: pool{tls: opts.TLS, maxIdle: opts.MaxIdleConns}}
	l.scratch.New = func() any { return new(call) }
	servers := opts.Servers
	if opts.SRV != "" {
		var err error
		if servers, err = resolveSRV(ctx, opts.Resolver, opts.SRV); err != nil {
			return nil, fmt.Errorf("memcachelimit: %w", err)
		}
	}
	l.pool.setServers(servers)
	if opts.SRV != "" && opts.SRVRefresh > 0 {
		var loopCtx context.Context
		loopCtx, l.stop = context.WithCancel(context.Background())
		l.refreshed = make(chan struct{})
		go l.refreshLoop(loopCtx)
	}
	return l, nil
}

// Servers returns the servers in force, as host:port, sorted.
func (l *Limiter) Servers() []string {
	list := l.pool.list()
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.addr
	}
	return out
}

// Close stops following the SRV records and closes idle connections.
// Calls in flight finish; the Limiter must not be used afterwards.
func (l *Limiter) Close() error {
	if l.stop != nil {
		l.stop()
		<-l.refreshed
	}
	for _, s := range l.pool.list() {
		s.removed.Store(true)
		s.drain()
	}
	return nil
}

// refreshLoop resolves the SRV name every SRVRefresh until ctx ends.
func (l *Limiter) refreshLoop(ctx context.Context) {
	defer close(l.refreshed)
	tick := time.NewTicker(l.opts.SRVRefresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rctx, cancel := context.WithTimeout(ctx, max(l.opts.SRVRefresh, time.Second))
		addrs, err := resolveSRV(rctx, l.opts.Resolver, l.opts.SRV)
		cancel()
		if err != nil {
			l.failed(ctx, fmt.Errorf("%w: refresh: %w", ErrStore, err))
			continue
		}
		l.pool.setServers(addrs)
	}
}

// Healthy reports whether the latest exchange with every server, a call's
// or a Probe's, got an answer.
func (l *Limiter) Healthy() bool {
	return !slices.ContainsFunc(l.pool.list(), func(s *server) bool { return s.failing.Load() })
}

// LastFailure returns the latest failure seen by a call, a Probe or an SRV
// refresh, and when; nil if none ever did. It stays after recovery.
func (l *Limiter) LastFailure() (at time.Time, err error) {
	f := l.lastFailure.Load()
	if f == nil {
		return time.Time{}, nil
	}
	return f.at, f.err
}

// Probe asks every server its version, concurrently. A failure is an
// error wrapping ErrStore that names each server that failed.
func (l *Limiter) Probe(ctx context.Context) error {
	servers := l.pool.list()
	cmds := make([]*command, len(servers))
	for i, s := range servers {
		cmds[i] = &command{kind: cmdVersion, srv: s}
	}
	if err := l.pool.runAll(ctx, cmds); err != nil {
		err = fmt.Errorf("memcachelimit: probe: %w: %w", ErrStore, err)
		l.failed(ctx, err)
		return err
	}
	return nil
}

// Evaluate implements limit.Limiter, not atomically (see the package
// doc). A hit of another algorithm is an error wrapping ErrUnsupported,
// without calling Memcached; a failure of Memcached wraps ErrStore.
func (l *Limiter) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	if len(decisions) != len(hits) {
		return false, fmt.Errorf("memcachelimit: %d decisions for %d hits", len(decisions), len(hits))
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return false, fmt.Errorf("memcachelimit: hit %d: %w", i, err)
		}
		if a := hits[i].Spec.Algorithm; a != limit.FixedWindow {
			return false, fmt.Errorf("memcachelimit: hit %d: %w: %v", i, ErrUnsupported, a)
		}
	}
	if len(hits) == 0 {
		return false, nil
	}
	ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
	defer cancel()
	c := l.scratch.Get().(*call)
	defer func() {
		c.reset()
		l.scratch.Put(c)
	}()
	now := l.opts.Now()
	c.plan(l, hits, now)
	if err = l.pool.runAll(ctx, c.ptrs); err != nil {
		err = fmt.Errorf("memcachelimit: evaluate %d hits: %w: %w", len(hits), ErrStore, err)
		// Give back what the servers that answered took.
		if cerr := l.settle(ctx, c.undoPartial()); cerr != nil {
			err = errors.Join(err, cerr)
		}
		l.failed(ctx, err)
		return false, err
	}
	blocked = c.decide(hits, decisions, now.UnixMicro())
	if err := l.settle(ctx, c.settle(hits, blocked)); err != nil {
		return false, err
	}
	c.refunded(hits, decisions)
	return blocked, nil
}

// settle runs a call's compensations and refunds under a deadline of
// their own, even when the caller has given up: a counter left charged
// would deny others until its window ends.
func (l *Limiter) settle(ctx context.Context, cmds []*command) error {
	if len(cmds) == 0 {
		return nil
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.Timeout)
	defer cancel()
	if err := l.pool.runAll(sctx, cmds); err != nil {
		err = fmt.Errorf("memcachelimit: settle %d counters: %w: %w", len(cmds), ErrStore, err)
		l.failed(sctx, err)
		return err
	}
	return nil
}

// failed records err, met under ctx, unless the caller gave up.
func (l *Limiter) failed(ctx context.Context, err error) {
	if !errors.Is(ctx.Err(), context.Canceled) {
		l.lastFailure.Store(&failure{err: err, at: time.Now()})
	}
}

// expiry returns the expiry of a counter whose window ends at end: whole
// seconds from now, rounded up, plus one for Memcached's coarse clock;
// beyond 30 days, a Unix time a minute later, at most 2^31-1, the largest
// Memcached reads. A late expiry only holds memory: a key names its window.
func expiry(now, end time.Time) int64 {
	secs := int64(math.Ceil(end.Sub(now).Seconds())) + 1
	if secs <= maxRelativeExpiry {
		return max(secs, 1)
	}
	return min(end.Unix()+61, math.MaxInt32)
}
