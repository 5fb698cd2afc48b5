package rules

import (
	"fmt"
	"slices"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Descriptor is one descriptor of a request.
type Descriptor struct {
	// Entries are the key/value pairs, in request order.
	Entries []Entry
	// Override, when its Unit is not zero, is the limit the request sent
	// (Envoy's RateLimitDescriptor.limit); it replaces the rules'.
	Override Override
}

// Override is a limit a request sends with a descriptor; the zero
// Override is none.
type Override struct {
	RequestsPerUnit uint32
	Unit            Unit // zero: no override
	// UnitMultiplier is the number of units in a window. Resolve refuses
	// 0: a sender that means 1 must say so.
	UnitMultiplier uint32
}

// Resolution is what applies to a request, as Resolve found it. Its zero
// value is ready for use; reused from request to request, it lets Resolve
// allocate nothing but the counter keys. It is not safe for concurrent use.
type Resolution struct {
	// Descriptors has one element per request descriptor, in request order.
	Descriptors []Resolved

	limits    []ResolvedLimit // every descriptor's, back to back
	overrides []Limit         // the overrides' limits, which limits point into
	key       []byte          // the request's counter keys, back to back
	keyEnds   []int           // where each key ends in key
}

// Resolved is what applies to one request descriptor.
type Resolved struct {
	// Entries are the descriptor's, as given to Resolve.
	Entries []Entry
	// Rule is the rule matched (Set.Match), nil for none. An override
	// takes from it the failure mode, and its first limit's algorithm and
	// precision.
	Rule *Rule
	// Override reports that the request sent its own limit: the
	// descriptor's one limit, in Enforce mode whatever the rule's modes,
	// as in the reference server.
	Override bool
	// Mode is the limit.Hit.Mode of the counted limits: Advisory for a
	// rule in shadow mode (which wins over quota mode), Quota for a rule
	// in quota mode, else Enforce.
	Mode limit.Mode
	// Limits are the limits that apply, in the rule's order.
	Limits []ResolvedLimit
}

// ResolvedLimit is one limit applying to a request descriptor.
type ResolvedLimit struct {
	// Limit is the rule's limit, or the override's (only RequestsPerUnit,
	// Unit, UnitMultiplier and Spec set). It is shared and read-only,
	// valid until the Resolution is used again.
	Limit *Limit
	// Key is the counter's key (limit.Hit.Key), "" when the limit is
	// unlimited or replaced.
	Key string
	// Replaced reports that a limit another descriptor of the request
	// matched names this one in its replaces: it is neither counted nor
	// reported. Unlimited limits are never replaced, as in the reference.
	Replaced bool
}

// Counted reports whether a store evaluates the limit: it is neither
// unlimited nor replaced.
func (l *ResolvedLimit) Counted() bool { return l.Key != "" }

// Resolve writes into dst, replacing its contents, what applies to each
// of a request's descriptors: the rule matched, the override's limit, the
// limits not replaced, and the counter keys. The only error is an invalid
// override, naming its field ("descriptors[i].limit..."): an unknown unit,
// a multiplier of 0, a window too long, or a spec limit.Spec.Validate
// refuses. When dst has room from earlier requests, it allocates one
// string, holding every key.
func (s *Set) Resolve(dst *Resolution, domain string, descs []Descriptor) error {
	dst.Reset()
	if cap(dst.overrides) < len(descs) {
		// Limits point into overrides, which must not move: room for one
		// per descriptor.
		dst.overrides = make([]Limit, 0, len(descs))
	}
	for i := range descs {
		if err := dst.add(s, domain, &descs[i], i); err != nil {
			return err
		}
	}
	// replaces needs every descriptor's rule, so the keys come second.
	dst.setKeys(domain)
	return nil
}

// add appends what applies to d, the request's descriptor index.
func (r *Resolution) add(s *Set, domain string, d *Descriptor, index int) error {
	rd := Resolved{Entries: d.Entries, Rule: s.Match(domain, d.Entries)}
	from := len(r.limits)
	switch {
	case d.Override.Unit != 0:
		l, err := overrideLimit(d.Override, rd.Rule, index)
		if err != nil {
			return err
		}
		r.overrides = append(r.overrides, l)
		r.limits = append(r.limits, ResolvedLimit{Limit: &r.overrides[len(r.overrides)-1]})
		rd.Override = true
	case rd.Rule != nil:
		for _, l := range rd.Rule.Limits {
			r.limits = append(r.limits, ResolvedLimit{Limit: l})
		}
		rd.Mode = ruleMode(rd.Rule)
	}
	// Only the length counts here: setKeys points Limits at the final
	// backing array.
	rd.Limits = r.limits[from:]
	r.Descriptors = append(r.Descriptors, rd)
	return nil
}

// setKeys points each descriptor's Limits at its run of r.limits, which
// appending may have moved, marks the replaced limits and gives the counted
// ones their keys. The keys are written back to back into r.key and become
// substrings of one string: one allocation per request.
func (r *Resolution) setKeys(domain string) {
	r.key, r.keyEnds = r.key[:0], r.keyEnds[:0]
	at := 0
	for i := range r.Descriptors {
		rd := &r.Descriptors[i]
		n := len(rd.Limits)
		rd.Limits = r.limits[at : at+n : at+n]
		at += n
		for j := range rd.Limits {
			rl := &rd.Limits[j]
			// An unlimited limit stays unlimited whoever replaces it:
			// the reference settles it before replaces.
			rl.Replaced = !rd.Override && !rl.Limit.Unlimited && replaced(rl.Limit, r.Descriptors)
			if rl.Limit.Unlimited || rl.Replaced {
				continue
			}
			r.key = appendCounterKey(r.key, domain, rd, rl.Limit)
			r.keyEnds = append(r.keyEnds, len(r.key))
		}
	}
	if len(r.keyEnds) == 0 {
		return
	}
	// Every descriptor's Limits are now runs of r.limits.
	keys, k, start := string(r.key), 0, 0
	for i := range r.limits {
		if rl := &r.limits[i]; !rl.Limit.Unlimited && !rl.Replaced {
			rl.Key = keys[start:r.keyEnds[k]]
			start = r.keyEnds[k]
			k++
		}
	}
}

// replaced reports whether a limit of a rule that one of descs matched
// without an override names l in its replaces. An override neither
// replaces nor is replaced.
func replaced(l *Limit, descs []Resolved) bool {
	if l.Name == "" {
		return false
	}
	for i := range descs {
		if descs[i].Rule == nil || descs[i].Override {
			continue
		}
		for _, other := range descs[i].Rule.Limits {
			if slices.Contains(other.Replaces, l.Name) {
				return true
			}
		}
	}
	return false
}

// overrideField names descriptor index's override in errors.
func overrideField(index int) string {
	return fmt.Sprintf("descriptors[%d].limit", index)
}

// overrideLimit builds the limit of descriptor index's override. A matched
// rule lends its first limit's algorithm and precision, so an override of
// a sliding window still slides; override windows are never calendar ones.
func overrideLimit(o Override, r *Rule, index int) (Limit, error) {
	if int(o.Unit) >= len(unitNames) {
		return Limit{}, fmt.Errorf("%s.unit: %v is not a unit", overrideField(index), o.Unit)
	}
	if o.UnitMultiplier == 0 {
		return Limit{}, fmt.Errorf("%s.unit_multiplier: must be at least 1 when set", overrideField(index))
	}
	w, err := o.Unit.Window(o.UnitMultiplier)
	if err != nil {
		return Limit{}, fmt.Errorf("%s.unit_multiplier: %d %ss is longer than a window can be", overrideField(index), o.UnitMultiplier, o.Unit)
	}
	spec := limit.Spec{Limit: int64(o.RequestsPerUnit), Window: w}
	if r != nil && len(r.Limits) > 0 && !r.Limits[0].Unlimited {
		base := r.Limits[0].Spec
		spec.Algorithm = base.Algorithm
		if int64(base.Precision) <= w.Milliseconds() {
			spec.Precision = base.Precision // else too fine for the override's window: 0 is one sub-window
		}
	}
	// What is left to refuse is a sliding_log of too high a limit.
	if err := spec.Validate(); err != nil {
		return Limit{}, fmt.Errorf("%s.requests_per_unit: %w", overrideField(index), err)
	}
	return Limit{RequestsPerUnit: o.RequestsPerUnit, Unit: o.Unit, UnitMultiplier: o.UnitMultiplier, Spec: spec}, nil
}

// ruleMode is the limit.Mode of a rule's hits (Resolved.Mode).
func ruleMode(r *Rule) limit.Mode {
	switch {
	case r.ShadowMode:
		return limit.Advisory
	case r.QuotaMode:
		return limit.Quota
	}
	return limit.Enforce
}

// Reset empties r, keeping its room, and drops its references to rules so
// that a kept Resolution does not keep a replaced Set alive.
func (r *Resolution) Reset() {
	clear(r.Descriptors)
	clear(r.limits)
	clear(r.overrides)
	r.Descriptors, r.limits, r.overrides, r.key = r.Descriptors[:0], r.limits[:0], r.overrides[:0], r.key[:0]
}
