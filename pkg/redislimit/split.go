package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// PerSecond reports whether a limit's counters belong in the per-second
// Redis of a Split: whether its window is shorter than a minute.
//
// The reference server sends the limits whose unit is SECOND there, with
// any unit_multiplier; a Spec keeps only the window's length. Every window
// shorter than a minute is made of seconds (no other unit is that short),
// so those go where the reference puts them. A window of 60 seconds or
// more written in seconds cannot be told from the same window written in
// minutes, and stays in the main Redis with them: counters of one length
// live together. Routing only windows of exactly one second would instead
// move every "unit: second, unit_multiplier: 5" limit away from where the
// reference keeps it.
func PerSecond(sp *limit.Spec) bool { return sp.Window < time.Minute }

// Split decides limits over two Redis deployments, a limit.Limiter: the hits whose Spec its
// route selects in the per-second one, the others in the main one, as the
// reference server's REDIS_PERSECOND does to keep its short, busy counters
// off the Redis that holds the long ones. It is safe for concurrent use.
//
// A call whose hits all go to one Redis is that Limiter's call: one round
// trip, atomic, batched with concurrent calls. A call with hits on both is
// decided by both at once and is all-or-nothing as a whole: if one side
// denies or fails, what the other consumed is refunded, as the package
// documentation describes for the slots of a Redis Cluster (including the
// round trip during which another request may see it taken).
type Split struct {
	limiters [2]*Limiter // main, per-second
	route    func(*limit.Spec) bool
}

// splitNames name the parts of a Split in its errors, by index.
var splitNames = [2]string{"main redis", "per-second redis"}

// NewSplit returns a Split over main and perSecond, two Limiters of
// different Redis deployments (each may be a single node, Sentinel or a
// Cluster). route selects the per-second hits; nil means PerSecond. route
// must depend only on what a counter's Key identifies (its window, say,
// not its limit, which a reload may change while the counter stays): the
// hits on one counter must always go to the same Redis.
func NewSplit(main, perSecond *Limiter, route func(*limit.Spec) bool) (*Split, error) {
	if main == nil || perSecond == nil {
		return nil, fmt.Errorf("redislimit: split needs two limiters, got main %v and per-second %v", main != nil, perSecond != nil)
	}
	if main == perSecond {
		return nil, fmt.Errorf("redislimit: split over one limiter")
	}
	if route == nil {
		route = PerSecond
	}
	return &Split{limiters: [2]*Limiter{main, perSecond}, route: route}, nil
}

// Evaluate implements limit.Limiter, with the compensation window
// described on Split for calls with hits on both Redis. A failure of
// either Redis is an error wrapping ErrStore (ErrCircuitOpen while its
// breaker is open) that names it, and then what the other consumed is
// given back.
func (s *Split) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	if len(decisions) != len(hits) {
		return false, fmt.Errorf("redislimit: %d decisions for %d hits", len(decisions), len(hits))
	}
	mixed := false
	first := len(hits) > 0 && s.route(&hits[0].Spec)
	for i := 1; i < len(hits) && !mixed; i++ {
		mixed = s.route(&hits[i].Spec) != first
	}
	if !mixed {
		return s.evaluate(ctx, b2i(first), hits, decisions)
	}
	// Both calls, and a compensation, within the main Redis's deadline.
	ctx, cancel := limit.Bound(ctx, s.limiters[0].opts.Timeout)
	defer cancel()
	// Refused before either Redis is called, rather than by one side after
	// the other has consumed.
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return false, fmt.Errorf("redislimit: hit %d: %w", i, err)
		}
	}
	groups := make([][]int, 2)
	for i := range hits {
		g := b2i(s.route(&hits[i].Spec))
		groups[g] = append(groups[g], i)
	}
	return evaluateGroups(ctx, hits, decisions, groups, s.evaluate)
}

// evaluate is the Evaluate call of part g, its errors naming it.
func (s *Split) evaluate(ctx context.Context, g int, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	blocked, err = s.limiters[g].Evaluate(ctx, hits, decisions)
	if err != nil {
		return false, fmt.Errorf("%s: %w", splitNames[g], err)
	}
	return blocked, nil
}
