package redislimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/redis/go-redis/v9"
)

// ErrStore reports that Redis could not decide: unreachable, too slow, or
// answering with an error. Every error a Limiter returns because of Redis
// wraps it.
var ErrStore = errors.New("redis failed")

// Options configures a Limiter. The zero value is usable.
type Options struct {
	// KeyPrefix is prepended to every key (the reference server's
	// CACHE_KEY_PREFIX). It must not contain '{' or '}'.
	KeyPrefix string
	// Timeout bounds each Evaluate call, unless its context's deadline is
	// sooner; 0 means limit.DefaultDeadline. It bounds socket reads only
	// if the client honours context deadlines (NewClient's do).
	Timeout time.Duration
	// Batch configures how concurrent calls share round trips on a single
	// node or Sentinel.
	Batch BatchOptions
	// Logger receives whether the Lua code runs with FCALL or EVALSHA; nil
	// discards it.
	Logger *slog.Logger

	breaker breakerOptions // tests tune the circuit breaker
}

// Limiter is a limit.Limiter that keeps its counters in Redis. It is safe
// for concurrent use.
type Limiter struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // non-nil when client is a Cluster client
	opts    Options
	nodes   *nodeSet  // the circuit breakers
	batcher *batcher  // nil when disabled or on Cluster
	fn      functions // how the Lua code runs: FCALL or EVALSHA
	specs   specArgs
	now     func() time.Time // tests only: replaces Redis TIME
}

// New returns a Limiter that keeps its counters in client (NewClient
// makes one), without contacting Redis.
func New(client redis.UniversalClient, opts Options) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redislimit: nil client")
	}
	if strings.ContainsAny(opts.KeyPrefix, "{}") {
		// The hash tag must be the key's first braces, and the key injective.
		return nil, refused("KeyPrefix", opts.KeyPrefix, "must not contain '{' or '}'")
	}
	if opts.Timeout < 0 {
		return nil, refused("Timeout", opts.Timeout, "must not be negative")
	}
	opts.Timeout = cmp.Or(opts.Timeout, limit.DefaultDeadline)
	nodes, err := newNodeSet(opts.breaker)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, opts: opts, nodes: nodes}
	l.fn.log = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	l.cluster, _ = client.(*redis.ClusterClient)
	bt, err := newBatcher(l, opts.Batch)
	if err != nil {
		return nil, err
	}
	if l.cluster == nil {
		l.batcher = bt
	}
	return l, nil
}

// Evaluate implements limit.Limiter within Options.Timeout: one script
// call, or one per hash slot on a Cluster. A failure of Redis is an error
// wrapping ErrStore, and limit.ErrCircuitOpen too while the circuit
// breaker of a node it needs is open; an invalid hit is refused without
// calling Redis.
func (l *Limiter) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	if len(decisions) != len(hits) {
		return false, fmt.Errorf("redislimit: %d decisions for %d hits", len(decisions), len(hits))
	}
	if len(hits) == 0 {
		return false, nil
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return false, fmt.Errorf("redislimit: hit %d: %w", i, err)
		}
	}
	clock := time.Now()
	if l.now != nil {
		clock = l.now()
	}
	if l.cluster != nil {
		ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
		defer cancel()
		return l.evaluateCluster(ctx, clock, hits, decisions)
	}
	home := l.nodes.home
	ok, probe := home.breaker.admit()
	if !ok {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w", len(hits), errCircuitOpen)
	}
	if l.batcher != nil {
		return l.batcher.evaluate(ctx, clock, probe, hits, decisions)
	}
	blocked, err = l.run(ctx, clock, hits, decisions)
	l.report(ctx, home, probe, err)
	return blocked, err
}

// Reset deletes counter key (a limit.Hit.Key) from Redis, within
// Options.Timeout; spec is for Split. It goes to Redis whatever the
// circuit breaker says, and is not counted by it. A failure is an error
// wrapping ErrStore.
func (l *Limiter) Reset(ctx context.Context, key string, _ limit.Spec) error {
	ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
	defer cancel()
	if err := l.client.Del(ctx, Key(l.opts.KeyPrefix, key)).Err(); err != nil {
		return fmt.Errorf("redislimit: reset: %w: %w", ErrStore, err)
	}
	return nil
}

