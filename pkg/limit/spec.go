package limit

import (
	"fmt"
	"strings"
	"time"
)

// Param names a parameter of a Spec, for errors (SpecError) and for what
// each algorithm takes (Algorithm.Takes).
type Param uint8

// The parameters, in the order of Spec's fields.
const (
	ParamAlgorithm Param = iota
	ParamLimit
	ParamWindow
	ParamBurst
	ParamPrecision
	ParamCalendar

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
	ParamAlgorithm: {name: "algorithm"},
	ParamLimit:     {name: "limit"},
	ParamWindow:    {name: "window"},
	ParamBurst: {name: "burst", algorithms: []Algorithm{TokenBucket, LeakyBucket, GCRA},
		misplaced: "%[1]s has no burst (burst applies to %[2]s)", ignorable: true},
	ParamPrecision: {name: "precision", algorithms: []Algorithm{SlidingWindow},
		misplaced: "%[1]s has no precision (precision applies to %[2]s)", ignorable: true},
	ParamCalendar: {name: "calendar", algorithms: []Algorithm{FixedWindow},
		misplaced: "a calendar window needs algorithm %[2]s, not %[1]s"},
}

// String returns the parameter's name: "algorithm", "limit", "window",
// "burst", "precision" or "calendar".
func (p Param) String() string {
	if p < numParams {
		return params[p].name
	}
	return fmt.Sprintf("Param(%d)", uint8(p))
}

// Takes reports whether the algorithm uses the parameter: Burst only the
// bucket algorithms, Precision only SlidingWindow, Calendar only
// FixedWindow, the others every algorithm.
func (a Algorithm) Takes(p Param) bool {
	if p >= numParams {
		return false
	}
	if params[p].algorithms == nil {
		return true
	}
	for _, x := range params[p].algorithms {
		if x == a {
			return true
		}
	}
	return false
}

// MaxSlidingLog is the largest Limit of a valid SlidingLog Spec. A sliding
// log stores up to one entry per admitted hit: about 236 KB per counter in
// Redis at 2,000, and a call walks at most half of them, about a
// millisecond of Redis's time (pkg/redislimit/lua/sliding_log.lua has the
// figures). Above, one counter could hold Redis up for everyone.
const MaxSlidingLog = 2000

// SpecError is one problem of a Spec. Its message names what is wrong and
// what would be valid, and reads on its own or after the name of the
// field that set Param, such as a rule file's "rate_limit.burst".
type SpecError struct {
	// Param is the parameter at fault.
	Param Param
	// Msg says what is wrong, e.g. "fixed_window has no burst (burst
	// applies to token_bucket, leaky_bucket and gcra)".
	Msg string
}

// Error returns Msg.
func (e *SpecError) Error() string { return e.Msg }

// SpecErrors is every problem of one Spec, in the order of Params. The
// error Spec.Validate returns is one.
type SpecErrors []*SpecError

// Error returns the messages, separated by "; ".
func (es SpecErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Msg
	}
	return strings.Join(msgs, "; ")
}

// Unwrap returns the problems, for errors.As.
func (es SpecErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// err returns es as an error, or nil when there is no problem.
func (es SpecErrors) err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Validate reports whether a limit may be declared with the spec, as rule
// files and Envoy's limit overrides declare limits: a known algorithm, a
// window of at least 1ms, no negative limit or burst, no Burst, Precision
// or Calendar for an algorithm that does not take it (Algorithm.Takes),
// sub-windows of at least 1ms, and a SlidingLog of at most MaxSlidingLog.
// It returns nil or a SpecErrors holding every problem.
//
// Stores evaluate more (Hit.Validate): a parameter the algorithm ignores
// and a costly sliding log are not an error there.
func (s Spec) Validate() error { return s.check(declaring).err() }

// purpose is what a Spec is checked for.
type purpose bool

const (
	declaring  purpose = true  // a rule or an override declares it
	evaluating purpose = false // a store evaluates it
)

// check returns the problems of s, as Validate documents; when evaluating,
// only those a store cannot do without.
func (s Spec) check(why purpose) SpecErrors {
	var errs SpecErrors
	add := func(p Param, format string, args ...any) {
		errs = append(errs, &SpecError{Param: p, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Algorithm >= numAlgorithms {
		add(ParamAlgorithm, "unknown algorithm %d", uint8(s.Algorithm))
		return errs
	}
	switch {
	case s.Limit < 0:
		add(ParamLimit, "negative limit %d", s.Limit)
	case why == declaring && s.Algorithm == SlidingLog && s.Limit > MaxSlidingLog:
		add(ParamLimit, "sliding_log of %d per window: a sliding log keeps up to one entry per admitted hit, "+
			"and above %d per window a counter's entries (about 130 B each) and the Redis time to walk them "+
			"stall Redis for every request (use sliding_window with a precision: a few counters per counter, whatever the limit)",
			s.Limit, MaxSlidingLog)
	}
	if s.Window < time.Millisecond {
		add(ParamWindow, "window %v is shorter than 1ms", s.Window)
	}
	if s.Burst < 0 {
		add(ParamBurst, "negative burst %d", s.Burst)
	}
	for _, p := range [...]Param{ParamBurst, ParamPrecision, ParamCalendar} {
		if s.sets(p) && !s.Algorithm.Takes(p) && (why == declaring || !params[p].ignorable) {
			add(p, params[p].misplaced, s.Algorithm, andList(params[p].algorithms))
		}
	}
	if s.Algorithm == SlidingWindow && s.Window >= time.Millisecond && s.SubWindows() > s.Window.Milliseconds() {
		add(ParamPrecision, "%d sub-windows of a %v window are shorter than 1ms (want at most %d)",
			s.SubWindows(), s.Window, s.Window.Milliseconds())
	}
	return errs
}

// sets reports whether s gives the optional parameter p a value.
func (s Spec) sets(p Param) bool {
	switch p {
	case ParamBurst:
		return s.Burst != 0
	case ParamPrecision:
		return s.Precision != 0
	case ParamCalendar:
		return !s.Calendar.IsZero()
	}
	return true
}

// andList writes the algorithms as "a, b and c".
func andList(as []Algorithm) string {
	var b strings.Builder
	for i, a := range as {
		switch {
		case i == 0:
		case i == len(as)-1:
			b.WriteString(" and ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	return b.String()
}
