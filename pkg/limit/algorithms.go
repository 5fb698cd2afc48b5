package limit

import (
	"math"
	"time"
)

// This file holds the six algorithms as pure step functions: one hit against
// one counter's state at one instant. Memory runs them over its maps; the Lua
// scripts of package redislimit are line-by-line translations of them, so
// every float expression below is written in the order the scripts evaluate
// it, and every product that is then added to or subtracted from goes through
// mul (see there).
//
// Shared conventions of the step functions:
//   - now is integer microseconds since the Unix epoch; windows are whole µs.
//   - A step gets the stored state and ok (whether there is any). It returns
//     the state after the hit and an outcome. The caller stores the returned
//     state only when outcome.write is set, with outcome.ttl as its lifetime.
//   - The cases handled once for every algorithm, before any step function
//     runs (Limit 0, cost above the capacity) live in step, below.

// GCRAEpoch is the instant GCRA's theoretical arrival times are measured from,
// in microseconds since the Unix epoch: 2024-01-01T00:00:00Z. The Redis
// script subtracts the same constant. Small times keep the arrival time, a
// count of grid units of at most 1 µs (see gcraGrid), an exact integer in a
// float64 for a century.
const GCRAEpoch int64 = 1704067200000000

// MaxCount is the most usage charges (Hit.Usage) make a window algorithm
// count past its limit (in a fixed window, in one sub-window of a sliding
// window, in a sliding log), or twice the limit when that is more (a
// calendar window's limit may exceed it): a charge beyond counts up to it.
// It is twice the largest limit of a rule (2^32 − 1, requests_per_unit)
// plus one, so that the Redis layout of a fixed window (a count below
// 2^33) holds, and every count stays exact in a float64.
const MaxCount int64 = 1<<33 - 1

// countCap is the most a window of limit counts (see MaxCount).
func countCap(limit int64) int64 { return max(MaxCount, min(limit, math.MaxInt64/2)*2) }

// MaxDebt is the longest a bucket (TokenBucket, LeakyBucket, GCRA) takes to
// pay back the usage charges (Hit.Usage) that took it past its limit: a
// charge that would take it further is counted up to it. No limit a rule
// can declare comes near it, and every time it gives stays exact in µs.
const MaxDebt = 10 * 365 * 24 * time.Hour

// maxDebtMicros is MaxDebt in µs, as the Lua scripts receive it.
const maxDebtMicros = int64(MaxDebt / time.Microsecond)

// outcome is what one step decided and what it did to the state, in the
// units the Lua scripts return: µs and whole hits.
type outcome struct {
	allowed    bool
	never      bool
	remaining  int64
	debt       int64 // hits past the limit, after the hit
	resetAfter int64 // µs
	retryAfter int64 // µs
	// write reports that the state changed and the returned state must be
	// stored. Denials and peeks never write.
	write bool
	// ttl is, when write is set, the µs until the returned state becomes
	// equivalent to no state; <= 0 means it already is, and the counter is
	// deleted instead of stored.
	ttl int64
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

// step applies one hit to st, the state of hit.Key (ok reports whether there
// is any), at now. It returns the hit's outcome; st holds the state after the
// hit when outcome.write is set. Otherwise st is equivalent to what it was:
// only st.runs may have been resliced past entries that no longer count, and
// the memory it shares with the stored state is left untouched, so that a
// call of a single hit may step on the stored state itself.
//
// A usage hit (Hit.Usage) of cost > 0 that is not a refund is a charge: it
// consumes whether it fits or not, taking the counter past its limit when
// it does not (see chargeCap), and is allowed iff it fits. A charge that
// does not fit has the RetryAfter of the same hit against the state after
// it, or Never when its cost is above the capacity.
//
// Before the algorithm runs:
//   - Limit 0: a hit of cost > 0 that is not a refund is denied with Never
//     set and every other field zero; a peek or a refund is allowed with
//     every other field zero. The state is neither read nor written.
//   - Cost above Spec.Capacity (not a refund nor a charge): denied with
//     Never set and RetryAfter 0; Remaining and ResetAfter are those of a
//     peek (cost 0).
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
		var fixed fixedState
		if fixed, o = stepFixedWindow(st.fixed, ok, start, end, sp.Limit, now, cost, refund, force); o.write {
			st.fixed = fixed
		}
	case SlidingWindow:
		st.runs, o = stepSlidingWindow(st.runs, sp.Limit, w, sp.SubWindows(), now, cost, refund, force)
	case SlidingLog:
		st.runs, o = stepSlidingLog(st.runs, sp.Limit, w, now, cost, refund, force)
	case TokenBucket:
		var b bucketState
		if b, o = stepTokenBucket(st.bucket, ok, sp.Limit, w, sp.Capacity(), now, cost, refund, force); o.write {
			st.bucket = b
		}
	case LeakyBucket:
		var b bucketState
		if b, o = stepLeakyBucket(st.bucket, ok, sp.Limit, w, sp.Capacity(), now, cost, refund, force); o.write {
			st.bucket = b
		}
	case GCRA:
		var g gcraState
		if g, o = stepGCRA(st.gcra, ok, sp.Limit, w, sp.Capacity(), now, cost, refund, force); o.write {
			st.gcra = g
		}
	}
	if force && !o.allowed && cost > sp.Capacity() {
		o.never, o.retryAfter = true, 0
	}
	return o
}

