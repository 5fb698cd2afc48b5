// Package limit says what a rate limit decides, and decides it in memory.
//
// A Spec is one limit: an Algorithm, a Limit per Window, and for some
// algorithms a Burst, a Precision or a Calendar. A Hit asks a limit to
// admit a request of some Cost against one counter, named by its Key; a
// Decision is the answer. A Limiter decides the hits of one request
// together. Memory is the Limiter that keeps its counters in process
// memory; the Redis and Memcached stores keep the same contract.
//
// # The contract
//
//   - Units: costs, Remaining and Debt are whole hits; durations are used
//     at microsecond resolution.
//   - Zero values: the zero Spec is not valid (its window is 0); a Limit of
//     0 denies every hit of cost > 0; Cost 0 looks at a counter without
//     changing it, and is allowed unless the limit is already exceeded;
//     the zero Mode is Enforce; a nil Calendar aligns windows on the Unix
//     epoch.
//   - A denied hit changes nothing. A cost above the limit's capacity
//     (Spec.Capacity) can never pass: it is denied with Decision.Never.
//   - A refund (Hit.Refund) gives its cost back, never beyond the
//     capacity, and is always allowed.
//   - Debt after a charge: a usage hit (Hit.Usage) reports what was
//     already used, and is consumed even when it does not fit, taking its
//     counter past the limit; Decision.Debt says by how much. A window
//     counts the excess (up to MaxCount) until those hits
//     leave it; a bucket pays it back at its rate (for at most
//     10 years). A debt lets no later hit pass
//     sooner than it would have without the charge.
//   - The hits of one call decide together (Limiter), all or nothing: no
//     other call sees its counters half changed. Every Limiter is safe for
//     concurrent use.
//
// Every algorithm works on integer microseconds since the Unix epoch and
// computes fractions in float64 in the order the Lua scripts of package
// redislimit do, so that Go and Redis give bit-identical answers: Memory
// is the oracle those scripts are tested against.
package limit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Algorithm names one of the six rate-limit algorithms. The zero value is
// FixedWindow, the behaviour of envoyproxy/ratelimit.
type Algorithm uint8

// The algorithms, in the order Algorithms returns them. Their exact arithmetic is documented on their step functions
// (stepFixedWindow, ...), which the Lua scripts mirror.
const (
	// FixedWindow counts hits in [k·W, (k+1)·W) (or a calendar window) and
	// allows a hit when count + cost <= Limit.
	FixedWindow Algorithm = iota
	// SlidingWindow estimates the hits of the last W from Precision
	// sub-window counters, weighting the oldest one linearly. Precision 1
	// is the classic two-window estimate.
	SlidingWindow
	// SlidingLog keeps the time of every admitted hit of the last W:
	// exact, and O(Limit) memory per counter.
	SlidingLog
	// TokenBucket refills at Limit per W up to Burst tokens and starts
	// full; a hit takes cost tokens.
	TokenBucket
	// LeakyBucket drains at Limit per W; a hit adds cost and passes while
	// the level stays <= Burst.
	LeakyBucket
	// GCRA stores one theoretical arrival time: the token bucket's
	// decisions in a single number.
	GCRA

	numAlgorithms
)

var algorithmNames = [numAlgorithms]string{
	FixedWindow:   "fixed_window",
	SlidingWindow: "sliding_window",
	SlidingLog:    "sliding_log",
	TokenBucket:   "token_bucket",
	LeakyBucket:   "leaky_bucket",
	GCRA:          "gcra",
}

