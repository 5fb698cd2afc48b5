package limit

import "math"

// stepSlidingLog keeps the time of every admitted hit of the last window;
// rs holds (time µs, hits at that time) runs, ascending, counts > 0, and
// changes in place only if the step writes. Entries at or before now − w
// no longer count; a hit is allowed iff the n left plus cost fit the
// limit. The log resets when its newest entry leaves, and a denied hit
// may retry when the (n + cost − limit)-th oldest leaves. A refund removes
// the newest entries; a charge that does not fit adds its entries up to
// countCap(limit).
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
	return rs, o
}
