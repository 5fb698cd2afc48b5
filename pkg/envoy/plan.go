package envoy

import (
	"fmt"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// scratch is the working state of one request, pooled so that a request
// reuses the slices of an earlier one.
type scratch struct {
	entries   []rules.Entry // every descriptor's entries, back to back
	descs     []descState
	items     []item
	matched   []*rules.Rule // per descriptor, the rule whose limits apply (nil for none or an override)
	hits      []limit.Hit
	decisions []limit.Decision
	key       []byte
	label     []byte // a detailed metric label
	outcomes  []descOutcome
	quota     []int

	failure failureAnswer // set when the failure policy answered
}

// descState is one request descriptor.
type descState struct {
	rule       *rules.Rule // nil when no rule matched
	from, to   int         // its entries: scratch.entries[from:to]
	cost       int64
	refund     bool
	override   bool
	shadow     bool // per-rule shadow mode (never for overrides)
	quota      bool // quota mode (never for overrides)
	itemsFrom  int  // its limits: scratch.items[itemsFrom:itemsTo]
	itemsTo    int
	ruleMetric string // metric label; "" when no limit applies
}

// item is one limit applying to a descriptor.
type item struct {
	desc       int
	lim        *rules.Limit // nil for an override
	spec       limit.Spec
	name       string
	rpu        uint32
	unit       rules.Unit
	multiplier uint32
	unlimited  bool
	dropped    bool              // replaced by another matched limit
	hit        int               // index in scratch.hits; -1 when not evaluated
	failure    rules.FailureMode // resolved: never FailureDefault
	failed     bool              // the store failed and the policy let it pass
}

func (sc *scratch) reset() {
	clear(sc.entries)
	clear(sc.descs)
	clear(sc.items)
	clear(sc.matched)
	clear(sc.hits)
	sc.entries, sc.descs, sc.items, sc.matched = sc.entries[:0], sc.descs[:0], sc.items[:0], sc.matched[:0]
	sc.hits, sc.decisions, sc.key, sc.label = sc.hits[:0], sc.decisions[:0], sc.key[:0], sc.label[:0]
	sc.failure = failureAnswer{}
}

// plan matches every descriptor, drops replaced limits and builds the hits.
// The only error is an invalid limit override, naming its field.
func (sc *scratch) plan(set *rules.Set, req *pb.RateLimitRequest, global rules.FailureMode) error {
	domain := req.GetDomain()
	requestCost := int64(req.GetHitsAddend())
	if requestCost == 0 {
		requestCost = 1
	}
	for i, d := range req.GetDescriptors() {
		from := len(sc.entries)
		for _, e := range d.GetEntries() {
			sc.entries = append(sc.entries, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		ds := descState{from: from, to: len(sc.entries), cost: requestCost, refund: d.GetIsNegativeHits()}
		if h := d.GetHitsAddend(); h != nil {
			ds.cost = int64(min(h.GetValue(), maxCost))
		}
		ds.rule = set.Match(domain, sc.entries[ds.from:ds.to])
		failure := global
		if ds.rule != nil && ds.rule.FailureMode != rules.FailureDefault {
			failure = ds.rule.FailureMode
		}
		ds.itemsFrom = len(sc.items)
		var matched *rules.Rule
		switch {
		case d.GetLimit() != nil:
			// Envoy's override replaces whatever the rules say, shadow and
			// quota mode included, as in the reference server; only the
			// matched rule's algorithm and failure mode carry over.
			it, err := overrideItem(d.GetLimit(), ds.rule, i)
			if err != nil {
				return err
			}
			it.desc, it.failure = i, failure
			sc.items = append(sc.items, it)
			ds.override = true
			ds.ruleMetric = overrideMetric
			if ds.rule != nil {
				ds.ruleMetric = ds.rule.Path
			}
		case ds.rule != nil:
			for _, l := range ds.rule.Limits {
				sc.items = append(sc.items, item{
					desc: i, lim: l, spec: l.Spec, name: l.Name, rpu: l.RequestsPerUnit,
					unit: l.Unit, multiplier: max(l.UnitMultiplier, 1), unlimited: l.Unlimited,
					hit: -1, failure: failure,
				})
			}
			matched = ds.rule
			ds.shadow, ds.quota = ds.rule.ShadowMode, ds.rule.QuotaMode
			if len(ds.rule.Limits) > 0 {
				ds.ruleMetric = ds.rule.Path
			}
		}
		ds.itemsTo = len(sc.items)
		sc.descs = append(sc.descs, ds)
		sc.matched = append(sc.matched, matched)
	}

	// `replaces` works across the whole request, as in the reference
	// server: a limit is dropped when any matched limit names it. An
	// override neither replaces nor is replaced.
	for i := range sc.items {
		if it := &sc.items[i]; it.lim != nil {
			it.dropped = rules.Replaced(it.lim, sc.matched)
		}
	}

	for i := range sc.items {
		it := &sc.items[i]
		if it.unlimited || it.dropped {
			continue
		}
		ds := &sc.descs[it.desc]
		entries := sc.entries[ds.from:ds.to]
		sc.key = sc.key[:0]
		if it.lim != nil {
			sc.key = appendRuleKey(sc.key, ds.rule, it.lim, entries)
		} else {
			sc.key = rules.AppendOverrideKey(sc.key, domain, ds.rule, entries, it.spec)
		}
		it.hit = len(sc.hits)
		sc.hits = append(sc.hits, limit.Hit{Key: string(sc.key), Spec: it.spec, Cost: ds.cost, Refund: ds.refund, Mode: ds.mode(), Group: uint32(it.desc)})
	}
	sc.decisions = grow(sc.decisions, len(sc.hits))
	return nil
}

// mode returns the mode of the descriptor's hits, which the Limiter
// applies in the same pass as it decides them (limit.Blocked), so that it
// agrees with judge: a shadow-mode limit is charged with the others but
// never stops them (shadow mode wins over quota mode, so that a rule in
// shadow mode changes no outcome); the limits of a quota descriptor are one
// quota, the request being rejected, and charged nothing, only when every
// quota of it is over.
func (ds *descState) mode() limit.Mode {
	switch {
	case ds.shadow:
		return limit.Advisory
	case ds.quota:
		return limit.Quota
	}
	return limit.Enforce
}

// overrideField names descriptor index's override in error messages; it is
// built only on the error path, never for a valid override.
func overrideField(index int) string {
	return fmt.Sprintf("descriptors[%d].limit", index)
}

// overrideMetric is the metric label of an override that matched no rule.
const overrideMetric = "(override)"

// overrideItem builds the limit of a descriptor's override. A matched rule
// lends its first limit's algorithm and sub-window precision, so an
// override of a sliding-window rule still slides; windows follow the epoch
// (no calendar), as override units are fixed lengths.
func overrideItem(o *rlv3.RateLimitDescriptor_RateLimitOverride, r *rules.Rule, index int) (item, error) {
	unit, err := overrideUnit(o.GetUnit(), index)
	if err != nil {
		return item{}, err
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		if m.GetValue() == 0 {
			return item{}, fmt.Errorf("%s.unit_multiplier: must be at least 1 when set", overrideField(index))
		}
		mult = m.GetValue()
	}
	w, err := unit.Window(mult)
	if err != nil {
		return item{}, fmt.Errorf("%s.unit_multiplier: %d %ss is longer than a window can be", overrideField(index), mult, unit)
	}
	spec := limit.Spec{Limit: int64(o.GetRequestsPerUnit()), Window: w}
	if r != nil && len(r.Limits) > 0 && !r.Limits[0].Unlimited {
		base := r.Limits[0].Spec
		spec.Algorithm = base.Algorithm
		if int64(base.Precision) <= w.Milliseconds() {
			spec.Precision = base.Precision // else too fine for the override's window: 0 is one sub-window
		}
	}
	// The checks of a rule's spec, the same as the rule files get: with a
	// valid unit and multiplier and a valid rule's algorithm, what is left
	// to refuse is a sliding_log above limit.MaxSlidingLog.
	if err := spec.Validate(); err != nil {
		return item{}, fmt.Errorf("%s.requests_per_unit: %w", overrideField(index), err)
	}
	return item{spec: spec, rpu: o.GetRequestsPerUnit(), unit: unit, multiplier: mult, hit: -1}, nil
}

// verdict is the outcome of a request, from the decisions.
type verdict struct {
	over  bool          // the request is rejected (before global shadow mode)
	codes []descOutcome // per descriptor
	quota []int         // indices of quota descriptors over their limit
}

// descOutcome is one descriptor's outcome.
type descOutcome struct {
	code      pb.RateLimitResponse_Code
	best      int  // item reported as current_limit; -1 for none
	unlimited bool // only unlimited limits apply
	wouldDeny bool // a limit denied (even if shadow mode turned it OK)
	near      bool
}

// judge computes each descriptor's status and the overall code from the
// decisions: a descriptor is over when one of its limits denied; its
// reported limit is the most restrictive one (a denial first, then the
// least remaining).
func (sc *scratch) judge(nearRatio float64) verdict {
	sc.outcomes = grow(sc.outcomes, len(sc.descs))
	v := verdict{codes: sc.outcomes, quota: sc.quota[:0]}
	quotas := 0
	enforcedOver := false
	for di := range sc.descs {
		ds := &sc.descs[di]
		out := descOutcome{code: pb.RateLimitResponse_OK, best: -1}
		anyLimited := false
		for ii := ds.itemsFrom; ii < ds.itemsTo; ii++ {
			it := &sc.items[ii]
			if it.dropped {
				continue
			}
			if it.unlimited {
				out.unlimited = true
				continue
			}
			anyLimited = true
			if it.hit < 0 || it.failed {
				continue
			}
			d := &sc.decisions[it.hit]
			if !d.Allowed {
				out.wouldDeny = true
			} else if capacity := it.spec.Capacity(); capacity > 0 && float64(capacity-d.Remaining) >= nearRatio*float64(capacity) {
				out.near = true
			}
			if out.best < 0 || restrictive(d, &sc.decisions[sc.items[out.best].hit]) {
				out.best = ii
			}
		}
		if anyLimited {
			out.unlimited = false
		}
		if out.wouldDeny && !ds.shadow {
			out.code = pb.RateLimitResponse_OVER_LIMIT
		}
		if ds.quota && !ds.shadow && anyLimited {
			quotas++
			if out.code == pb.RateLimitResponse_OVER_LIMIT {
				v.quota = append(v.quota, di)
				sc.quota = v.quota
			}
		} else if out.code == pb.RateLimitResponse_OVER_LIMIT {
			enforcedOver = true
		}
		v.codes[di] = out
	}
	v.over = enforcedOver || (quotas > 0 && len(v.quota) == quotas)
	return v
}

// restrictive reports whether a is more restrictive than b.
func restrictive(a, b *limit.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	return a.Remaining < b.Remaining
}

// applyFailure turns every evaluated limit into its failure policy's
// answer: a denial for FailureDeny, nothing known (no current_limit) for
// the others. It reports whether a limit asks for FailureUnavailable.
func (sc *scratch) applyFailure() (unavailable bool) {
	for i := range sc.items {
		it := &sc.items[i]
		if it.hit < 0 {
			continue
		}
		switch it.failure {
		case rules.FailureDeny:
			sc.decisions[it.hit] = limit.Decision{}
		case rules.FailureUnavailable:
			unavailable = true
			it.failed = true
		default:
			it.failed = true
		}
	}
	return unavailable
}
