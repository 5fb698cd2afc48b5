package limit

import (
	"math"
	"time"

	"github.com/floodgate/floodgate/pkg/internal/twin"
)

// The algorithms are pure step functions, which the Lua scripts translate
// line by line (see the package doc): every product that is then added to
// goes through mul. A step gets one counter's state and ok (whether there
// is any), and writes the state after the hit only when outcome.write is
// set.

// MaxCount is the most a window (a fixed window, a sub-window, a sliding
// log) counts, usage charges (Hit.Usage) past its limit included, unless
// twice its limit is more. It is twice the largest limit of a rule plus
// one, so that a fixed window's count fits Redis's layout (below 2^33) and
// every count stays exact in a float64. The Lua scripts share it.
const MaxCount int64 = 1<<33 - 1

// maxDebtMicros is twin.MaxDebt, the most a bucket owes, in µs, the unit
// of the steps.
const maxDebtMicros = int64(twin.MaxDebt / time.Microsecond)

// countCap is the most a window of limit counts: MaxCount, or twice the
// limit when that is more.
func countCap(limit int64) int64 { return max(MaxCount, min(limit, math.MaxInt64/2)*2) }

// outcome is what one step decided and what it did to the state, in the
// units the Lua scripts return: µs and whole hits.
type outcome struct {
	allowed   bool
	never     bool
	remaining int64
	debt      int64 // hits past the limit, after the hit
	// resetAfter, in µs, is also the state's time to live: until it becomes
	// equivalent to none; <= 0 deletes the counter.
	resetAfter int64
	retryAfter int64 // µs
	// write reports that the step changed the state, which must be
	// stored. Denials and peeks never write.
	write bool
}

// decision returns the Decision the outcome stands for.
func (o *outcome) decision() Decision {
	return Decision{
		Allowed:    o.allowed,
		Remaining:  o.remaining,
		Debt:       o.debt,
		ResetAfter: time.Duration(o.resetAfter) * time.Microsecond,
		RetryAfter: time.Duration(o.retryAfter) * time.Microsecond,
		Never:      o.never,
	}
}

// state is one counter's stored state; each algorithm uses its own field.
type state struct {
	fixed  fixedState
	bucket bucketState // TokenBucket and LeakyBucket
	gcra   gcraState
	runs   runs // SlidingWindow and SlidingLog
}

// step applies one hit to st at now and returns its outcome. When it does
// not write, st.runs may be resliced past entries that no longer count,
// but the memory it shares with the stored state is untouched, so that a
// call of one hit may step on the stored state.
//
// A usage hit of cost > 0 that is not a refund is a charge: it consumes
// whether it fits or not, and is allowed iff it fits; one that does not
// fit gets the RetryAfter of the same hit on the state after it, or Never
// when its cost is above the capacity. Before the algorithm runs, a Limit
// of 0 denies a hit of cost > 0 (Never, every other field zero) and allows
// a look or a refund, without touching the state; a cost above
// Spec.Capacity (not a refund nor a charge) is denied with Never and the
// Remaining and ResetAfter of a look.
func step(st *state, ok bool, sp *Spec, now, cost int64, refund, usage bool) outcome {
	if sp.Limit == 0 {
		return outcome{allowed: cost == 0 || refund, never: cost > 0 && !refund}
	}
	force := usage && !refund && cost > 0
	if cost > sp.Capacity() && !refund && !force {
		o := step(st, ok, sp, now, 0, false, false)
		o.allowed, o.never, o.retryAfter = false, true, 0
		return o
	}
	w := sp.WindowMicros()
	var o outcome
	switch sp.Algorithm {
	case FixedWindow:
		start, end := sp.fixedWindowAt(now)
		o = stepFixedWindow(&st.fixed, ok, start, end, sp.Limit, now, cost, refund, force)
	case SlidingWindow:
		st.runs, o = stepSlidingWindow(st.runs, sp.Limit, w, sp.SubWindows(), now, cost, refund, force)
	case SlidingLog:
		st.runs, o = stepSlidingLog(st.runs, sp.Limit, w, now, cost, refund, force)
	case TokenBucket:
		o = stepTokenBucket(&st.bucket, ok, sp.Limit, w, sp.Capacity(), now, cost, refund, force)
	case LeakyBucket:
		o = stepLeakyBucket(&st.bucket, ok, sp.Limit, w, sp.Capacity(), now, cost, refund, force)
	case GCRA:
		o = stepGCRA(&st.gcra, ok, sp.Limit, w, sp.Capacity(), now, cost, refund, force)
	}
	if force && !o.allowed && cost > sp.Capacity() {
		o.never, o.retryAfter = true, 0
	}
	return o
}

// firstPass returns the smallest d >= 1 for which pass(d) holds, where pass
// is monotone (false, then true from some d on), pass(0) is false, and guess
// is an estimate of the answer. Rates in floats cannot be inverted exactly
// (ceil((c − t0)/r) may miss by a µs either way), so the answer is found by
// asking the very predicate the step decides with: about two calls when the
// guess is right or 1 off, O(log error) otherwise.
func firstPass(guess int64, pass func(int64) bool) int64 {
	guess = max(guess, 1)
	var lo, hi int64 // !pass(lo) (lo == 0 stands for pass(0), false), pass(hi)
	if pass(guess) {
		lo, hi = guess-1, guess
		for step := int64(1); lo > 0 && pass(lo); step *= 2 {
			lo, hi = max(0, lo-step), lo
		}
	} else {
		lo, hi = guess, guess+1
		for step := int64(2); !pass(hi); step *= 2 {
			lo, hi = hi, hi+step
		}
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		if pass(mid) {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi
}

// mul returns a·b rounded to float64 before it is used. Go may fuse x*y + z
// into one fused multiply-add (it does on arm64, and on amd64 with
// GOAMD64=v3), which rounds once instead of twice; Lua evaluates every
// operation separately. The explicit conversion forbids the fusion.
func mul(a, b float64) float64 { return float64(a * b) }

// ceilMicros returns ceil(x) as whole µs.
func ceilMicros(x float64) int64 { return int64(math.Ceil(x)) }

// floorDiv returns floor(a/b) for b > 0, as Lua's math.floor(a / b) does
// for the integers (exact in a double) this package divides.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