// fixedWindowAt returns the fixed window [start, end) holding now, in µs:
// Calendar.Window when the spec has a calendar, otherwise
// start = floor(now/W)·W and end = start + W.
func (s *Spec) fixedWindowAt(now int64) (start, end int64) {
	if !s.Calendar.IsZero() {
		from, to := s.Calendar.Window(time.UnixMicro(now))
		return from.UnixMicro(), to.UnixMicro()
	}
	w := s.WindowMicros()
	start = floorDiv(now, w) * w
	return start, start + w
}

// WindowAt returns the fixed window [start, end) that holds t: the calendar
// window when the spec has a calendar, otherwise the window of length Window
// that starts at a whole multiple of Window since the Unix epoch. It is what
// a fixed window counts in, and what a limit that admits nothing (Limit 0)
// reports as its reset.
func (s *Spec) WindowAt(t time.Time) (start, end time.Time) {
	from, to := s.fixedWindowAt(t.UnixMicro())
	return time.UnixMicro(from), time.UnixMicro(to)
}

// fixedState is a fixed window counter: count hits in the window that starts
// at start (µs).
type fixedState struct{ start, count int64 }

// stepFixedWindow counts hits in the window [start, end) that holds now.
//
// n is the stored count if the stored window is this one (st.start == start),
// else 0. A hit is allowed iff n + cost <= limit; if allowed with cost > 0,
// n += cost and (start, n) is written with ttl end − now.
// Remaining = max(0, limit − n) with n after the hit; ResetAfter = end − now;
// RetryAfter (denied) = end − now.
// A refund sets n = max(0, n − cost) and writes (ttl end − now) only if the
// stored window is this one and n changes. A charge (force) that does not
// fit sets n = min(n + cost, MaxCount) and writes, denied, with RetryAfter
// end − now: it counts up to countCap(limit).
func stepFixedWindow(st fixedState, ok bool, start, end, limit, now, cost int64, refund, force bool) (fixedState, outcome) {
	n := int64(0)
	if ok && st.start == start {
		n = st.count
	}
	o := outcome{resetAfter: end - now, ttl: end - now}
	switch fits := n+cost <= limit; {
	case refund:
		o.allowed = true
		if n > 0 && cost > 0 {
			n = max(0, n-cost)
			o.write = true
		}
	case fits:
		o.allowed = true
		if cost > 0 {
			n += cost
			o.write = true
		}
	case force:
		n, o.write = max(n, min(n+cost, countCap(limit))), true
	}
	if !o.allowed {
		o.retryAfter = end - now
	}
	o.remaining, o.debt = max(0, limit-n), max(0, n-limit)
	return fixedState{start: start, count: n}, o
}

