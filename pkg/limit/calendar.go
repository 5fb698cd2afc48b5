package limit

import "time"

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
