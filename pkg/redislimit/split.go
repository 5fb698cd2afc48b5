package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// perSecondRoute is a Split's default route: windows shorter than a minute
// go to the per-second Redis, as the reference's unit SECOND does. A
// longer window in seconds cannot be told from one in minutes, and stays
// in the main Redis.
func perSecondRoute(sp *limit.Spec) bool { return sp.Window < time.Minute }

// Split is a limit.Limiter over two Redis deployments, as the reference
// server's REDIS_PERSECOND keeps short, busy counters apart. A call with
// hits on both is all-or-nothing, as for the slots of a Cluster (see the
// package documentation). It is safe for concurrent use.
type Split struct {
	limiters [2]*Limiter // main, per-second
	route    func(*limit.Spec) bool
}

// splitNames name the parts of a Split in its errors, by index.
var splitNames = [2]string{"main redis", "per-second redis"}

// NewSplit returns a Split over the Limiters of two Redis deployments.
// route selects the hits that go to perSecond; nil means windows shorter
// than a minute. It must send a counter always to the same Redis: depend
// on its window, say, not its limit, which a reload may change.
func NewSplit(main, perSecond *Limiter, route func(*limit.Spec) bool) (*Split, error) {
	if main == nil || perSecond == nil {
		return nil, fmt.Errorf("redislimit: split needs two limiters, got main %v and per-second %v", main != nil, perSecond != nil)
	}
	if main == perSecond {
		return nil, fmt.Errorf("redislimit: split over one limiter")
	}
	if route == nil {
		route = perSecondRoute
	}
	return &Split{limiters: [2]*Limiter{main, perSecond}, route: route}, nil
}

// Evaluate implements limit.Limiter. A failure of either Redis is an error
// wrapping ErrStore that names it.
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
	// Refused before either side consumes.
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

// Reset deletes counter key from the Redis its spec routes it to; the
// error names that Redis.
func (s *Split) Reset(ctx context.Context, key string, spec limit.Spec) error {
	g := b2i(s.route(&spec))
	if err := s.limiters[g].Reset(ctx, key, spec); err != nil {
		return fmt.Errorf("%s: %w", splitNames[g], err)
	}
	return nil
}