// stepSlidingWindow estimates the hits of the last window from n sub-window
// counters (n = Spec.SubWindows()); rs holds (sub-window index, count) runs,
// ascending, counts > 0. It returns the runs after the hit, having changed
// rs's elements only if it writes.
//
// With g = floor(w/n) (sub-window length), k = floor(now/g) (current index)
// and x = now − k·g:
//   - indices < k − n are dropped (they no longer count);
//   - full = Σ cnt[i] for k − n < i <= k (indices above k, left by a clock
//     that went back, are kept but not counted), old = cnt[k − n];
//   - est = float(full) + float(old)·float(g − x)/float(g), evaluated as
//     full + ((old·(g−x)) / g).
//
// A hit is allowed iff est + cost <= limit (float). If allowed with
// cost > 0, cnt[k] += cost and the runs are written.
// Remaining = max(0, floor(limit − (est + cost))) when allowed, else
// max(0, floor(limit − est)); for a refund, est is recomputed on the state
// after the refund and Remaining = max(0, floor(limit − est)).
// ResetAfter = (m + n + 1)·g − now for the newest index m with a count (all
// of them expired then), 0 when there is none; ttl is the same.
// RetryAfter (denied): see slidingWindowRetryAfter.
// A refund takes cost from cnt[k], then from the older counted sub-windows
// (down to k − n) newest first, never below 0; it writes only if it took any.
// A charge (force) that does not fit adds cost to cnt[k] all the same, up
// to countCap(limit) there, and writes, denied, with the RetryAfter of the
// same hit on the runs after it (Remaining as for an allowed hit: 0).
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
		o.remaining = max(0, int64(math.Floor(float64(limit)-est)))
	case est+float64(cost) <= float64(limit):
		o.allowed = true
		if cost > 0 {
			rs = rs.add(k, cost)
			o.write = true
		}
		o.remaining = max(0, int64(math.Floor(float64(limit)-(est+float64(cost)))))
	case force:
		rs, o.write = rs.addUpTo(k, cost, countCap(limit))
		est = slidingEstimate(rs, k, n, g, now)
		if cost <= limit {
			o.retryAfter = slidingWindowRetryAfter(rs, k, n, g, limit, cost, now)
		}
	default:
		o.remaining = max(0, int64(math.Floor(float64(limit)-est)))
		o.retryAfter = slidingWindowRetryAfter(rs, k, n, g, limit, cost, now)
	}
	o.debt = max(0, int64(math.Ceil(est-float64(limit))))
	if len(rs) > 0 {
		o.resetAfter = (rs.newest()+n+1)*g - now
	}
	o.ttl = o.resetAfter
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
// further hits, the estimate at now + d plus cost is <= limit, for a hit that
// is denied now with cost <= limit. rs holds no index below k − n.
//
// For sub-windows j >= k, full_j = Σ cnt[i] for j − n < i <= k and
// old_j = cnt[j − n]. Going through j in increasing order: if
// full_j + cost > limit, j cannot admit the hit; otherwise, if old_j == 0 or
// full_j + old_j + cost <= limit, the answer is t = max(now + 1, j·g);
// otherwise the estimate falls to limit − cost within sub-window j, at
// t = j·g + ceil(g − (limit − cost − full_j)·g/old_j), evaluated as
// ceil(g − (((limit − cost) − full_j)·g)/old_j). d = max(1, t − now).
//
// full_j and old_j change only when j − n reaches a stored index, so only
// j = k and j = i + n for stored indices i > k − n are visited: O(len(rs))
// whatever n is. The last stored index m gives full = 0 at j = m + n, so the
// walk ends there at the latest.
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

// bucketState is a token bucket's tokens or a leaky bucket's level (value),
// as of ts (µs).
type bucketState struct {
	value float64
	ts    int64
}

// settleMicros returns ceil(gap/r): the µs a bucket drifting at r per µs
// needs to cross gap, to fill up (token bucket) or to drain (leaky bucket).
// It is the bucket's ResetAfter and TTL, and a stored bucket is read as
// settled (full, or empty) once that long has passed since ts, whatever the
// float sum would give: otherwise rounding can leave it one ulp short of
// settled at the instant its key expires, and expiry would change a decision.
func settleMicros(gap, r float64) int64 { return ceilMicros(gap / r) }

// tokensAt returns a token bucket's tokens at now: b if the bucket has
// settled (full) since st.ts, else min(b, tokens + (now − ts)·r). It is
// monotone in now.
func tokensAt(st bucketState, now int64, r, fb float64) float64 {
	if elapsed := now - st.ts; elapsed < settleMicros(fb-st.value, r) {
		return math.Min(fb, st.value+mul(float64(elapsed), r))
	}
	return fb
}

