package limit

import "time"

// CalendarUnit is the length of a calendar window.
type CalendarUnit uint8

// Calendar units. noCalendar, the zero value, means windows aligned to the
// Unix epoch.
const (
	noCalendar CalendarUnit = iota
	CalendarDay
	CalendarWeek // starts on Monday
	CalendarMonth
	CalendarYear
)

// Calendar makes fixed windows follow the calendar of a time zone: a daily
// window starts at local midnight, a weekly one on Monday at midnight, a
// monthly one on the 1st, a yearly one on January 1st. The zero value means
// no calendar.
type Calendar struct {
	// Unit is the calendar period; noCalendar (zero) means epoch-aligned
	// windows.
	Unit CalendarUnit
	// Location is the time zone; nil means UTC.
	Location *time.Location
}

// IsZero reports whether c is the zero Calendar (epoch-aligned windows).
func (c Calendar) IsZero() bool { return c.Unit == noCalendar }

// Window returns the calendar window holding t: start <= t < end. Daylight
// saving changes make some days 23 or 25 hours long; the window follows the
// wall clock. It panics if c is the zero Calendar.
func (c Calendar) Window(t time.Time) (start, end time.Time) {
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	lt := t.In(loc)
	y, m, d := lt.Date()
	switch c.Unit {
	case CalendarDay:
		start = time.Date(y, m, d, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case CalendarWeek:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, d-back, 0, 0, 0, 0, loc)
		end = time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case CalendarMonth:
		start = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		end = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	case CalendarYear:
		start = time.Date(y, 1, 1, 0, 0, 0, 0, loc)
		end = time.Date(y+1, 1, 1, 0, 0, 0, 0, loc)
	default:
		panic("limit: Window of a zero Calendar")
	}
	return start, end
}
