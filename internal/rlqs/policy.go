package rlqs

import (
	"math"
	"time"
	"unique"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/pkg/limit"
)

// The assignment policy is pure functions of what the store said. A stream
// gets its share of the rate the fleet may admit at under the slowest of
// the bucket's limits, as a token bucket; a spent fixed window is deny-all
// until it resets. What Envoy admits is charged at each report, so the
// pace corrects itself: a fleet that admitted too much finds less left.

// kind is what an assignment does.
type kind uint8

const (
	allowAll kind = iota + 1
	denyAll
	tokenBucket
)

// slowFill is the fill interval of rates below fastRate, in whole seconds
// as Envoy 1.40 reads them.
const slowFill = 10 * time.Second

// fastRate is the rate per second from which a token bucket refills every
// second; below it, every slowFill, so that the rate is not rounded to 1
// or 0 a second.
const fastRate = 1.5

// burstParts makes a fast token bucket hold a quarter second's tokens:
// Envoy starts every new bucket full, so each change admits max_tokens
// over the pace, and a quarter second's still absorbs steady jitter.
const burstParts = 4

// strategy is an assignment, comparable: Envoy keeps a token bucket's
// tokens when sent the same one again, and starts a new full one otherwise.
type strategy struct {
	kind kind
	// The token bucket's tokens_per_fill, max_tokens and fill_interval.
	perFill, maxTokens uint32
	fill               time.Duration
}

func (s strategy) proto() *typev3.RateLimitStrategy {
	switch s.kind {
	case tokenBucket:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens:     s.maxTokens,
			TokensPerFill: wrapperspb.UInt32(s.perFill),
			FillInterval:  durationpb.New(s.fill),
		}}}
	case denyAll:
		return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_DENY_ALL}}
	}
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: typev3.RateLimitStrategy_ALLOW_ALL}}
}

// action names the strategy in metrics.
func (s strategy) action() string {
	return [...]string{allowAll: "allow_all", denyAll: "deny_all", tokenBucket: "token_bucket"}[s.kind]
}

// counter is one counted limit of a bucket.
type counter struct {
	// key is interned, since a fleet's streams hold the same buckets.
	key  unique.Handle[string]
	spec limit.Spec
	dec  limit.Decision // what the store said in the last round
	end  time.Time      // when dec's fixed window ends
}

// share is a stream's part of the fleet's demand: (own+1)/(fleet+1), at
// most 1. The +1 gives an idle bucket a trickle, so that its next request
// passes and is reported, and keeps a lone stream's share at 1 when the
// fleet's estimate falls below the stream's own count.
func share(own, fleet int64) float64 {
	return min(1, float64(max(own, 0)+1)/float64(max(fleet, 0)+1))
}

// fleetRate returns the rate per second at which the whole fleet may admit
// under c over the next horizon without passing the limit, or spent with
// how long until c admits again (0 for unknown). A fixed window's remaining
// count is spread over what is left of it; the other algorithms give their
// sustained rate plus what c holds now spread over the horizon.
func fleetRate(c *counter, horizon time.Duration) (perSecond float64, spent bool, until time.Duration) {
	r := float64(c.dec.Remaining)
	l, w := float64(c.spec.Limit), c.spec.Window.Seconds()
	switch c.spec.Algorithm {
	case limit.FixedWindow:
		if c.dec.Remaining <= 0 {
			return 0, true, c.dec.ResetAfter
		}
		return r / max(c.dec.ResetAfter.Seconds(), 1), false, 0
	case limit.TokenBucket, limit.LeakyBucket, limit.GCRA:
		// The counter holds r now and refills at l per w.
		perSecond = l/w + r/horizon.Seconds()
	default:
		// Sliding windows: r now, and the window's hits slide out at
		// about the pace they came in. A window no longer than the
		// horizon renews whole within it: its sustained rate.
		if w <= horizon.Seconds() {
			perSecond = l / w
		} else {
			perSecond = r/horizon.Seconds() + max(l-r, 0)/w
		}
	}
	if perSecond <= 0 {
		return 0, true, 0
	}
	return perSecond, false, 0
}

// decide returns a stream's assignment for a bucket with counters cs, given
// its demand and the fleet's and prev, the assignment in force, and how
// long until the fixed window that decides, if any, ends.
func decide(cs []counter, own, fleet int64, horizon time.Duration, prev strategy) (strategy, time.Duration) {
	if len(cs) == 0 {
		return strategy{kind: allowAll}, 0
	}
	sh := share(own, fleet)
	rate, budget := math.Inf(1), math.Inf(1)
	var wake time.Duration
	for i := range cs {
		c := &cs[i]
		r, spent, until := fleetRate(c, horizon)
		if spent {
			return strategy{kind: denyAll}, until
		}
		if c.spec.Algorithm == limit.FixedWindow {
			r *= unseen(sh, horizon, c.dec.ResetAfter, elapsed(c, horizon))
			budget = min(budget, float64(c.dec.Remaining))
			if wake == 0 || c.dec.ResetAfter < wake {
				wake = c.dec.ResetAfter
			}
		}
		rate = min(rate, r)
	}
	return tokens(rate*sh, budget*sh, prev), wake
}

// unseen is the part of a fixed window's remaining count the fleet has not
// admitted unseen: the other streams report on average half an interval
// after this one, and the last round of a window, which none corrects,
// would overshoot. Nothing was admitted before the window began.
func unseen(share float64, horizon, left, elapsed time.Duration) float64 {
	if left <= 0 {
		return share
	}
	lag := max(0, min(horizon/2, left, elapsed))
	return 1 - (1-share)*lag.Seconds()/left.Seconds()
}

// elapsed returns how long c's window has run; for a calendar window,
// whose length varies, one report interval.
func elapsed(c *counter, horizon time.Duration) time.Duration {
	if c.spec.Calendar != nil {
		return horizon
	}
	return c.spec.Window - c.dec.ResetAfter
}

// tokens returns the token bucket of rate perSecond holding at most budget
// tokens (at least 1). prev's tokens_per_fill is kept within rounding, so
// that a steady rate keeps Envoy's bucket and its tokens. A bucket that
// differs from prev only by its fill interval gets one more token: Envoy
// 1.40 keeps its old bucket when only fill_interval's seconds change.
func tokens(perSecond, budget float64, prev strategy) strategy {
	fill, n := time.Second, perSecond
	if perSecond < fastRate {
		fill, n = slowFill, perSecond*slowFill.Seconds()
	}
	per := toUint32(max(1, math.Round(n)))
	if prev.kind == tokenBucket && prev.fill == fill &&
		math.Abs(n-float64(prev.perFill)) < max(0.75, 0.05*float64(prev.perFill)) {
		per = prev.perFill
	}
	most := toUint32(math.Ceil(float64(per) / burstParts))
	if fill != time.Second {
		most = toUint32(math.Ceil(float64(per) / slowFill.Seconds()))
	}
	most = min(most, toUint32(max(1, math.Floor(budget))))
	s := strategy{kind: tokenBucket, perFill: per, maxTokens: most, fill: fill}
	if prev.kind == tokenBucket && s != prev && s.perFill == prev.perFill && s.maxTokens == prev.maxTokens {
		if s.maxTokens < math.MaxUint32 {
			s.maxTokens++
		} else {
			s.maxTokens--
		}
	}
	return s
}

// toUint32 converts a non-negative float, saturating.
func toUint32(f float64) uint32 {
	return uint32(min(f, math.MaxUint32))
}
