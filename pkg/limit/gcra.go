package limit

import (
	"math"

	"github.com/floodgate/floodgate/pkg/internal/twin"
)

// gcraState is GCRA's stored state: the theoretical arrival time tat, in
// grid units since twin.GCRAEpoch, and the Limit that fixed the size of those
// units, so that a counter whose Limit changes carries its time over.
type gcraState struct {
	tat   float64
	limit int64
}

// gcraGrid returns GCRA's emission interval T = float(w)/float(limit) µs
// and s, the grid units per T: s = 2^max(e, 0) for T = f·2^e, f in
// [1/2, 1). A unit, T/s µs, is then at most 1 µs, so the grid resolves
// every µs, and T is exactly s units: integer costs move the arrival time
// by exact integers. A limit of 0 (a state written before units existed,
// in µs) gives T = 1 µs and s = 1.
func gcraGrid(limit, w int64) (period, s float64) {
	if limit == 0 {
		return 1, 1
	}
	period = float64(w) / float64(limit)
	_, e := math.Frexp(period)
	return period, math.Ldexp(1, max(e, 0))
}

// gcraUnits returns floor(m·s/T), the grid units at m µs since twin.GCRAEpoch.
// It is monotone in m.
func gcraUnits(m, period, s float64) float64 { return math.Floor(m * s / period) }

// stepGCRA keeps one theoretical arrival time on that grid. With
// n = now − twin.GCRAEpoch and u(m) = floor(m·s/T) the units at m µs:
//
//	nu = u(n)
//	tat = stored (carried over from another limit by gcraCarry), or nu
//	t0 = max(tat, nu); nt = t0 + cost·s; tau = b·s
//
// All of these are integers, exact in a float64 while b·T is below 2^51
// µs. A hit is allowed iff nt − tau <= nu. ResetAfter is the first µs at
// which u reaches the arrival time after the hit, and a denied hit's
// RetryAfter the first at which it reaches nt − tau. A refund writes only
// if the state changes; a charge that does not fit moves the arrival time
// to min(nt, max(t0, nu + tau + u(twin.MaxDebt))).
// So B hits at one instant pass, exactly, whatever L and W, where an
// arrival time in µs would round each step of W/L µs and sometimes admit
// only B − 1.
func stepGCRA(st *gcraState, ok bool, limit, w, b, now, cost int64, refund, force bool) outcome {
	period, s := gcraGrid(limit, w)
	n := float64(now - twin.GCRAEpoch)
	nu := gcraUnits(n, period, s)
	tat := nu
	if ok {
		tat = st.tat
		if st.limit != limit {
			tat = gcraCarry(*st, w, n, nu, period, s)
		}
	}
	t0 := math.Max(tat, nu)
	step := float64(cost) * s
	tau := float64(b) * s
	nt := t0 + step
	after := t0
	var o outcome
	switch {
	case refund:
		o.allowed = true
		after = math.Max(nu, t0-step)
		o.write = ok && (after != st.tat || limit != st.limit)
	case nt-tau <= nu || force:
		o.allowed = nt-tau <= nu
		if cost > 0 {
			after = math.Min(nt, math.Max(t0, nu+tau+gcraUnits(float64(maxDebtMicros), period, s)))
			o.write = true
		}
		if !o.allowed && cost <= b {
			o.retryAfter = gcraReach(after+step-tau, n, period, s)
		}
	default:
		o.retryAfter = gcraReach(nt-tau, n, period, s)
	}
	o.remaining = max(0, int64(math.Floor((tau-(after-nu))/s)))
	o.debt = max(0, int64(math.Ceil((after-nu-tau)/s)))
	if after > nu {
		o.resetAfter = gcraReach(after, n, period, s)
	}
	if o.write {
		*st = gcraState{tat: after, limit: limit}
	}
	return o
}

// gcraCarry converts a tat stored under another limit to this limit's
// units at n, keeping the time it is ahead of now, rounded up to a unit.
func gcraCarry(st gcraState, w int64, n, nu, period, s float64) float64 {
	oldPeriod, oldS := gcraGrid(st.limit, w)
	debt := st.tat - gcraUnits(n, oldPeriod, oldS)
	if debt <= 0 {
		return nu
	}
	return nu + math.Ceil(debt*oldPeriod/oldS*s/period)
}

// gcraReach returns the smallest d >= 1 µs with u(n + d) >= units, for
// units > u(n).
func gcraReach(units, n, period, s float64) int64 {
	guess := ceilMicros(units*period/s - n)
	return firstPass(guess, func(d int64) bool { return gcraUnits(n+float64(d), period, s) >= units })
}
