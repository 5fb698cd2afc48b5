package limit

import "math"

// stepSlidingLog keeps the time of every admitted hit of the last window;
// rs holds (time µs, hits at that time) runs, ascending, counts > 0. It
// returns the runs after the hit, having changed rs's elements only if it
// writes.
//
// Entries with time <= now − w are dropped first; n is the number of
// entries left. A hit is allowed iff n + cost <= limit; if allowed with
// cost > 0, cost entries with time now are added and written.
// Remaining = max(0, limit − n) with n after the hit.
// ResetAfter = newest + w − now (newest: the latest entry's time), 0 when
// the log is empty; ttl is the same.
// RetryAfter (denied) = e + w − now where e is the time of the
// (n + cost − limit)-th oldest entry: when it leaves, the hit fits.
// A refund removes the min(cost, n) newest entries; it writes only if it
// removed any. A charge (force) that does not fit adds its entries all the
// same, up to countCap(limit) in the log, and writes, denied, with the
// RetryAfter of the same hit on the log after it.
func stepSlidingLog(rs runs, limit, w, now, cost int64, refund, force bool) (runs, outcome) {
	rs = rs.dropBefore(now - w + 1)
	n := rs.total()
	var o outcome
	switch {
	case refund:
		o.allowed = true
		var taken int64
		rs, taken = rs.takeNewest(cost, math.MaxInt64)
		n -= taken
		o.write = taken > 0
	case n+cost <= limit:
		o.allowed = true
		if cost > 0 {
			rs = rs.add(now, cost)
			n += cost
			o.write = true
		}
	case force:
		if add := min(cost, countCap(limit)-n); add > 0 {
			rs = rs.add(now, add)
			n += add
			o.write = true
		}
		if cost <= limit {
			o.retryAfter = rs.nthOldest(n+cost-limit) + w - now
		}
	default:
		o.retryAfter = rs.nthOldest(n+cost-limit) + w - now
	}
	o.remaining, o.debt = max(0, limit-n), max(0, n-limit)
	if len(rs) > 0 {
		o.resetAfter = rs.newest() + w - now
	}
	o.ttl = o.resetAfter
	return rs, o
}