// levelAt returns a leaky bucket's level at now: 0 if the bucket has
// settled (empty) since st.ts, else max(0, level − (now − ts)·r). It is
// monotone in now.
func levelAt(st bucketState, now int64, r float64) float64 {
	if elapsed := now - st.ts; elapsed < settleMicros(st.value, r) {
		return math.Max(0, st.value-mul(float64(elapsed), r))
	}
	return 0
}

// stepTokenBucket refills limit tokens per w continuously, up to b, and
// takes cost tokens per hit. With r = float(limit)/float(w) (tokens per µs):
//
//	tokens, ts = stored, or b and now when there is no state
//	t0 = b                                if now − ts >= ceil((b − tokens)/r)
//	t0 = min(b, tokens + (now − ts)·r)    otherwise
//
// A hit is allowed iff t0 >= cost; if allowed with cost > 0, the state
// becomes (t0 − cost, now) and is written. With ta the tokens after the hit
// (t0 − cost if so consumed, else t0; min(b, t0 + cost) for a refund):
// Remaining = max(0, floor(ta)), ResetAfter = ceil((b − ta)/r), ttl the same.
// RetryAfter (denied) = the smallest d >= 1 µs at which t0, as computed
// above for now + d on the same state, is >= cost: ceil((cost − t0)/r)
// corrected by asking that very predicate (see firstPass), since the float
// quotient can miss the first passing µs by one.
// A refund sets (min(b, t0 + cost), now) and writes only if there is a
// stored state and the new one differs from it. A charge (force) that does
// not fit takes its tokens all the same, into debt, down to
// max(t0 − cost, min(t0, −MaxDebt·r)), and writes, denied, with the
// RetryAfter of the same hit on the state after it.
func stepTokenBucket(st bucketState, ok bool, limit, w, b, now, cost int64, refund, force bool) (bucketState, outcome) {
	r := float64(limit) / float64(w)
	fb, fc := float64(b), float64(cost)
	if !ok {
		st = bucketState{value: fb, ts: now}
	}
	t0 := tokensAt(st, now, r, fb)
	ta := t0
	var o outcome
	switch {
	case refund:
		o.allowed = true
		ta = math.Min(fb, t0+fc)
		o.write = ok && (ta != st.value || now != st.ts)
	case t0 >= fc || force:
		o.allowed = t0 >= fc
		if cost > 0 {
			ta = math.Max(t0-fc, math.Min(t0, -mul(float64(maxDebtMicros), r)))
			o.write = true
		}
		if !o.allowed && cost <= b {
			after := bucketState{value: ta, ts: now}
			o.retryAfter = firstPass(ceilMicros((fc-ta)/r), func(d int64) bool { return tokensAt(after, now+d, r, fb) >= fc })
		}
	default:
		o.retryAfter = firstPass(ceilMicros((fc-t0)/r), func(d int64) bool { return tokensAt(st, now+d, r, fb) >= fc })
	}
	o.remaining, o.debt = max(0, int64(math.Floor(ta))), max(0, int64(math.Ceil(-ta)))
	o.resetAfter = settleMicros(fb-ta, r)
	o.ttl = o.resetAfter
	return bucketState{value: ta, ts: now}, o
}

