package limit

import "time"

// fixedWindowAt returns the fixed window [start, end) holding now, in µs:
// the calendar's, or start = floor(now/W)·W and end = start + W.
func (s *Spec) fixedWindowAt(now int64) (start, end int64) {
	if s.Calendar != nil {
		from, to := s.calendarWindow(time.UnixMicro(now))
		return from.UnixMicro(), to.UnixMicro()
	}
	w := s.WindowMicros()
	start = floorDiv(now, w) * w
	return start, start + w
}

// WindowAt returns the fixed window [start, end) that holds t: the calendar
// window when the spec has a calendar, otherwise the one of length Window
// that starts at a whole multiple of Window since the Unix epoch.
func (s *Spec) WindowAt(t time.Time) (start, end time.Time) {
	from, to := s.fixedWindowAt(t.UnixMicro())
	return time.UnixMicro(from), time.UnixMicro(to)
}

// fixedState is a fixed window counter: count hits in the window that starts
// at start (µs).
type fixedState struct{ start, count int64 }

// stepFixedWindow counts hits in the window [start, end) that holds now: n,
// the stored count if the stored window is this one, else 0. A hit is
// allowed iff n + cost <= limit. Every answer resets, and a denied hit may
// retry, when the window ends. A refund writes only if it changes a count
// of this window. A charge that does not fit counts up to countCap(limit).
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