// appendRequest appends a request's KEYS and ARGV for hits (see
// evaluate.lua); clock places calendar boundaries.
func (l *Limiter) appendRequest(keys []string, args []any, clock time.Time, hits []limit.Hit) ([]string, []any) {
	now := ""
	if l.now != nil {
		now = strconv.FormatInt(clock.UnixMicro(), 10)
	}
	args = append(args, now, int64(len(hits)))
	for i := range hits {
		h := &hits[i]
		keys = append(keys, Key(l.opts.KeyPrefix, h.Key))
		sp := &h.Spec
		flags := int64(b2i(h.Refund)*flagRefund + b2i(h.Usage)*flagUsage + b2i(sp.Calendar != nil)*flagCalendar)
		switch h.Mode {
		case limit.Advisory:
			flags += flagAdvisory
		case limit.Quota:
			flags += flagQuotaBase * (int64(h.Group) + 1)
		}
		args = append(args, l.specs.arg(sp), h.Cost, flags)
		if sp.Calendar == nil {
			continue
		}
		// Four boundaries, so that Redis's clock may pick the previous,
		// current or next window.
		start, end := sp.WindowAt(clock)
		prev, _ := sp.WindowAt(start.Add(-time.Nanosecond))
		_, after := sp.WindowAt(end)
		args = append(args, prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), after.UnixMicro())
	}
	return keys, args
}

// specArg returns a hit's spec argument, "code:L:W:B:N" (see
// evaluate.lua).
func specArg(sp *limit.Spec) string {
	var buf [5 * 21]byte
	b := strconv.AppendUint(buf[:0], uint64(sp.Algorithm), 10)
	for _, v := range [...]int64{sp.Limit, sp.WindowMicros(), sp.Capacity(), sp.SubWindows()} {
		b = append(b, ':')
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// specArgs caches each spec's argument, boxed, so that a hit costs
// neither formatting nor boxing it. Past maxSpecArgs specs, as after many
// reloads, it starts over. The zero value is ready.
type specArgs struct {
	mu sync.RWMutex
	m  map[limit.Spec]any
}

const maxSpecArgs = 4096

// arg returns specArg(sp), boxed.
func (c *specArgs) arg(sp *limit.Spec) any {
	c.mu.RLock()
	v, ok := c.m[*sp]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = specArg(sp)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxSpecArgs {
		c.m = make(map[limit.Spec]any)
	}
	c.m[*sp] = v
	c.mu.Unlock()
	return v
}

// argsFor returns the capacity of a request's arguments for hits.
func argsFor(hits []limit.Hit) int {
	n := argsPerRequest + argsPerHit*len(hits)
	for i := range hits {
		if hits[i].Spec.Calendar != nil {
			n += argsPerCalendar
		}
	}
	return n
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// run decides hits, all in one slot, with a script call of its own.
func (l *Limiter) run(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	keys, args := l.appendRequest(make([]string, 0, len(hits)), make([]any, 0, argsFor(hits)), clock, hits)
	return l.runArgs(ctx, keys, args, decisions)
}

// runArgs sends one request's KEYS and ARGV alone.
func (l *Limiter) runArgs(ctx context.Context, keys []string, args []any, decisions []limit.Decision) (blocked bool, err error) {
	recordBatch(ctx, 1)
	ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
	defer cancel()
	replies, err := l.send(ctx, keys, args, 1)
	if err != nil {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w", len(decisions), err)
	}
	return decode(replies[0], decisions)
}

// send runs the script for requests and returns one reply per request.
// The error wraps ErrStore.
func (l *Limiter) send(ctx context.Context, keys []string, args []any, requests int) ([]any, error) {
	r, err := l.call(ctx, keys, args)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrStore, err)
	}
	reply, ok := r.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: reply %T, want an array", ErrStore, r)
	}
	if len(reply) != requests {
		return nil, fmt.Errorf("%w: %d replies for %d requests", ErrStore, len(reply), requests)
	}
	return reply, nil
}

// decode fills decisions from the script's reply to one request and
// returns its verdict.
func decode(reply any, decisions []limit.Decision) (blocked bool, err error) {
	if err, ok := reply.(error); ok {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w: %w", len(decisions), ErrStore, err)
	}
	r, _ := reply.([]any)
	size := fieldsPerDecision*len(decisions) + 1
	if len(r) != size {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w: %d values in reply, want %d", len(decisions), ErrStore, len(r), size)
	}
	var f [fieldsPerDecision]int64
	for i := range decisions {
		for j := range f {
			n, ok := r[fieldsPerDecision*i+j].(int64)
			if !ok {
				return false, fmt.Errorf("redislimit: evaluate %d hits: %w: reply value %T, want an integer", len(decisions), ErrStore, r[fieldsPerDecision*i+j])
			}
			f[j] = n
		}
		decisions[i] = limit.Decision{
			Allowed:    f[fieldAllowed] == 1,
			Remaining:  f[fieldRemaining],
			ResetAfter: time.Duration(f[fieldReset]) * time.Microsecond,
			RetryAfter: time.Duration(f[fieldRetry]) * time.Microsecond,
			Never:      f[fieldNever] == 1,
			Debt:       f[fieldDebt],
		}
	}
	v, ok := r[size-1].(int64)
	if !ok {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w: reply verdict %T, want an integer", len(decisions), ErrStore, r[size-1])
	}
	return v == 1, nil
}

// refused is the error of an Options field refused for its value.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "redislimit.Options", Field: field, Value: v, Want: want}
}
