package rules

// A rate_limit's fields are declared once, in rateLimitTable, and read
// through it; the checks of the resulting limit.Spec are
// limit.Spec.Validate's.

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	// Time zones resolve even on minimal images without /usr/share/zoneinfo.
	_ "time/tzdata"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/pkg/limit"
)

// kind is the YAML shape a field's value must have.
type kind uint8

const (
	kindText     kind = iota // a scalar, read as written; null is ""
	kindBool                 // true or false, YAML 1.1 spellings included
	kindWhole                // a whole number in [min, max]; null is not given
	kindReplaces             // a list of {name: …}
)

// where says which node of a field a problem points at.
type where uint8

const (
	atValue where = iota
	atName
)

// Above these, a sliding_log (one entry per admitted hit) and a
// sliding_window's precision (sub-window counters per counter) are warned
// about as costly.
const (
	slidingLogWarnAbove = 1000
	precisionWarnAbove  = 100
)

// neverCounted is why most fields are refused with unlimited: true.
const neverCounted = "an unlimited limit is never counted"

// value is a field's decoded value; which member is set follows its kind.
type value struct {
	text string
	null bool // the YAML value is null
	n    int64
	b    bool
	list []string
}

// rateLimitField declares one field of a rate_limit: its YAML kind and
// range, the limit.Spec parameter it sets, how it goes with unlimited, and
// how its value is stored.
type rateLimitField struct {
	name     string
	kind     kind
	min, max int64  // kindWhole's range
	param    string // the limit.Spec parameter it sets; "" for none
	paramAt  where  // where a limit.SpecError of param points

	// unlimitedWhy refuses the field with unlimited: true, pointing
	// unlimitedAt; unlimitedIgnored warns that it is ignored then.
	unlimitedWhy     string
	unlimitedAt      where
	unlimitedIgnored bool

	typ, def string // type and default as docs/rules.md lists them

	set func(*draft, value) error
}

// rateLimitTable declares the fields of a rate_limit, in the order error
// messages list them.
var rateLimitTable = []rateLimitField{
	{name: "unit", kind: kindText, param: "window",
		unlimitedWhy: "an unlimited limit has no unit", unlimitedAt: atValue,
		typ: "`second` `minute` `hour` `day` `week` `month` `year` (any case)", def: "required, unless `unlimited`",
		set: setUnit},
	{name: "requests_per_unit", kind: kindWhole, min: 0, max: math.MaxUint32, param: "limit",
		unlimitedIgnored: true, typ: "0 to 4294967295", def: "0 (with a warning)",
		set: func(d *draft, v value) error { d.lim.RequestsPerUnit = uint32(v.n); return nil }},
	{name: "unlimited", kind: kindBool, typ: "bool", def: "false",
		set: func(d *draft, v value) error { d.lim.Unlimited = v.b; return nil }},
	{name: "name", kind: kindText, typ: "string", def: "none",
		set: func(d *draft, v value) error { d.lim.Name = v.text; return nil }},
	{name: "replaces", kind: kindReplaces, typ: "list of `{name: …}`", def: "none",
		set: func(d *draft, v value) error { d.lim.Replaces = v.list; return nil }},
	{name: "algorithm", kind: kindText, param: "algorithm",
		unlimitedWhy: neverCounted, unlimitedAt: atName, typ: "see below", def: "`fixed_window`",
		set: func(d *draft, v value) error { return d.lim.Spec.Algorithm.UnmarshalText([]byte(v.text)) }},
	{name: "burst", kind: kindWhole, min: 1, max: math.MaxUint32, param: "burst",
		unlimitedWhy: neverCounted, unlimitedAt: atName, typ: "1 to 4294967295", def: "`requests_per_unit`",
		set: func(d *draft, v value) error { d.lim.Spec.Burst = v.n; return nil }},
	{name: "precision", kind: kindWhole, min: 1, max: math.MaxUint32, param: "precision",
		unlimitedWhy: neverCounted, unlimitedAt: atName, typ: "1 to the window in ms", def: "1",
		set: func(d *draft, v value) error { d.lim.Spec.Precision = int(v.n); return nil }},
	{name: "unit_multiplier", kind: kindWhole, min: 1, max: math.MaxUint32, param: "window",
		unlimitedWhy: neverCounted, unlimitedAt: atName, typ: "1 or more", def: "1",
		set: func(d *draft, v value) error { d.lim.UnitMultiplier = uint32(v.n); return nil }},
	{name: "calendar", kind: kindBool, param: "calendar", paramAt: atName,
		unlimitedWhy: neverCounted, unlimitedAt: atName, typ: "bool", def: "false",
		set: func(d *draft, v value) error { d.calendar = v.b; return nil }},
	{name: "timezone", kind: kindText, unlimitedWhy: neverCounted, unlimitedAt: atName,
		typ: "IANA name", def: "`UTC`", set: setTimezone},
}

// rateLimitFields names the fields of a rate_limit, in the table's order.
var rateLimitFields = fieldNames(rateLimitTable)

