package redislimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/tracing"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/redis/go-redis/v9"
)

// ErrStore reports that Redis could not decide: unreachable, too slow, or
// answering with an error. Every error Evaluate returns because of Redis
// wraps it, so the caller can apply its failure policy with errors.Is.
var ErrStore = errors.New("redis failed")

// Options configures a Limiter. The zero value is usable.
type Options struct {
	// KeyPrefix is prepended to every key (the reference server's
	// CACHE_KEY_PREFIX). It must not contain '{' or '}'.
	KeyPrefix string
	// Timeout bounds each Evaluate call, from its start to its answer,
	// whatever its context says (a sooner deadline of the context wins);
	// 0 means limit.DefaultDeadline.
	// It bounds socket reads only if the client honours context deadlines,
	// as clients from NewClient do (go-redis's ContextTimeoutEnabled).
	Timeout time.Duration
	// Breaker configures the circuit breaker that fails calls at once
	// while Redis is down; the zero value enables it with its defaults.
	Breaker BreakerOptions
	// Batch configures how concurrent calls share round trips on a single
	// node or Sentinel; the zero value enables batching with its defaults.
	Batch BatchOptions
	// Logger receives the line saying how the Lua code runs, once the first
	// call or Probe has found out: as a Redis function (FCALL), or with
	// EVALSHA because Redis has no functions or an ACL denies them. nil
	// discards it.
	Logger *slog.Logger
}

// Limiter evaluates limits in Redis: a limit.Limiter. It is safe for
// concurrent use.
type Limiter struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // non-nil when client is a Cluster client
	opts    Options
	// nodes holds the circuit breakers and failures: one for a single node
	// or Sentinel, one per master of a Cluster.
	nodes   *nodeSet
	batcher *batcher // nil when disabled or on Cluster
	// fn is how the Lua code runs: FCALL or EVALSHA (see call).
	fn functions
	// specs holds each spec's argument (see specArg).
	specs specArgs
	// now, set only by tests, replaces Redis TIME with an explicit instant
	// so that boundaries can be reached exactly.
	now func() time.Time
}

// New returns a Limiter that keeps its counters in client: one script call
// per Evaluate on a single node or Sentinel, one per hash slot involved on a
// *redis.ClusterClient. It does not contact Redis.
func New(client redis.UniversalClient, opts Options) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redislimit: nil client")
	}
	if !validPrefix(opts.KeyPrefix) {
		return nil, refused("KeyPrefix", opts.KeyPrefix, "must not contain '{' or '}'")
	}
	if opts.Timeout < 0 {
		return nil, refused("Timeout", opts.Timeout, "must not be negative")
	}
	if opts.Timeout == 0 {
		opts.Timeout = limit.DefaultDeadline
	}
	nodes, err := newNodeSet(opts.Breaker)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, opts: opts, nodes: nodes}
	l.fn.log = opts.Logger
	if l.fn.log == nil {
		l.fn.log = slog.New(slog.DiscardHandler)
	}
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

// Evaluate implements limit.Limiter: one script call decides the request,
// quotas included, atomically on a single node or Sentinel; on a Cluster,
// one per hash slot involved, with the compensation the package
// documentation describes. The call ends within Options.Timeout (a call
// sent at once has a deadline of its own, one queued for a batch is ended
// by the batcher, a Cluster's by one for the whole call; a compensation
// then runs on, bounded alike). A failure of Redis is an error wrapping
// ErrStore (and ErrCircuitOpen while the circuit breaker of a node it
// needs is open, see BreakerOptions and Nodes); Redis is not called for an
// invalid hit.
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
	var clock time.Time
	if l.now != nil {
		clock = l.now()
	} else {
		clock = time.Now()
	}
	if l.cluster != nil {
		ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
		defer cancel()
		return l.evaluateCluster(ctx, clock, hits, decisions)
	}
	home := l.nodes.home
	ok, probe := home.breaker.admit()
	if !ok {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w", len(hits), ErrCircuitOpen)
	}
	if l.batcher != nil {
		// The batcher reports to the breaker once per round trip.
		return l.batcher.evaluate(ctx, clock, probe, hits, decisions)
	}
	blocked, err = l.run(ctx, clock, hits, decisions)
	l.report(ctx, home, probe, err)
	return blocked, err
}

