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
func stepFixedWindow(st *fixedState, ok bool, start, end, limit, now, cost int64, refund, force bool) outcome {
	n := int64(0)
	if ok && st.start == start {
		n = st.count
	}
	o := outcome{resetAfter: end - now}
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
	if o.write {
		*st = fixedState{start: start, count: n}
	}
	return o
}

// The windows a calendar can follow (Spec.Calendar), by their nominal
// length: a month is 30 days and a year 365, as rule files count them.
const (
	calendarDay   = 24 * time.Hour
	calendarWeek  = 7 * calendarDay
	calendarMonth = 30 * calendarDay
	calendarYear  = 365 * calendarDay
)

// calendarWindow returns the window of s's calendar (see Spec.Calendar)
// holding t: start <= t < end. s.Calendar is not nil.
func (s *Spec) calendarWindow(t time.Time) (start, end time.Time) {
	loc := s.Calendar
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch s.Window {
	case calendarDay:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case calendarWeek:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case calendarMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	case calendarYear:
		return time.Date(y, 1, 1, 0, 0, 0, 0, loc), time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	}
	panic("limit: calendar window of " + s.Window.String() + ", which Validate refuses")
}

// isCalendarPeriod reports whether a calendar can follow windows of w.
func isCalendarPeriod(w time.Duration) bool {
	return w == calendarDay || w == calendarWeek || w == calendarMonth || w == calendarYear
}