// String returns the algorithm's name as written in rule files, such as
// "token_bucket".
func (a Algorithm) String() string {
	if a < numAlgorithms {
		return algorithmNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// HasBurst reports whether the algorithm takes a Burst (a bucket capacity).
func (a Algorithm) HasBurst() bool { return a.takes(paramBurst) }

// Algorithms returns every algorithm, in the order of their constants.
func Algorithms() []Algorithm {
	out := make([]Algorithm, numAlgorithms)
	for i := range out {
		out[i] = Algorithm(i)
	}
	return out
}

// UnmarshalText sets a to the algorithm with the given rule-file name, such
// as "token_bucket". It returns an error naming the valid names, and
// leaves a as it was, when there is none.
func (a *Algorithm) UnmarshalText(name []byte) error {
	for i, n := range algorithmNames {
		if n == string(name) {
			*a = Algorithm(i)
			return nil
		}
	}
	last := len(algorithmNames) - 1
	want := strings.Join(algorithmNames[:last], ", ") + " or " + algorithmNames[last]
	return fmt.Errorf("unknown algorithm %q (want %s)", name, want)
}

// Spec is one limit's parameters. Specs compare with ==. The zero value is
// a fixed window of length 0, which is not valid (see Validate).
type Spec struct {
	Algorithm Algorithm
	// Limit is the number of hits allowed per Window (a rule's
	// requests_per_unit); for buckets, the rate: Limit per Window.
	Limit int64
	// Window is the window length, or the period of a bucket's rate. With
	// a Calendar it is a day, a week, 30 days (a month) or 365 days (a
	// year), and the calendar places its boundaries.
	Window time.Duration
	// Burst is a bucket's capacity (TokenBucket, LeakyBucket, GCRA): the
	// most hits that may pass at once. Zero means Limit.
	Burst int64
	// Precision is a SlidingWindow's number of sub-windows. Zero means 1.
	Precision int
	// Calendar, when not nil, makes a FixedWindow follow the wall clock of
	// that time zone instead of starting at multiples of Window since the
	// epoch: a day starts at local midnight (and lasts 23 or 25 hours when
	// daylight saving changes), a week on Monday, a month on the 1st, a
	// year on January 1st.
	Calendar *time.Location
}

// Capacity returns the most a single hit may cost and still pass: Burst (or
// Limit when Burst is zero) for bucket algorithms, Limit otherwise.
func (s Spec) Capacity() int64 {
	if s.Algorithm.HasBurst() && s.Burst > 0 {
		return s.Burst
	}
	return s.Limit
}

// WindowMicros returns the window length in whole microseconds.
func (s Spec) WindowMicros() int64 { return s.Window.Microseconds() }

// SubWindows returns the number of sub-windows, treating zero as 1.
func (s Spec) SubWindows() int64 { return int64(max(s.Precision, 1)) }

// Hit asks a limit to admit one request of a given cost against one counter.
type Hit struct {
	// Key names the counter: hits with equal Keys share it. A counter
	// whose Spec changes needs a new Key, since its state is read as the
	// Spec says it was written.
	Key  string
	Spec Spec
	// Cost is what the request counts for (Envoy's hits_addend); 0 looks
	// without consuming.
	Cost int64
	// Refund gives Cost back instead of taking it (Envoy's
	// is_negative_hits).
	Refund bool
	// Usage marks a report of what was used (tokens, bytes) when a
	// response ends: it is decided like any hit and applied whatever the
	// decision and the call's verdict (see the package doc on debt); one
	// that does not fit is denied, with the RetryAfter of the same hit on
	// the state it left.
	Usage bool
	// Mode says what the hit's denial does to its call.
	Mode Mode
	// Group names the quota a Quota hit belongs to; ignored otherwise.
	Group uint32
}

// Mode says how a hit's denial bears on the rest of its Evaluate call.
// The zero value is Enforce.
type Mode uint8

const (
	// Enforce: the call is blocked when the hit is denied (cost > 0, not a
	// refund).
	Enforce Mode = iota
	// Advisory: the hit is decided and counted like any other, but its
	// denial blocks nothing (shadow mode).
	Advisory
	// Quota: the hit belongs to the quota of the Quota hits of its call
	// with the same Group, which is over when any of them is denied (a
	// look, cost 0, is denied when the limit is already exceeded). The
	// call is blocked when every quota is over; otherwise it consumes its
	// allowed hits, and the denied ones write nothing.
	Quota

	numModes
)

var modeNames = [numModes]string{Enforce: "enforce", Advisory: "advisory", Quota: "quota"}

// String returns the mode's name, such as "quota".
func (m Mode) String() string {
	if m < numModes {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// Blocked reports whether decisions, the decisions for hits, block their
// Evaluate call, as the Modes say. Every Limiter applies this rule once,
// before it writes anything, and returns the verdict from Evaluate.
// len(decisions) must be at least len(hits).
func Blocked(hits []Hit, decisions []Decision) bool {
	quota := false
	for i := range hits {
		h := &hits[i]
		if h.Mode == Enforce && !decisions[i].Allowed && h.Cost > 0 && !h.Refund {
			return true
		}
		quota = quota || h.Mode == Quota
	}
	if !quota {
		return false
	}
	// Every quota is over when each allowed Quota hit has a denied one in
	// its group. Calls have few hits: a scan beats a map.
	for i := range hits {
		if hits[i].Mode == Quota && decisions[i].Allowed && !quotaOver(hits, decisions, hits[i].Group) {
			return false
		}
	}
	return true
}

// quotaOver reports whether a Quota hit of group is denied.
func quotaOver(hits []Hit, decisions []Decision, group uint32) bool {
	for i := range hits {
		if hits[i].Mode == Quota && hits[i].Group == group && !decisions[i].Allowed {
			return true
		}
	}
	return false
}

// Limiter decides the hits of one request together, as the package doc
// says. Its implementations (Memory, redislimit.Limiter, the Memcached
// store, the deny cache) say only where they differ.
//
// Evaluate sets decisions[i] to the decision for hits[i], deciding every
// hit at one instant of the store's clock and in order, so that a later
// hit on a Key sees an earlier one's consumption, and reports whether the
// call was blocked (Blocked). A call that is not blocked consumes every
// allowed hit and applies every refund. A blocked call applies only its
// usage hits, in order, as if they were its only hits; its other allowed
// hits then report what a look (cost 0) sees after them.
//
// An error means nothing was decided nor consumed (a store spread over
// several servers that cannot promise this says so), and blocked is
// false. An invalid hit is an error naming its index and wrapping
// ErrInvalidSpec (Hit.Validate), as is len(decisions) != len(hits); a
// store's failure wraps its package's sentinel (such as
// redislimit.ErrStore), and ErrCircuitOpen when the store was not asked
// because it failed recently.
//
// The stores also have Reset(ctx, key, spec), which forgets a counter so
// that an operator can unblock a client; it is not part of this contract.
type Limiter interface {
	Evaluate(ctx context.Context, hits []Hit, decisions []Decision) (blocked bool, err error)
}

// Validate reports whether the hit can be evaluated: its Spec passes
// Spec.Validate's checks, except the ones a store can do without (a
// parameter the algorithm ignores, a costly sliding log), its Cost is not
// negative and its Mode is known. The error wraps ErrInvalidSpec.
func (h Hit) Validate() error {
	if err := h.Spec.check(evaluating); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if h.Cost < 0 {
		return fmt.Errorf("%w: %d", errNegativeCost, h.Cost)
	}
	if h.Mode >= numModes {
		return fmt.Errorf("%w: %v", errInvalidMode, h.Mode)
	}
	return nil
}

// ErrInvalidSpec is wrapped by every error of Hit.Validate (a Spec it
// rejects, a negative Cost or an unknown Mode), so that callers tell bad
// input from a store failure.
var ErrInvalidSpec = errors.New("invalid limit spec")

// hitError is a problem of a Hit other than its Spec's, and an
// ErrInvalidSpec too.
type hitError string

const (
	errNegativeCost hitError = "negative cost"
	errInvalidMode  hitError = "unknown hit mode"
)

func (e hitError) Error() string        { return string(e) }
func (e hitError) Is(target error) bool { return target == ErrInvalidSpec }

// DefaultDeadline is how long a store's Evaluate may take when its options
// set none; past it, the caller's failure policy answers. A store bounds
// its own calls: its callers set no timer.
const DefaultDeadline = 50 * time.Millisecond

// Bound returns ctx cut d from now, unless ctx ends sooner: then ctx
// itself, without a timer, which spares a store's call behind Envoy (whose
// own deadline is usually the sooner) a timer per request. The CancelFunc
// must be called.
func Bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// ErrCircuitOpen is wrapped by the error of a call that did not ask its
// store because a circuit breaker is open after recent failures, so that
// a fast failure reads apart from a store that was asked and failed.
var ErrCircuitOpen = errors.New("circuit open")

// Decision is a limit's answer to one Hit. For example, if a fixed window
// allows 10 hits per minute, has counted 6 this minute and ends in 20 s, a
// hit of cost 1 gets Allowed, Remaining 3, ResetAfter 20 s.
type Decision struct {
	Allowed bool
	// Remaining is how many more hits of cost 1 the limit would admit now,
	// after this hit. Never negative.
	Remaining int64
	// Debt is how far past its limit the counter is after this hit, in
	// hits rounded up: what usage charges took beyond it, or what a
	// lowered limit left over. When it is not 0, Remaining is 0.
	Debt int64
	// ResetAfter is the time until the counter is whole again: the end of
	// the window, until the bucket is full, until the newest logged hit
	// leaves a sliding log.
	ResetAfter time.Duration
	// RetryAfter is, for a denied hit, the time until the same hit could
	// pass if nothing else happened. Zero when allowed, and when Never.
	RetryAfter time.Duration
	// Never reports that the cost exceeds what this limit can ever admit
	// (Spec.Capacity), so retrying cannot help.
	Never bool
}
