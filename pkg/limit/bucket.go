package limit

import "math"

// bucketState is a token bucket's tokens or a leaky bucket's level (value),
// as of ts (µs).
type bucketState struct {
	value float64
	ts    int64
}

// settleMicros returns ceil(gap/r): the µs a bucket drifting at r per µs
// needs to fill up (token bucket) or drain (leaky bucket). It is the
// bucket's ResetAfter and TTL, and a bucket is read as settled once that
// long has passed since ts, whatever the float sum gives, so that rounding
// cannot leave it an ulp short of settled when its key expires.
func settleMicros(gap, r float64) int64 { return ceilMicros(gap / r) }

// tokensAt returns a token bucket's tokens at now: b once settled, else
// min(b, tokens + (now − ts)·r). It is monotone in now.
func tokensAt(st bucketState, now int64, r, fb float64) float64 {
	if elapsed := now - st.ts; elapsed < settleMicros(fb-st.value, r) {
		return math.Min(fb, st.value+mul(float64(elapsed), r))
	}
	return fb
}

// levelAt returns a leaky bucket's level at now: 0 once settled, else
// max(0, level − (now − ts)·r). It is monotone in now.
func levelAt(st bucketState, now int64, r float64) float64 {
	if elapsed := now - st.ts; elapsed < settleMicros(st.value, r) {
		return math.Max(0, st.value-mul(float64(elapsed), r))
	}
	return 0
}

// stepTokenBucket refills limit tokens per w continuously, up to b, and
// takes cost tokens per hit. With r = float(limit)/float(w) tokens per µs
// and tokens and ts stored (b and now when there is no state), a hit is
// allowed iff t0 = tokensAt(now) >= cost. A denied hit's RetryAfter is the
// first µs at which t0 reaches cost, found by asking that very predicate
// (firstPass), since ceil((cost − t0)/r) can miss it by one. A refund
// writes only if the state changes. A charge that does not fit takes its
// tokens into debt, never below min(t0, −twin.MaxDebt·r).
func stepTokenBucket(stored *bucketState, ok bool, limit, w, b, now, cost int64, refund, force bool) outcome {
	r := float64(limit) / float64(w)
	fb, fc := float64(b), float64(cost)
	st := *stored
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
	if o.write {
		*stored = bucketState{value: ta, ts: now}
	}
	return o
}

// stepLeakyBucket is a meter draining limit per w continuously; a hit adds
// cost and passes while the level stays <= b. With r as for the token
// bucket and level and ts stored (0 and now when there is no state), a hit
// is allowed iff l0 + cost <= b, l0 = levelAt(now); its RetryAfter is
// found as the token bucket's. A refund writes only if the state changes.
// A charge that does not fit adds its cost past b, up to
// max(l0, b + twin.MaxDebt·r).
func stepLeakyBucket(stored *bucketState, ok bool, limit, w, b, now, cost int64, refund, force bool) outcome {
	r := float64(limit) / float64(w)
	fb, fc := float64(b), float64(cost)
	st := *stored
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
	if o.write {
		*stored = bucketState{value: la, ts: now}
	}
	return o
}