// stepLeakyBucket is a meter draining limit per w continuously; a hit adds
// cost and passes while the level stays <= b. With r = float(limit)/float(w):
//
//	level, ts = stored, or 0 and now when there is no state
//	l0 = 0                                if now − ts >= ceil(level/r)
//	l0 = max(0, level − (now − ts)·r)     otherwise
//
// A hit is allowed iff l0 + cost <= b; if allowed with cost > 0, the state
// becomes (l0 + cost, now) and is written. With la the level after the hit
// (l0 + cost if so consumed, else l0; max(0, l0 − cost) for a refund):
// Remaining = max(0, floor(b − la)), ResetAfter = ceil(la/r), ttl the same.
// RetryAfter (denied) = the smallest d >= 1 µs at which l0, as computed
// above for now + d on the same state, satisfies l0 + cost <= b: found from
// ceil(((l0 + cost) − b)/r) by asking that very predicate (see firstPass).
// A refund sets (max(0, l0 − cost), now) and writes only if there is a
// stored state and the new one differs from it. A charge (force) that does
// not fit adds its cost all the same, past b, up to
// min(l0 + cost, max(l0, b + MaxDebt·r)), and writes, denied, with the
// RetryAfter of the same hit on the state after it.
func stepLeakyBucket(st bucketState, ok bool, limit, w, b, now, cost int64, refund, force bool) (bucketState, outcome) {
	r := float64(limit) / float64(w)
	fb, fc := float64(b), float64(cost)
	if !ok {
		st = bucketState{value: 0, ts: now}
	}
	l0 := levelAt(st, now, r)
	la := l0
	var o outcome
	switch {
	case refund:
		o.allowed = true
		la = math.Max(0, l0-fc)
		o.write = ok && (la != st.value || now != st.ts)
	case l0+fc <= fb || force:
		o.allowed = l0+fc <= fb
		if cost > 0 {
			la = math.Min(l0+fc, math.Max(l0, fb+mul(float64(maxDebtMicros), r)))
			o.write = true
		}
		if !o.allowed && cost <= b {
			after := bucketState{value: la, ts: now}
			o.retryAfter = firstPass(ceilMicros((la+fc-fb)/r), func(d int64) bool { return levelAt(after, now+d, r)+fc <= fb })
		}
	default:
		o.retryAfter = firstPass(ceilMicros((l0+fc-fb)/r), func(d int64) bool { return levelAt(st, now+d, r)+fc <= fb })
	}
	o.remaining, o.debt = max(0, int64(math.Floor(fb-la))), max(0, int64(math.Ceil(la-fb)))
	o.resetAfter = settleMicros(la, r)
	o.ttl = o.resetAfter
	return bucketState{value: la, ts: now}, o
}

// gcraState is GCRA's stored state: the theoretical arrival time tat, a
// whole number of grid units since GCRAEpoch (see gcraGrid), and the Limit
// it was written with, which fixes the size of those units. Keeping the
// Limit lets a counter survive a change of Limit (a rule reload): its
// outstanding time is carried over in µs instead of being misread in the
// new units.
type gcraState struct {
	tat   float64
	limit int64
}

// gcraGrid returns GCRA's emission interval T = float(w)/float(limit) µs
// and s, the grid units per T: with T = f·2^e and f in [1/2, 1) (frexp),
// s = 2^max(e, 0), a power of two above T. A grid unit, T/s µs, is then at most 1 µs (between 1/2
// and 1 µs when T >= 1/2 µs), so the grid resolves every µs instant, and T
// itself is exactly s units: integer costs move the arrival time by exact
// integers. A limit of 0 (a state written before units existed, whose tat
// was in µs) gives T = 1 µs and s = 1.
func gcraGrid(limit, w int64) (period, s float64) {
	if limit == 0 {
		return 1, 1
	}
	period = float64(w) / float64(limit)
	_, e := math.Frexp(period)
	return period, math.Ldexp(1, max(e, 0))
}

// gcraUnits returns floor(m·s/T): the grid units since GCRAEpoch at m µs
// since GCRAEpoch. It is monotone in m.
func gcraUnits(m, period, s float64) float64 { return math.Floor(m * s / period) }

