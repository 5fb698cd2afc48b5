package limit

import "math"

// stepSlidingWindow estimates the hits of the last window from n sub-window
// counters (n = Spec.SubWindows()); rs holds (sub-window index, count)
// runs, ascending, counts > 0, and changes in place only if the step
// writes. With g = floor(w/n) (sub-window length), k = floor(now/g) (the
// current index) and x = now − k·g:
//   - indices < k − n are dropped;
//   - full = Σ cnt[i] for k − n < i <= k (indices above k, left by a clock
//     that went back, are kept but not counted), old = cnt[k − n];
//   - est = full + ((old·(g−x)) / g), in float64.
//
// A hit is allowed iff est + cost <= limit. The counter resets when its
// newest sub-window m with a count expires, at (m + n + 1)·g; a denied
// hit's RetryAfter is slidingWindowRetryAfter's. A refund takes cost from
// cnt[k], then from the older counted sub-windows, newest first; a charge
// that does not fit adds to cnt[k] up to countCap(limit).
func stepSlidingWindow(rs runs, limit, w, n, now, cost int64, refund, force bool) (runs, outcome) {
	g := w / n
	k := floorDiv(now, g)
	rs = rs.dropBefore(k - n)
	est := slidingEstimate(rs, k, n, g, now)
	var o outcome
	switch {
	case refund:
		o.allowed = true
		var taken int64
		rs, taken = rs.takeNewest(cost, k)
		o.write = taken > 0
		est = slidingEstimate(rs, k, n, g, now)
	case est+float64(cost) <= float64(limit):
		o.allowed = true
		if cost > 0 {
			rs = rs.add(k, cost)
			o.write = true
		}
		est += float64(cost)
	case force:
		rs, o.write = rs.addUpTo(k, cost, countCap(limit))
		est = slidingEstimate(rs, k, n, g, now)
		if cost <= limit {
			o.retryAfter = slidingWindowRetryAfter(rs, k, n, g, limit, cost, now)
		}
	default:
		o.retryAfter = slidingWindowRetryAfter(rs, k, n, g, limit, cost, now)
	}
	o.remaining = max(0, int64(math.Floor(float64(limit)-est)))
	o.debt = max(0, int64(math.Ceil(est-float64(limit))))
	if len(rs) > 0 {
		o.resetAfter = (rs.newest()+n+1)*g - now
	}
	return rs, o
}

// slidingEstimate returns full + old·(g − x)/g as stepSlidingWindow defines
// it; rs holds no index below k − n.
func slidingEstimate(rs runs, k, n, g, now int64) float64 {
	var full, old int64
	for _, r := range rs {
		switch {
		case r.at == k-n:
			old = r.n
		case r.at <= k:
			full += r.n
		}
	}
	x := now - k*g
	return float64(full) + float64(old)*float64(g-x)/float64(g)
}

// slidingWindowRetryAfter returns the smallest d >= 1 µs such that, with no
// further hits, the estimate at now + d plus cost is <= limit, for a hit
// denied now with cost <= limit. rs holds no index below k − n.
//
// For sub-windows j >= k, full_j = Σ cnt[i] for j − n < i <= k and
// old_j = cnt[j − n]. The first j with full_j + cost <= limit admits the
// hit: at t = max(now + 1, j·g) if old_j == 0 or full_j + old_j + cost <=
// limit, else when the estimate falls to limit − cost, at
// t = j·g + ceil(g − (((limit − cost) − full_j)·g)/old_j); d = max(1, t − now).
// Only j = k and j = i + n for stored i > k − n change full_j or old_j, so
// the walk is O(len(rs)), and ends at the last stored index m, where
// full = 0 at j = m + n.
func slidingWindowRetryAfter(rs runs, k, n, g, limit, cost, now int64) int64 {
	// Only indices up to k count (see stepSlidingWindow).
	counted := rs[:rs.upTo(k)]
	total := counted.total()
	var gone int64 // Σ cnt[i] for i < j − n
	next := 0      // counted[next:] are the runs with index >= j − n
	for j := k; ; {
		for next < len(counted) && counted[next].at < j-n {
			gone += counted[next].n
			next++
		}
		var old int64
		if next < len(counted) && counted[next].at == j-n {
			old = counted[next].n
		}
		full := total - gone - old
		if full+cost <= limit {
			if old == 0 || full+old+cost <= limit {
				return max(now+1, j*g) - now
			}
			t := j*g + int64(math.Ceil(float64(g)-float64(limit-cost-full)*float64(g)/float64(old)))
			return max(1, t-now)
		}
		// Advance to the next j at which a stored sub-window becomes old.
		if old != 0 {
			next++
			gone += old
		}
		j = counted[next].at + n
	}
}
