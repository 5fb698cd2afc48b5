// Package limit owns what a rate limit means: the six algorithms, their
// parameters (Spec), the request to evaluate them (Hit), their answer
// (Decision), and an in-memory implementation (Memory) that is both the
// server's store when no Redis is configured and the oracle the Redis Lua
// scripts are tested against.
//
// It imports nothing of floodgate's: rules produce Specs, limiters consume
// them, and the gRPC layer turns Decisions into answers.
//
// # Time
//
// Every algorithm works on integer microseconds since the Unix epoch ("now")
// and on window lengths in microseconds. Fractions (tokens, theoretical
// arrival times) are float64 computed in exactly the order documented on each
// algorithm, so that Lua (whose numbers are C doubles) and Go produce
// bit-identical results. Stored fractions are written with 17 significant
// digits so they survive a round trip through a string.
//
// # Semantics shared by all algorithms
//
//   - A hit has a cost c >= 0. Cost 0 looks at the state without changing it
//     and is allowed when a hit of cost 0 would be (so it reports whether the
//     limit is already exceeded, as envoyproxy/ratelimit does for hits_addend 0).
//   - A denied hit changes nothing: no state is written.
//   - A cost larger than the capacity (Limit for window algorithms, Burst for
//     bucket algorithms) can never pass: it is denied at once with
//     Decision.Never set and RetryAfter 0.
//   - A refund (Hit.Refund, envoy's is_negative_hits) gives c back, never
//     beyond the capacity, and is always allowed.
//   - A usage hit (Hit.Usage) reports what was used: it is decided like any
//     other hit, and consumed whatever the decision, taking its counter past
//     its limit when it does not fit (a debt). Windows count past the
//     limit (up to MaxCount) until the counted hits leave the window;
//     buckets owe the debt and pay it back at their rate (for at most
//     MaxDebt). A debt makes no later hit pass earlier than it would have
//     without the charge, and lasts no longer than the debt at the limit's
//     rate (or the window).
//   - Hits of one Evaluate call decide together, all or nothing: the call
//     is blocked (see Blocked and Mode) or every allowed hit consumes; a
//     blocked call changes no state but its usage hits', and Evaluate says
//     which it was. Two hits of one call on the same key see each other's
//     consumption.
package limit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Algorithm names one of the six rate-limit algorithms. The zero value is
// FixedWindow, the behaviour of envoyproxy/ratelimit.
type Algorithm uint8

// The algorithms. Their exact semantics are documented on the step functions
// in algorithms.go; the Lua scripts of package redislimit mirror them.
const (
	// FixedWindow counts hits in [k·W, (k+1)·W) (or a calendar window) and
	// allows a hit when count + cost <= Limit.
	FixedWindow Algorithm = iota
	// SlidingWindow estimates the hits of the last W from Precision
	// sub-window counters, weighting the oldest partial sub-window linearly.
	// Precision 1 is the classic two-window estimate.
	SlidingWindow
	// SlidingLog keeps the time of every admitted hit of the last W: exact,
	// and O(Limit) memory per counter.
	SlidingLog
	// TokenBucket refills continuously at Limit per W up to Burst tokens and
	// starts full; a hit takes cost tokens.
	TokenBucket
	// LeakyBucket is a meter that drains continuously at Limit per W; a hit
	// adds cost and passes while the level stays <= Burst.
	LeakyBucket
	// GCRA stores one theoretical arrival time: the token bucket's decisions
	// in a single number.
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
	return fmt.Errorf("unknown algorithm %q (want fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or gcra)", name)
}