func fieldNames(table []rateLimitField) []string {
	out := make([]string, len(table))
	for i, f := range table {
		out[i] = f.name
	}
	return out
}

func setUnit(d *draft, v value) error {
	if v.null {
		return nil
	}
	i := slices.IndexFunc(unitNames[1:], func(n string) bool { return strings.EqualFold(n, v.text) })
	if i < 0 {
		return fmt.Errorf("unknown unit %q (want second, minute, hour, day, week, month or year)", v.text)
	}
	d.lim.Unit = Unit(i + 1)
	return nil
}

func setTimezone(d *draft, v value) error {
	if v.text == "" {
		return nil
	}
	// "Local" is the machine's zone: the same rule would count differently
	// from host to host.
	loc, err := time.LoadLocation(v.text)
	if err != nil || v.text == "Local" {
		return fmt.Errorf("unknown time zone %q (want an IANA name such as America/New_York, or UTC)", v.text)
	}
	d.location = loc
	return nil
}

// Window returns the length of mult units, or an error for the zero Unit,
// a mult of 0, or a window too long for a time.Duration.
func (u Unit) Window(mult uint32) (time.Duration, error) {
	d := u.Duration()
	switch {
	case d == 0:
		return 0, fmt.Errorf("no unit")
	case mult == 0:
		return 0, fmt.Errorf("0 %ss is no window (want at least 1)", u)
	case int64(mult) > math.MaxInt64/int64(d):
		return 0, fmt.Errorf("%d %ss is too long a window (want at most %d)", mult, u, math.MaxInt64/int64(d))
	}
	return d * time.Duration(mult), nil
}

// rateLimit parses and checks one rate limit, or returns nil.
func (p *parser) rateLimit(n *yaml.Node, path string) *Limit {
	fields, ok := p.mapping(n, path, "a rate limit", rateLimitFields)
	if !ok {
		return nil
	}
	nerr := len(p.errs)
	d := p.decodeRateLimit(n, path, fields)
	p.checkReplaces(d)
	if d.lim.Unlimited {
		p.checkUnlimited(d)
	} else {
		p.countedSpec(d)
	}
	if len(p.errs) > nerr {
		return nil
	}
	p.costWarnings(d)
	return d.lim
}

// countedSpec completes and checks the spec of a counted limit, recording
// its problems.
func (p *parser) countedSpec(d *draft) {
	l := d.lim
	if l.Unit == 0 {
		if f, ok := d.field("unit"); !ok || isNull(f.val) {
			p.errorf(p.pos(d.node), join(d.path, "unit"), "missing (want second, minute, hour, day, week, month or year, or unlimited: true)")
		}
		return
	}
	if _, ok := d.field("requests_per_unit"); !ok {
		p.warnf(p.pos(d.node), join(d.path, "requests_per_unit"), "missing, so 0: every request is denied (write requests_per_unit: 0 to say so)")
	}
	w, err := l.Unit.Window(l.UnitMultiplier)
	if err != nil {
		p.errorf(p.at(d, "unit_multiplier", atName), join(d.path, "unit_multiplier"), "%v", err)
		return
	}
	l.Spec.Limit, l.Spec.Window = int64(l.RequestsPerUnit), w
	if l.Spec.Algorithm == limit.SlidingWindow && l.Spec.Precision == 0 {
		l.Spec.Precision = 1
	}
	if d.isGiven("timezone") && !d.calendar {
		p.errorf(p.at(d, "timezone", atName), join(d.path, "timezone"),
			"given without calendar: true (a time zone only places calendar windows)")
	}
	if d.calendar {
		l.Spec.Calendar = p.calendar(d)
	}
	p.reportSpec(d, l.Spec.Validate())
}

// calendar returns the time zone of a limit with calendar: true, or nil
// with the problem recorded. Its window (Spec.Window) is already one unit.
func (p *parser) calendar(d *draft) *time.Location {
	at, fp := p.at(d, "calendar", atName), join(d.path, "calendar")
	if m := d.lim.UnitMultiplier; m != 1 {
		p.errorf(at, fp, "needs unit_multiplier 1, not %d (a calendar window is one day, week, month or year)", m)
		return nil
	}
	switch d.lim.Unit {
	case day, week, month, year:
	default:
		p.errorf(at, fp, "needs unit day, week, month or year, not %s", d.lim.Unit)
		return nil
	}
	if d.location != nil {
		return d.location
	}
	return time.UTC
}

// costWarnings records the legal but costly choices of a limit.
func (p *parser) costWarnings(d *draft) {
	spec := d.lim.Spec
	if spec.Algorithm == limit.SlidingLog && spec.Limit > slidingLogWarnAbove {
		p.warnf(p.pos(d.node), d.path, "sliding_log keeps one entry per admitted hit: %d per window per counter is costly (sliding_window with a precision is cheaper)", spec.Limit)
	}
	if spec.Algorithm == limit.SlidingWindow && spec.Precision > precisionWarnAbove {
		p.warnf(p.at(d, "precision", atValue), join(d.path, "precision"), "%d sub-window counters per counter is costly (precision above %d rarely helps)", spec.Precision, precisionWarnAbove)
	}
}