// stepGCRA keeps one theoretical arrival time, on a grid that makes integer
// costs exact: with T and s from gcraGrid, n = now − GCRAEpoch (µs, exact)
// and u(m) = floor(m·s/T) (grid units at m µs, see gcraUnits):
//
//	nu = u(n)
//	tat = stored, or nu when there is no state; a tat stored under another
//	      limit L' is carried over: debt = tat − u'(n) in the old units; if
//	      debt <= 0, tat = nu, else tat = nu + ceil(debt·T'/s'·s/T)
//	t0 = max(tat, nu); nt = t0 + cost·s; tau = b·s
//
// All of these are integers (exact in a float64 while the tolerance b·T is
// below 2^51 µs). A hit is allowed iff nt − tau <= nu; if allowed with
// cost > 0, tat = nt is written with the limit. With after the tat after the
// hit (nt if so consumed, else t0; max(nu, t0 − cost·s) for a refund):
// Remaining = max(0, floor((tau − (after − nu))/s)).
// ResetAfter = the smallest d >= 0 with u(n + d) >= after (0 when
// after <= nu); ttl the same. RetryAfter (denied) = the smallest d >= 1
// with u(n + d) >= nt − tau: the first µs at which the hit passes.
// A refund writes only if there is a stored state and the new one differs
// from it. A charge (force) that does not fit is consumed all the same, the
// arrival time moving to min(nt, max(t0, nu + tau + u(MaxDebt))), and
// writes, denied, with the RetryAfter of the same hit on the state after it.
//
// So B hits at one instant pass, exactly, whatever L and W: they add B·s to
// the arrival time in exact integers. (Keeping the arrival time in µs
// instead rounds each step of W/L µs to the float grid near now, and a
// burst of B then sometimes admits only B − 1.)
func stepGCRA(st gcraState, ok bool, limit, w, b, now, cost int64, refund, force bool) (gcraState, outcome) {
	period, s := gcraGrid(limit, w)
	n := float64(now - GCRAEpoch)
	nu := gcraUnits(n, period, s)
	tat := nu
	if ok {
		tat = st.tat
		if st.limit != limit {
			tat = gcraCarry(st, w, n, nu, period, s)
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
	o.ttl = o.resetAfter
	return gcraState{tat: after, limit: limit}, o
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
		hi = guess
		for step := int64(1); ; step *= 2 {
			lo = guess - step
			if lo < 1 {
				lo = 0
				break
			}
			if !pass(lo) {
				break
			}
			hi = lo
		}
	} else {
		lo = guess
		for step := int64(1); ; step *= 2 {
			hi = guess + step
			if pass(hi) {
				break
			}
			lo = hi
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

// run is n hits recorded at one position: a sub-window index for
// SlidingWindow, a time in µs for SlidingLog.
type run struct{ at, n int64 }

// runs is a list of runs in ascending position with n > 0. add and
// takeNewest modify the list in place.
type runs []run

// dropBefore returns the runs positioned at or after from: a subslice of rs,
// which it does not modify.
func (rs runs) dropBefore(from int64) runs {
	i := 0
	for i < len(rs) && rs[i].at < from {
		i++
	}
	return rs[i:]
}

// upTo returns the number of runs positioned at or before at.
func (rs runs) upTo(at int64) int {
	i := len(rs)
	for i > 0 && rs[i-1].at > at {
		i--
	}
	return i
}

// add records n more hits at position at.
func (rs runs) add(at, n int64) runs {
	i := rs.upTo(at)
	if i > 0 && rs[i-1].at == at {
		rs[i-1].n += n
		return rs
	}
	rs = append(rs, run{})
	copy(rs[i+1:], rs[i:])
	rs[i] = run{at: at, n: n}
	return rs
}

// addUpTo records up to n more hits at position at, leaving at most most
// there, and reports whether it recorded any.
func (rs runs) addUpTo(at, n, most int64) (runs, bool) {
	have := int64(0)
	if i := rs.upTo(at); i > 0 && rs[i-1].at == at {
		have = rs[i-1].n
	}
	if n = min(n, most-have); n <= 0 {
		return rs, false
	}
	return rs.add(at, n), true
}

// takeNewest removes up to n hits positioned at or before upTo, newest
// first, and returns how many it removed.
func (rs runs) takeNewest(n, upTo int64) (runs, int64) {
	end := rs.upTo(upTo)
	i := end
	var taken int64
	for i > 0 && taken < n {
		take := min(n-taken, rs[i-1].n)
		rs[i-1].n -= take
		taken += take
		if rs[i-1].n > 0 {
			break
		}
		i--
	}
	// rs[i:end] are now empty.
	return append(rs[:i], rs[end:]...), taken
}

// total returns the number of hits in rs.
func (rs runs) total() int64 {
	var t int64
	for _, r := range rs {
		t += r.n
	}
	return t
}

// newest returns the position of the last run; rs must not be empty.
func (rs runs) newest() int64 { return rs[len(rs)-1].at }

// nthOldest returns the position of the i-th oldest hit (1-based); rs must
// hold at least i hits.
func (rs runs) nthOldest(i int64) int64 {
	for _, r := range rs {
		if i <= r.n {
			return r.at
		}
		i -= r.n
	}
	panic("limit: nthOldest beyond the log")
}
