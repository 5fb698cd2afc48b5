package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/redis/go-redis/v9"
)

// ErrStore reports that Redis could not decide: unreachable, too slow, or
// answering with an error. Every error Evaluate returns because of Redis
// wraps it, so the caller can apply its failure policy with errors.Is.
var ErrStore = errors.New("redis failed")

// DefaultTimeout is the deadline of each Redis call when Options.Timeout is 0.
const DefaultTimeout = 50 * time.Millisecond

// Options configures a Limiter. The zero value is usable.
type Options struct {
	// KeyPrefix is prepended to every key (the reference server's
	// CACHE_KEY_PREFIX). It must not contain '{' or '}'.
	KeyPrefix string
	// Timeout is the deadline of each Redis call; 0 means DefaultTimeout.
	// It bounds socket reads only if the client honours context deadlines,
	// as clients from NewClient do (go-redis's ContextTimeoutEnabled).
	Timeout time.Duration
	// Breaker configures the circuit breaker that fails calls at once
	// while Redis is down; the zero value enables it with its defaults.
	Breaker BreakerOptions
}

// Limiter evaluates limits in Redis. It is safe for concurrent use.
type Limiter struct {
	client  redis.UniversalClient
	cluster *redis.ClusterClient // non-nil when client is a Cluster client
	opts    Options
	breaker *breaker // nil when disabled
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
		return nil, fmt.Errorf("redislimit: key prefix %q contains '{' or '}'", opts.KeyPrefix)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("redislimit: negative timeout %v", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	b, err := newBreaker(opts.Breaker)
	if err != nil {
		return nil, err
	}
	l := &Limiter{client: client, opts: opts, breaker: b}
	l.cluster, _ = client.(*redis.ClusterClient)
	return l, nil
}

// Healthy reports whether the circuit breaker is closed: calls go to Redis.
// It is false while the breaker is open or probing (calls fail at once
// with ErrCircuitOpen), for health checks and metrics.
func (l *Limiter) Healthy() bool { return l.breaker.stateOf() == BreakerClosed }

// BreakerState returns the circuit breaker's state; BreakerClosed when it
// is disabled.
func (l *Limiter) BreakerState() BreakerState { return l.breaker.stateOf() }

// Evaluate decides hits together, with the same contract as
// limit.Memory.Evaluate: decisions[i] answers hits[i] (len(decisions) must
// equal len(hits)); hits on one Key see each other's consumption in order;
// and if any hit of cost > 0 that is not a refund is denied, no hit changes
// any counter. An invalid hit is an error wrapping limit.ErrInvalidSpec or
// limit.ErrNegativeCost (see limit.Hit.Validate), naming the hit's index,
// and Redis is not called; a failure of Redis is an error wrapping ErrStore,
// and then nothing was consumed, except on Cluster as the package
// documentation describes. While the circuit breaker is open (see
// BreakerOptions) it returns at once an error wrapping ErrCircuitOpen.
func (l *Limiter) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) error {
	if len(decisions) != len(hits) {
		return fmt.Errorf("redislimit: %d decisions for %d hits", len(decisions), len(hits))
	}
	if len(hits) == 0 {
		return nil
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return fmt.Errorf("redislimit: hit %d: %w", i, err)
		}
	}
	ok, probe := l.breaker.admit()
	if !ok {
		return fmt.Errorf("redislimit: evaluate %d hits: %w", len(hits), ErrCircuitOpen)
	}
	var clock time.Time
	if l.now != nil {
		clock = l.now()
	} else {
		clock = time.Now()
	}
	var err error
	if l.cluster != nil {
		err = l.evaluateCluster(ctx, clock, hits, decisions)
	} else {
		err = l.run(ctx, clock, hits, decisions)
	}
	l.breaker.done(probe, outcomeOf(ctx, err))
	return err
}

// request returns the script's KEYS and ARGV for hits; clock is the
// server's time, used only for calendar boundaries (and, in tests, as the
// script's now).
func (l *Limiter) request(clock time.Time, hits []limit.Hit) ([]string, []any) {
	keys := make([]string, len(hits))
	args := make([]any, 1, 1+argsPerHit*len(hits))
	args[0] = ""
	if l.now != nil {
		args[0] = strconv.FormatInt(clock.UnixMicro(), 10)
	}
	for i := range hits {
		h := &hits[i]
		keys[i] = Key(l.opts.KeyPrefix, h.Key)
		sp := &h.Spec
		args = append(args,
			int64(sp.Algorithm), h.Cost, flagsArg(h), sp.Limit, sp.WindowMicros(),
			sp.Capacity(), sp.SubWindows())
		if sp.Calendar.IsZero() {
			args = append(args, "", "", "", "")
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

// flagsArg returns a hit's flags argument: 1 for a refund plus 2 for an
// advisory hit.
func flagsArg(h *limit.Hit) string {
	return [4]string{"0", "1", "2", "3"}[b2i(h.Refund)+2*b2i(h.Advisory)]
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// run decides hits, all in one slot, with one script call and fills
// decisions from its reply.
func (l *Limiter) run(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) error {
	keys, args := l.request(clock, hits)
	ctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	reply, err := evaluateScript.Run(ctx, l.client, keys, args...).Int64Slice()
	if err != nil {
		return fmt.Errorf("redislimit: evaluate %d hits: %w: %w", len(hits), ErrStore, err)
	}
	if len(reply) != fieldsPerHit*len(hits) {
		return fmt.Errorf("redislimit: evaluate %d hits: %w: %d integers in reply, want %d", len(hits), ErrStore, len(reply), fieldsPerHit*len(hits))
	}
	for i := range decisions {
		r := reply[fieldsPerHit*i:]
		decisions[i] = limit.Decision{
			Allowed:    r[0] == 1,
			Remaining:  r[1],
			ResetAfter: time.Duration(r[2]) * time.Microsecond,
			RetryAfter: time.Duration(r[3]) * time.Microsecond,
			Never:      r[4] == 1,
		}
	}
	return nil
}

// denied reports whether a decision blocks the whole request (see
// limit.Hit.Blocks).
func denied(h *limit.Hit, d *limit.Decision) bool { return h.Blocks(d) }