// draft is a rate_limit being parsed. A parser reuses one for every
// rate_limit, so that reading one allocates little beyond its Limit.
type draft struct {
	node     *yaml.Node
	path     string
	given    []field // by index in rateLimitTable; key nil when not given
	lim      *Limit
	calendar bool
	location *time.Location
}

func (d *draft) reset(n *yaml.Node, path string, pos Position) {
	given := d.given
	if given == nil {
		given = make([]field, len(rateLimitTable))
	}
	clear(given)
	*d = draft{node: n, path: path, given: given, lim: &Limit{Pos: pos, UnitMultiplier: 1}}
}

func (d *draft) field(name string) (field, bool) {
	f := d.given[fieldIndex(name)]
	return f, f.key != nil
}

// isGiven reports whether the field is in the mapping with a value other
// than null or "".
func (d *draft) isGiven(name string) bool {
	f, ok := d.field(name)
	return ok && !isNull(f.val) && !(f.val.Kind == yaml.ScalarNode && f.val.Value == "")
}

// decodeRateLimit reads a rate_limit's fields into the parser's draft.
func (p *parser) decodeRateLimit(n *yaml.Node, path string, fields []field) *draft {
	d := &p.draft
	d.reset(n, path, p.pos(n))
	for _, fl := range fields {
		i := fieldIndex(fl.name)
		d.given[i] = fl
		def := &rateLimitTable[i]
		fp := join(path, fl.name)
		v, ok := p.decode(def, fl.val, fp)
		if !ok {
			continue
		}
		if err := def.set(d, v); err != nil {
			p.errorf(p.pos(fl.val), fp, "%v", err)
		}
	}
	return d
}

func fieldIndex(name string) int {
	i := slices.Index(rateLimitFields, name)
	if i < 0 {
		panic("rules: no rate_limit field " + name) // mapping admits only the table's names
	}
	return i
}

// decode reads a value of the field's kind, recording a wrong kind or
// range; ok is false when there is nothing to set.
func (p *parser) decode(def *rateLimitField, n *yaml.Node, path string) (v value, ok bool) {
	switch def.kind {
	case kindText:
		v.text, ok = p.str(n, path)
		v.null = isNull(n)
	case kindBool:
		v.b, ok = p.boolean(n, path), true
	case kindWhole:
		v.n, ok = p.integer(n, path, def.min, def.max)
	case kindReplaces:
		v.list, ok = p.replaces(n, path), true
	}
	return v, ok
}

// at returns where a problem of the named field points: the rate_limit
// when the field is not given.
func (p *parser) at(d *draft, name string, w where) Position {
	f, ok := d.field(name)
	switch {
	case !ok:
		return p.pos(d.node)
	case w == atName:
		return p.pos(f.key)
	}
	return p.pos(f.val)
}

// checkReplaces records a limit that replaces itself.
func (p *parser) checkReplaces(d *draft) {
	for _, r := range d.lim.Replaces {
		if r != "" && r == d.lim.Name {
			p.errorf(p.at(d, "replaces", atName), join(d.path, "replaces"), "replaces its own name %q (a limit cannot replace itself)", r)
		}
	}
}

// checkUnlimited records the fields unlimited: true refuses or ignores.
func (p *parser) checkUnlimited(d *draft) {
	for i := range rateLimitTable {
		def := &rateLimitTable[i]
		switch {
		case def.unlimitedWhy != "" && d.isGiven(def.name):
			p.errorf(p.at(d, def.name, def.unlimitedAt), join(d.path, def.name), "given with unlimited: true (%s; remove one of them)", def.unlimitedWhy)
		case def.unlimitedIgnored && d.given[i].val != nil:
			p.warnf(p.at(d, def.name, atValue), join(d.path, def.name), "ignored: the limit is unlimited")
		}
	}
}

// reportSpec records the problems of limit.Spec.Validate, each a
// *limit.SpecError, at the first given field that sets the parameter at
// fault, else at the rate_limit.
func (p *parser) reportSpec(d *draft, err error) {
	if err == nil {
		return
	}
	errs := []error{err}
	if multi, ok := err.(interface{ Unwrap() []error }); ok {
		errs = multi.Unwrap()
	}
	for _, wrapped := range errs {
		// Should Validate's errors change shape, a rule file still gets
		// them, at the rate_limit, rather than bringing the server down.
		e, ok := wrapped.(*limit.SpecError)
		if !ok {
			e = &limit.SpecError{Msg: wrapped.Error()}
		}
		pos, path := p.pos(d.node), d.path
		for i := range rateLimitTable {
			def := &rateLimitTable[i]
			if d.given[i].key != nil && def.param != "" && def.param == e.Param {
				pos, path = p.at(d, def.name, def.paramAt), join(d.path, def.name)
				break
			}
		}
		p.errorf(pos, path, "%s", e.Msg)
	}
}