// appendRequest appends a request's KEYS and ARGV for hits to keys and
// args (see evaluate.lua); clock is the server's time, used only for
// calendar boundaries (and, in tests, as the script's now).
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
		flags := int64(b2i(h.Refund) * flagRefund)
		switch h.Mode {
		case limit.Advisory:
			flags += flagAdvisory
		case limit.Quota:
			flags += flagQuotaBase * (int64(h.Group) + 1)
		}
		if !sp.Calendar.IsZero() {
			flags += flagCalendar
		}
		if h.Usage {
			flags += flagUsage
		}
		args = append(args, l.specs.arg(sp), h.Cost, flags)
		if sp.Calendar.IsZero() {
			continue
		}
		// Four boundaries around the server's clock: Redis's clock picks
		// among the previous, current and next window, so a skew of up to a
		// window between the two clocks is harmless.
		start, end := sp.Calendar.Window(clock)
		prev, _ := sp.Calendar.Window(start.Add(-time.Nanosecond))
		_, after := sp.Calendar.Window(end)
		args = append(args, prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), after.UnixMicro())
	}
	return keys, args
}

// specArg returns a hit's spec argument, "code:L:W:B:N" (see
// evaluate.lua): one argument where five took five, parsed once per call
// by the script however many hits share it.
func specArg(sp *limit.Spec) string {
	var buf [5 * 21]byte
	b := strconv.AppendUint(buf[:0], uint64(sp.Algorithm), 10)
	for _, v := range [...]int64{sp.Limit, sp.WindowMicros(), sp.Capacity(), sp.SubWindows()} {
		b = append(b, ':')
		b = strconv.AppendInt(b, v, 10)
	}
	return string(b)
}

// specArgs keeps each spec's argument, as the interface value the
// arguments hold, so that a hit costs neither formatting it nor boxing it:
// both were 2-3 % of the server's CPU with three descriptors over Redis.
// Specs are few (one per limit of the rules); past maxSpecArgs, as after
// many reloads, it starts over so that it stays bounded. Safe for
// concurrent use; the zero value is empty and ready.
type specArgs struct {
	mu sync.RWMutex
	m  map[limit.Spec]any
}

// maxSpecArgs bounds the specs a specArgs holds.
const maxSpecArgs = 4096

// arg returns specArg(sp) as an interface value.
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
		if !hits[i].Spec.Calendar.IsZero() {
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

// run decides hits, all in one slot, with a script call of its own, fills
// decisions from its reply and returns its verdict.
func (l *Limiter) run(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	keys, args := l.appendRequest(make([]string, 0, len(hits)), make([]any, 0, argsFor(hits)), clock, hits)
	return l.runArgs(ctx, keys, args, decisions)
}

// runArgs sends one request's KEYS and ARGV alone, fills decisions and
// returns the verdict.
func (l *Limiter) runArgs(ctx context.Context, keys []string, args []any, decisions []limit.Decision) (blocked bool, err error) {
	tracing.RecordBatch(ctx, 1)
	ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
	defer cancel()
	replies, err := l.send(ctx, keys, args, 1)
	if err != nil {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w", len(decisions), err)
	}
	return decode(replies[0], decisions)
}

// send runs the script for requests requests and returns its reply, one
// element per request. The error wraps ErrStore.
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
// returns its verdict: fieldsPerDecision integers per hit, then 1 if the
// request was blocked; or the error that request met.
func decode(reply any, decisions []limit.Decision) (blocked bool, err error) {
	var r []any
	switch v := reply.(type) {
	case error:
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w: %w", len(decisions), ErrStore, v)
	case []any:
		r = v
	}
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

// refused is the error of an Options field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "redislimit.Options", Field: field, Value: v, Want: want}
}
