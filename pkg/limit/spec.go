package limit

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// param is a parameter of a Spec, for errors (SpecError.Param) and for
// what each algorithm takes.
type param uint8

// The parameters, in the order of Spec's fields.
const (
	paramAlgorithm param = iota
	paramLimit
	paramWindow
	paramBurst
	paramPrecision
	paramCalendar

	numParams
)

// params declares each parameter once: its name, the algorithms that take
// it (nil: every one), what is said when another algorithm is given it,
// and whether a store may evaluate such a Spec by ignoring the parameter,
// as Spec's field docs promise for Burst and Precision.
var params = [numParams]struct {
	name       string
	algorithms []Algorithm
	misplaced  string // format of the algorithm given it and those that take it
	ignorable  bool
}{
	paramAlgorithm: {name: "algorithm"},
	paramLimit:     {name: "limit"},
	paramWindow:    {name: "window"},
	paramBurst: {name: "burst", algorithms: []Algorithm{TokenBucket, LeakyBucket, GCRA},
		misplaced: "%[1]s has no burst (burst applies to %[2]s)", ignorable: true},
	paramPrecision: {name: "precision", algorithms: []Algorithm{SlidingWindow},
		misplaced: "%[1]s has no precision (precision applies to %[2]s)", ignorable: true},
	paramCalendar: {name: "calendar", algorithms: []Algorithm{FixedWindow},
		misplaced: "a calendar window needs algorithm %[2]s, not %[1]s"},
}

// takes reports whether the algorithm uses the parameter.
func (a Algorithm) takes(p param) bool {
	return params[p].algorithms == nil || slices.Contains(params[p].algorithms, a)
}

// maxSlidingLog is the largest Limit of a valid SlidingLog Spec: a sliding
// log stores an entry per admitted hit, and above it one counter could
// hold Redis up for everyone (docs/benchmarks.md, pkg/limit).
const maxSlidingLog = 2000

// SpecError is one problem of a Spec. Its message names what is wrong and
// what would be valid, and reads on its own or after the name of the
// field that set Param, such as a rule file's "rate_limit.burst".
type SpecError struct {
	// Param names the parameter at fault as rule files do: "algorithm",
	// "limit", "window", "burst", "precision" or "calendar".
	Param string
	// Msg says what is wrong, e.g. "fixed_window has no burst (burst
	// applies to token_bucket, leaky_bucket and gcra)".
	Msg string
}

// Error returns Msg.
func (e *SpecError) Error() string { return e.Msg }

// specErrors is every problem of one Spec, each a *SpecError, in the
// order of Spec's fields. The error Spec.Validate returns is one.
type specErrors []error

// Error returns the messages, separated by "; ".
func (es specErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the problems, for errors.As.
func (es specErrors) Unwrap() []error { return es }

// Validate reports whether a limit may be declared with the spec, as rule
// files and Envoy's limit overrides declare limits: a known algorithm, a
// window of at least 1ms, no negative limit or burst, no Burst, Precision
// or Calendar for an algorithm that does not take it, a calendar window of
// a day, a week, 30 or 365 days, sub-windows of at least 1ms, and a
// SlidingLog of at most 2,000 per window. It returns nil, or an error
// whose Unwrap() []error holds a *SpecError per problem.
//
// Stores evaluate more (Hit.Validate): a parameter the algorithm ignores
// and a costly sliding log are not an error there.
func (s Spec) Validate() error { return s.check(declaring) }

// purpose is what a Spec is checked for.
type purpose bool

const (
	declaring  purpose = true  // a rule or an override declares it
	evaluating purpose = false // a store evaluates it
)

// check returns the problems of s, as Validate documents; when evaluating,
// only those a store cannot do without.
func (s Spec) check(why purpose) error {
	var errs specErrors
	add := func(p param, format string, args ...any) {
		errs = append(errs, &SpecError{Param: params[p].name, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Algorithm >= numAlgorithms {
		add(paramAlgorithm, "unknown algorithm %d", uint8(s.Algorithm))
		return errs
	}
	switch {
	case s.Limit < 0:
		add(paramLimit, "negative limit %d", s.Limit)
	case why == declaring && s.Algorithm == SlidingLog && s.Limit > maxSlidingLog:
		add(paramLimit, "sliding_log of %d per window: a sliding log keeps up to one entry per admitted hit, "+
			"and above %d per window a counter's entries (about 130 B each) and the Redis time to walk them "+
			"stall Redis for every request (use sliding_window with a precision: a few counters per counter, whatever the limit)",
			s.Limit, maxSlidingLog)
	}
	if s.Window < time.Millisecond {
		add(paramWindow, "window %v is shorter than 1ms", s.Window)
	}
	if s.Burst < 0 {
		add(paramBurst, "negative burst %d", s.Burst)
	}
	for _, p := range [...]param{paramBurst, paramPrecision, paramCalendar} {
		if s.sets(p) && !s.Algorithm.takes(p) && (why == declaring || !params[p].ignorable) {
			add(p, params[p].misplaced, s.Algorithm, andList(params[p].algorithms))
		}
	}
	if s.Calendar != nil && s.Algorithm == FixedWindow && !isCalendarPeriod(s.Window) {
		add(paramCalendar, "a calendar window is a day, a week, 30 days (a month) or 365 days (a year), not %v", s.Window)
	}
	if s.Algorithm == SlidingWindow && s.Window >= time.Millisecond && s.SubWindows() > s.Window.Milliseconds() {
		add(paramPrecision, "%d sub-windows of a %v window are shorter than 1ms (want at most %d)",
			s.SubWindows(), s.Window, s.Window.Milliseconds())
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// sets reports whether s gives the optional parameter p a value.
func (s Spec) sets(p param) bool {
	switch p {
	case paramBurst:
		return s.Burst != 0
	case paramPrecision:
		return s.Precision != 0
	case paramCalendar:
		return s.Calendar != nil
	}
	return true
}

// andList writes the algorithms as "a, b and c".
func andList(as []Algorithm) string {
	names := make([]string, len(as))
	for i, a := range as {
		names[i] = a.String()
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}
