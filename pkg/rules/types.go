package rules

import (
	"fmt"
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

// String returns the unit as written in rule files ("second" ...), or "" for
// the zero Unit.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// Duration returns the unit's fixed length, as envoyproxy/ratelimit counts
// it: a week is 7 days, a month 30 days, a year 365 days. It is 0 for the
// zero Unit.
func (u Unit) Duration() time.Duration {
	if int(u) < len(unitDurations) {
		return unitDurations[u]
	}
	return 0
}

// parseUnit returns the unit named s, case-insensitively.
func parseUnit(s string) (Unit, bool) {
	for i, n := range unitNames[1:] {
		if strings.EqualFold(n, s) {
			return Unit(i + 1), true
		}
	}
	return 0, false
}

// FailureMode is what to do with a limit when its store fails. It is the
// `failure_mode` field of a descriptor: allow, deny or unavailable.
type FailureMode uint8

// Failure modes.
const (
	// FailureDefault, the zero value, defers to the server's global setting.
	FailureDefault FailureMode = iota
	// FailureAllow admits the request as if the limit had allowed it.
	FailureAllow
	// FailureDeny answers over limit.
	FailureDeny
	// FailureUnavailable fails the call, leaving the choice to Envoy's
	// failure_mode_deny.
	FailureUnavailable
)

var failureModeNames = [...]string{"", "allow", "deny", "unavailable"}

// String returns the mode as written in rule files, or "" for FailureDefault.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("FailureMode(%d)", uint8(m))
}

// UnmarshalText reads allow, deny or unavailable, in any case: the
// server's global failure mode (-failure-mode). FailureDefault is not
// one; it is what a rule without failure_mode has.
func (m *FailureMode) UnmarshalText(b []byte) error {
	for _, f := range []FailureMode{FailureAllow, FailureDeny, FailureUnavailable} {
		if strings.EqualFold(string(b), f.String()) {
			*m = f
			return nil
		}
	}
	return fmt.Errorf("unknown failure mode %q (want allow, deny or unavailable)", b)
}

// MarshalText writes the mode's name; FailureDefault as "allow", which it
// means when no rule says otherwise.
func (m FailureMode) MarshalText() ([]byte, error) {
	if m == FailureDefault {
		m = FailureAllow
	}
	return []byte(m.String()), nil
}

// Limit is one compiled limit of a rule: its rate_limit, or one element of
// its rate_limits. Limits are immutable once compiled.
type Limit struct {
	// ID is the limit's stable identity, the prefix of its counter keys. It
	// encodes the domain, the descriptor path (each level's key and rule
	// value), the algorithm, the window, the precision and the calendar with
	// its time zone, injectively, and nothing else: a reload that changes
	// only requests_per_unit, burst, name or flags keeps the counters, while
	// changing the algorithm or window gives a new ID and fresh counters. It
	// is the same in every process that loads the same rule.
	ID string
	// Name is rate_limit.name, the handle `replaces` refers to; may be empty.
	Name string
	// Unit is the rate_limit.unit; zero for an unlimited limit.
	Unit Unit
	// UnitMultiplier is the number of units in a window (>= 1).
	UnitMultiplier uint32
	// RequestsPerUnit is the number of hits allowed per window; 0 blocks all.
	RequestsPerUnit uint32
	// Unlimited limits never touch the store and always allow.
	Unlimited bool
	// Replaces lists the names of limits this one drops when both match.
	Replaces []string
	// Spec is what a limiter evaluates. It is the zero Spec when Unlimited.
	Spec limit.Spec
	// Pos is where the limit was written.
	Pos Position
}

// Rule is a compiled descriptor of a rule file: the node that a request
// descriptor matches at its last entry. Rules are immutable once compiled and
// shared by every request that matches them.
type Rule struct {
	// Domain is the rule file's domain.
	Domain string
	// Path names the rule for humans and metrics, in the reference server's
	// style: the levels' "key" or "key_value" joined by ".", after the
	// domain, e.g. "demo.api_key.path_/api/*".
	Path string
	// Limits are the limits the rule holds, in file order. Empty means the
	// rule matches but limits nothing (a whitelist).
	Limits []*Limit
	// ShadowMode counts hits but never denies.
	ShadowMode bool
	// DetailedMetric asks for metrics per request value.
	DetailedMetric bool
	// QuotaMode marks the rule's limits as quotas.
	QuotaMode bool
	// ValueToMetric puts the request's values in metric names.
	ValueToMetric bool
	// FailureMode says what to do when the store fails for these limits.
	FailureMode FailureMode
	// Metadata is the descriptor's `metadata` mapping, read-only; nil when
	// absent. Values are what JSON carries, as the reference server reads
	// them: map[string]any, []any, string, float64 (every number), bool and
	// nil.
	Metadata map[string]any
	// Pos is where the descriptor was written.
	Pos Position

	// levels describes, for each level from the domain down, whether the
	// counter depends on the request's value there.
	levels []level
}

// level is one step of a rule's descriptor path.
type level struct {
	key     string
	value   string // "" for key-only
	kind    matchKind
	dynamic bool // the request's value is part of the counter key
	// share and valueToMetric are the level's share_threshold and
	// value_to_metric, for its statistics' name.
	share, valueToMetric bool
}

// matchKind is how a descriptor level matches a request entry.
type matchKind uint8

const (
	matchExact matchKind = iota
	matchWildcard
	matchKeyOnly
)

// String returns "exact", "wildcard" or "key-only".
func (k matchKind) String() string {
	switch k {
	case matchExact:
		return "exact"
	case matchWildcard:
		return "wildcard"
	default:
		return "key-only"
	}
}

// Position is a place in a rule file. Line and Column count from 1; they are
// 0 when the problem concerns the whole file.
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
	// Pos is the position of the offending YAML node.
	Pos Position
	// Field is the path of the field, e.g. "descriptors[2].rate_limit.unit";
	// empty for problems of the whole document.
	Field string
	// Msg says what is wrong and what would be valid.
	Msg string
}

// Error returns "file:line:col: field: msg".
func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Pos.String() + ": " + e.Msg
	}
	return e.Pos.String() + ": " + e.Field + ": " + e.Msg
}

// LoadError holds every problem found in one load; a load with any of them
// is refused whole.
type LoadError struct {
	Errors []FieldError
}

// Error returns one line per problem.
func (e *LoadError) Error() string {
	var b strings.Builder
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}