// Spec is one limit's parameters. Specs are compared by value; the zero value
// is a fixed window of length 0 and is not valid (see Validate).
type Spec struct {
	// Algorithm decides how hits are counted.
	Algorithm Algorithm
	// Limit is the number of hits allowed per Window (the rule's
	// requests_per_unit). For bucket algorithms it is the refill or drain
	// rate: Limit per Window. Zero blocks every hit of cost > 0.
	Limit int64
	// Window is the window length, or the period of the refill rate. It is
	// used at microsecond resolution. For calendar windows it is the nominal
	// length (e.g. 30 days for a month) and Calendar decides the boundaries.
	Window time.Duration
	// Burst is the bucket capacity for TokenBucket, LeakyBucket and GCRA:
	// the most hits that may pass at once. Zero means Limit. Ignored by the
	// other algorithms.
	Burst int64
	// Precision is the number of sub-windows of a SlidingWindow. Zero means 1.
	// Ignored by the other algorithms.
	Precision int
	// Calendar, when set, makes FixedWindow windows follow the calendar in a
	// time zone instead of starting at multiples of Window since the epoch.
	Calendar Calendar
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
func (s Spec) SubWindows() int64 {
	if s.Precision < 1 {
		return 1
	}
	return int64(s.Precision)
}

// Hit asks a limit to admit one request of a given cost against one counter.
type Hit struct {
	// Key identifies the counter. Hits with equal Keys share state; callers
	// make Keys injective over everything that must not share a counter.
	Key string
	// Spec is the limit to apply. Changing a counter's algorithm or window
	// must come with a new Key: state is read as the Spec says it was written.
	Spec Spec
	// Cost is the number of hits this request counts for (envoy's
	// hits_addend). Zero looks without consuming.
	Cost int64
	// Refund gives Cost back instead of taking it (envoy's is_negative_hits),
	// never beyond the limit's capacity. A refund is always allowed.
	Refund bool
	// Usage marks a report of usage (tokens, bytes) rather than a request
	// to admit: it is decided as any hit (Allowed when it fits), and applied
	// whatever the decision and whatever the call's verdict. A usage hit
	// that does not fit is consumed all the same, taking its counter past
	// its limit (see the package doc on debt); a usage refund gives back
	// even in a blocked call. Envoy charges usage when a response ends,
	// and does not read the answer.
	Usage bool
	// Mode says what the hit's denial does to its call: block it
	// (Enforce), nothing (Advisory), or block it together with every
	// other quota of the call (Quota). See Blocked.
	Mode Mode
	// Group names the quota a Quota hit belongs to: the Quota hits of one
	// call with equal Group are one quota (say, the limits of one
	// descriptor), over when any of them is denied. Ignored for the other
	// modes.
	Group uint32
}

// Mode says how a hit's denial bears on the rest of its Evaluate call.
// The zero value is Enforce.
type Mode uint8

const (
	// Enforce: the call is blocked when the hit is refused (denied, of
	// cost > 0, not a refund).
	Enforce Mode = iota
	// Advisory: the hit is decided like any other, and consumes when
	// allowed and the call consumes, but its denial blocks nothing (it
	// writes nothing for itself, as any denied hit). For limits that are
	// counted and reported but never reject (shadow mode).
	Advisory
	// Quota: the hit belongs to a quota (Hit.Group), over when any of its
	// hits is denied (a hit of cost 0 is denied when its limit is already
	// exceeded); the call is blocked when every quota of the call is over.
	// A quota that is over while another is not blocks nothing: the call
	// consumes its other allowed hits, and the denied ones write nothing.
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
// Evaluate call, which then consumes nothing: an Enforce hit of cost > 0,
// not a refund, is denied; or the call has Quota hits and every quota
// (Quota hits of one Group) has a denied hit. It is the one rule every
// Limiter applies, in one pass, before anything is written; the Lua script
// of package redislimit mirrors it. A Limiter returns its verdict from
// Evaluate, so that a caller never applies the rule again. len(decisions)
// must be at least len(hits).
func Blocked(hits []Hit, decisions []Decision) bool {
	quota := false
	for i := range hits {
		h, d := &hits[i], &decisions[i]
		switch h.Mode {
		case Enforce:
			if !d.Allowed && h.Cost > 0 && !h.Refund {
				return true
			}
		case Quota:
			quota = true
		}
	}
	if !quota {
		return false
	}
	// Every quota is over when each allowed Quota hit has a denied one in
	// its group. Calls have few hits: a scan beats a map.
	for i := range hits {
		if hits[i].Mode != Quota || !decisions[i].Allowed {
			continue
		}
		over := false
		for j := range hits {
			if hits[j].Mode == Quota && hits[j].Group == hits[i].Group && !decisions[j].Allowed {
				over = true
				break
			}
		}
		if !over {
			return false
		}
	}
	return true
}

// Limiter decides the hits of one request together. It is the one
// contract of every store (Memory, package redislimit's Limiter and Split,
// package memcachelimit's Limiter) and of every wrapper (package
// denycache's Cache); they document only where they differ from it.
//
// Evaluate sets decisions[i] to the decision for hits[i], deciding every
// hit at one instant of the store's clock, and reports whether the call
// was blocked:
//
//   - Hits are applied in order to working copies of their counters, so a
//     later hit on a Key sees an earlier one's consumption.
//   - All or nothing: if the decisions block the call (Blocked, which
//     applies each hit's Mode), no counter changes but by the usage hits
//     (Hit.Usage), which are applied in order as if they were the call's
//     only hits, each with its own Decision; every other allowed hit's
//     Decision describes the state after them as a hit of cost 0 sees it
//     (see Decision). Otherwise every allowed hit consumes, every refund
//     gives back and every usage hit is applied. The store decides this in
//     the same pass, atomically: no other call sees a counter in between.
//   - blocked is that verdict, from where it was decided (a store whose
//     call spans several atomic parts decides it over all of their
//     decisions): the caller reads it rather than applying Blocked again.
//     It is false with an error.
//   - An error means nothing was decided and nothing consumed (a store
//     that cannot guarantee that, such as one spread over several
//     servers, says so). len(decisions) != len(hits) and an invalid hit
//     are errors, the latter naming the hit's index and wrapping
//     ErrInvalidSpec or ErrNegativeCost (Hit.Validate); a failure of the
//     store wraps a sentinel of the store's package (such as
//     redislimit.ErrStore), and ErrCircuitOpen when the store was not
//     asked because it failed recently.
//
// Implementations are safe for concurrent use.
//
// The stores also have Reset(ctx, key, spec), which deletes a counter so
// that its next hit finds no state (an operator unblocking a client). It
// is not part of this contract, which only decides: a look at a counter
// is a hit of cost 0 here, and changes nothing.
type Limiter interface {
	Evaluate(ctx context.Context, hits []Hit, decisions []Decision) (blocked bool, err error)
}

// Validate reports whether the hit can be evaluated: its Spec passes
// Spec.Validate's checks, except the ones a store can do without (a
// parameter the algorithm ignores, a costly sliding log), its Cost is not
// negative and its Mode is known. The error wraps ErrInvalidSpec, and
// ErrNegativeCost for a negative Cost.
func (h Hit) Validate() error {
	if err := h.Spec.check(evaluating).err(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	if h.Cost < 0 {
		return fmt.Errorf("%w: %d", ErrNegativeCost, h.Cost)
	}
	if h.Mode >= numModes {
		return fmt.Errorf("%w: %v", errInvalidMode, h.Mode)
	}
	return nil
}

// Errors wrapped by Hit.Validate, so callers can tell bad input
// (errors.Is) from a store failure.
var (
	// ErrInvalidSpec is wrapped by every error of Hit.Validate: a Spec it
	// rejects, a negative Cost or an unknown Mode.
	ErrInvalidSpec = errors.New("invalid limit spec")
	// ErrNegativeCost reports a Hit with Cost < 0.
	ErrNegativeCost error = &hitError{"negative cost"}

	errInvalidMode = &hitError{"unknown hit mode"}
)

// hitError is a problem of a Hit other than its Spec's. It is an
// ErrInvalidSpec too, so that one errors.Is tells any bad input from a
// store failure.
type hitError struct{ msg string }

func (e *hitError) Error() string        { return e.msg }
func (e *hitError) Is(target error) bool { return target == ErrInvalidSpec }

// DefaultDeadline is how long a store's Evaluate call may take when its
// options set no deadline (redislimit.Options.Timeout,
// memcachelimit.Options.Timeout): a round trip to Redis in one region takes
// a fraction of it, and past it the caller's failure policy answers. A
// store bounds its own calls; its callers set no timer of their own.
const DefaultDeadline = 50 * time.Millisecond

// Bound returns ctx cut d from now, unless ctx ends sooner: then ctx
// itself, without a timer. The CancelFunc must be called.
func Bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// ErrCircuitOpen is wrapped by the error of an Evaluate call that did not
// try its store because a circuit breaker is open (recent calls failed),
// so that a caller can tell a fast failure from a store that was asked
// and failed. Its text reads well before a store's own wrapping: "circuit
// open after repeated failures: redis failed".
var ErrCircuitOpen = errors.New("circuit open")

// Decision is a limit's answer to one Hit. For example, if a fixed window
// allows 10 hits per minute, has counted 6 this minute and the window ends in
// 20 s, a hit of cost 1 gets Allowed, Remaining 3, ResetAfter 20 s.
//
// When the Evaluate call is blocked (Blocked), it consumes nothing but its
// usage hits, and an allowed hit's Decision says so: Allowed, with
// Remaining and ResetAfter those of a hit of cost 0 against the state as
// stored after the call (in the example, Remaining 4). A denied hit's
// Decision is its own verdict at its turn in the call, which may count
// earlier hits of the call on its counter. A usage hit's Decision describes
// the state it left: a charge that did not fit is denied, with Remaining 0
// and the RetryAfter of the same hit against that state (Never when it
// costs more than the capacity).
type Decision struct {
	// Allowed reports whether this limit admits the hit.
	Allowed bool
	// Remaining is how many more hits of cost 1 this limit would admit right
	// now, after this hit if it was allowed and consumed. Never negative.
	Remaining int64
	// Debt is how far past its limit the counter is after this hit, in hits
	// (rounded up): what usage charges (Hit.Usage) took beyond it, still
	// counted in a window or still owed by a bucket, or what a limit
	// lowered under the counter left over. 0 when the counter is within
	// its limit. When it is not, Remaining is 0, and the counter has used
	// its capacity plus Debt.
	Debt int64
	// ResetAfter is the time until the counter is whole again: the end of the
	// current window for window algorithms, the time until the bucket is full
	// for bucket algorithms, until the newest logged hit leaves a sliding log.
	ResetAfter time.Duration
	// RetryAfter is, for a denied hit, the time until the same hit could pass
	// if nothing else happened. Zero when allowed, and zero when Never.
	RetryAfter time.Duration
	// Never reports that the cost exceeds what this limit can ever admit
	// (Spec.Capacity), so retrying cannot help.
	Never bool
}
