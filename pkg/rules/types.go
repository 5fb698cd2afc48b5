package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Entry is one key/value pair of a request descriptor.
type Entry struct{ Key, Value string }

// Unit is a rate-limit unit of rule files. The zero value is no unit, which
// only unlimited limits have. Units are numbered as Envoy numbers them
// (RateLimitResponse.RateLimit.Unit; envoy.type.v3.RateLimitUnit, the
// unit of a request's override, has all but WEEK), so a conversion turns
// one into the other.
type Unit uint8

const (
	second Unit = iota + 1
	minute
	hour
	day
	month
	year
	week
)

var unitNames = [...]string{"", "second", "minute", "hour", "day", "month", "year", "week"}

var unitDurations = [...]time.Duration{
	0, time.Second, time.Minute, time.Hour, 24 * time.Hour,
	30 * 24 * time.Hour, 365 * 24 * time.Hour, 7 * 24 * time.Hour,
}

// String returns the unit as rule files write it, "" for the zero Unit.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// Duration returns the unit's length as envoyproxy/ratelimit counts it (a
// month is 30 days, a year 365), 0 for the zero Unit.
func (u Unit) Duration() time.Duration {
	if int(u) < len(unitDurations) {
		return unitDurations[u]
	}
	return 0
}

// FailureMode is what to do with a limit when its store fails: a
// descriptor's failure_mode, or the server's.
type FailureMode uint8

// The failure modes.
const (
	FailureDefault     FailureMode = iota // the server's setting decides
	FailureAllow                          // as if the limit allowed
	FailureDeny                           // answer over limit
	FailureUnavailable                    // fail the call; Envoy's failure_mode_deny decides
)

var failureModeNames = [...]string{"", "allow", "deny", "unavailable"}

// String returns the mode as written in rule files, or "" for FailureDefault.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// UnmarshalText reads the server's failure mode: allow, deny or
// unavailable, in any case.
func (m *FailureMode) UnmarshalText(b []byte) error {
	if i := slices.IndexFunc(failureModeNames[1:], func(n string) bool { return strings.EqualFold(n, string(b)) }); i >= 0 {
		*m = FailureMode(i + 1)
		return nil
	}
	return fmt.Errorf("unknown failure mode %q (want allow, deny or unavailable)", b)
}

// MarshalText writes the mode's name; FailureDefault as "allow", which it
// means when nothing else decides.
func (m FailureMode) MarshalText() ([]byte, error) {
	if m == FailureDefault {
		m = FailureAllow
	}
	return []byte(m.String()), nil
}

// Limit is one compiled rate_limit of a rule. It is immutable.
type Limit struct {
	// ID is the limit's identity and the prefix of its counter keys. It
	// encodes the domain, the descriptor path, the algorithm, the window,
	// the precision and the calendar, and nothing else: a reload that
	// changes only numbers, name or flags keeps the counters. It is the
	// same in every process that loads the same rule.
	ID   string
	Name string // what replaces refers to; may be empty
	// Unit and UnitMultiplier make the window; Unit is zero only for an
	// unlimited limit.
	Unit            Unit
	UnitMultiplier  uint32
	RequestsPerUnit uint32 // hits allowed per window; 0 blocks all
	Unlimited       bool   // never counted, always allows
	Replaces        []string
	Spec            limit.Spec // what a limiter evaluates; zero when Unlimited
	Pos             Position   // where it is written
}

// Rule is a compiled descriptor of a rule file, matched by a request
// descriptor that ends at it. It is immutable and shared.
type Rule struct {
	Domain string
	// Path names the rule in the reference server's style: the domain,
	// then each level's "key" or "key_value", joined by ".".
	Path string
	// Limits are in file order; none means the rule matches but limits
	// nothing.
	Limits         []*Limit
	ShadowMode     bool // count, never deny
	DetailedMetric bool
	QuotaMode      bool
	ValueToMetric  bool
	FailureMode    FailureMode
	// Metadata is the descriptor's metadata, read-only, nil when absent,
	// holding what JSON carries (map[string]any, []any, string, float64,
	// bool, nil).
	Metadata map[string]any
	Pos      Position // where it is written

	levels []level // from the domain down
}

// level is one step of a rule's descriptor path.
type level struct {
	key                  string
	value                string // "" for key-only
	kind                 matchKind
	dynamic              bool // the request's value is part of the counter key
	share, valueToMetric bool // share_threshold and value_to_metric
}

// matchKind is how a descriptor level matches a request entry.
type matchKind uint8

const (
	matchExact matchKind = iota
	matchWildcard
	matchKeyOnly
)

func (k matchKind) String() string { return [...]string{"exact", "wildcard", "key-only"}[k] }

// Position is a place in a rule file. Line and Column count from 1, and are
// 0 for the whole file.
type Position struct {
	File         string
	Line, Column int
}

// String returns "file:line:col", or "file" without a line.
func (p Position) String() string {
	if p.Line == 0 {
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// FieldError is one problem of a rule file.
type FieldError struct {
	Pos Position
	// Field is the field's path, such as "descriptors[2].rate_limit.unit";
	// "" for the whole document.
	Field string
	Msg   string // what is wrong and what would be valid
}

// Error returns "file:line:col: field: msg".
func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Field + ": " + e.Msg
}

// LoadError holds every problem of a refused load.
type LoadError struct {
	Errors []FieldError // in file order
}

// Error returns one line per problem.
func (e *LoadError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = fe.Error()
	}
	return strings.Join(lines, "\n")
}
