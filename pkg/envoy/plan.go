package envoy

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// scratch is the working state of one request, pooled so that a request
// reuses the slices of an earlier one.
type scratch struct {
	in        []rules.Descriptor // the request's descriptors, as Resolve reads them
	entries   []rules.Entry      // their entries, back to back
	res       rules.Resolution   // what applies to each descriptor
	descs     []descPlan         // per descriptor, what the request adds to the rules
	hits      []limit.Hit        // the counted limits, in resolution order
	at        []hitAt            // where each hit comes from: at[i] is hits[i]'s
	decisions []limit.Decision   // the store's answer, one per hit
	reported  []DescriptorHits   // what Options.Metrics is told (hitsOf)

	failure failureAnswer // set when the failure policy answered
}

// hitAt is the limit a hit counts: descriptor desc, its resolved limit
// limit.
type hitAt struct {
	desc, limit int
}

// descPlan is what a request descriptor adds to its resolved limits.
type descPlan struct {
	cost      int64
	refund    bool
	usage     bool              // the descriptor carries its own hits_addend: a usage report (limit.Hit.Usage)
	failure   rules.FailureMode // resolved: never FailureDefault
	metric    string            // the rule it counts against (metricLabel); "" when no limit applies
	counted   bool              // a limit is counted: it has hits
	unlimited bool              // only unlimited limits apply
	quota     bool              // refused only when every quota is over (quotaRule)
	out       descOutcome       // from the decisions (judge)
}

func (sc *scratch) reset() {
	clear(sc.in)
	clear(sc.entries)
	clear(sc.descs)
	clear(sc.hits)
	sc.res.Reset()
	sc.in, sc.entries, sc.descs, sc.hits, sc.at, sc.decisions = sc.in[:0], sc.entries[:0], sc.descs[:0], sc.hits[:0], sc.at[:0], sc.decisions[:0]
	clear(sc.reported)
	sc.reported = sc.reported[:0]
	sc.failure = failureAnswer{}
}

// plan resolves the request's descriptors and builds one hit per counted
// limit. Its only error is an invalid limit override, naming the field.
func (sc *scratch) plan(set *rules.Set, req *pb.RateLimitRequest, global rules.FailureMode, quotaMode bool) error {
	requestCost := cmp.Or(int64(req.GetHitsAddend()), 1)
	for i, d := range req.GetDescriptors() {
		from := len(sc.entries)
		for _, e := range d.GetEntries() {
			sc.entries = append(sc.entries, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		in := rules.Descriptor{Entries: sc.entries[from:len(sc.entries):len(sc.entries)]}
		if o := d.GetLimit(); o != nil {
			var err error
			if in.Override, err = override(o, i); err != nil {
				return err
			}
		}
		sc.in = append(sc.in, in)
		ds := descPlan{cost: requestCost, refund: d.GetIsNegativeHits(), failure: global}
		if h := d.GetHitsAddend(); h != nil {
			// A descriptor's own hits_addend is usage, charged whatever
			// the answer, as the reference server charges it.
			ds.cost, ds.usage = int64(min(h.GetValue(), maxCost)), true
		}
		sc.descs = append(sc.descs, ds)
	}
	if err := set.Resolve(&sc.res, req.GetDomain(), sc.in); err != nil {
		return err
	}
	for i := range sc.res.Descriptors {
		sc.planHits(i, quotaMode)
	}
	sc.quotaRule()
	sc.decisions = slices.Grow(sc.decisions[:0], len(sc.hits))[:len(sc.hits)]
	clear(sc.decisions)
	return nil
}

// quotaRule makes the quota hits advisory when a quota descriptor always
// passes (in shadow mode, or with no counted limit, as the reference
// server has it): the quotas can then never refuse the request.
func (sc *scratch) quotaRule() {
	for i := range sc.descs {
		ds := &sc.descs[i]
		if !ds.quota || (ds.counted && sc.res.Descriptors[i].Mode != limit.Advisory) {
			continue
		}
		for j := range sc.hits {
			if sc.hits[j].Mode == limit.Quota {
				sc.hits[j].Mode, sc.hits[j].Group = limit.Advisory, 0
			}
		}
		return
	}
}

// planHits completes descriptor i's plan from its resolution and appends
// the hits of its counted limits.
func (sc *scratch) planHits(i int, quotaMode bool) {
	rd, ds := &sc.res.Descriptors[i], &sc.descs[i]
	if rd.Rule != nil && rd.Rule.FailureMode != rules.FailureDefault {
		ds.failure = rd.Rule.FailureMode
	}
	ds.metric = metricLabel(rd)
	ruleQuota := rd.Rule != nil && !rd.Override && rd.Rule.QuotaMode
	// A quota descriptor's limits are one quota, its index.
	mode, group := rd.Mode, uint32(0)
	if (ruleQuota || quotaMode) && mode != limit.Advisory {
		mode, group = limit.Quota, uint32(i)
	}
	unlimited := false
	for j := range rd.Limits {
		switch l := &rd.Limits[j]; {
		case l.Counted():
			sc.hits = append(sc.hits, limit.Hit{Key: l.Key, Spec: l.Limit.Spec, Cost: ds.cost, Refund: ds.refund, Usage: ds.usage, Mode: mode, Group: group})
			sc.at = append(sc.at, hitAt{desc: i, limit: j})
			ds.counted = true
		case !l.Replaced && l.Limit.Unlimited:
			unlimited = true
		}
	}
	ds.unlimited = unlimited && !ds.counted
	// As the reference server: a rule's quota needs a limit counted (not
	// replaced away); in global quota mode every descriptor is one, unless
	// only unlimited limits apply.
	ds.quota = (ruleQuota && ds.counted) || (quotaMode && !ds.unlimited)
}

// override returns the rules.Override of descriptor index's limit
// override, or an error naming the field for a unit that is not one
// (envoy.type.v3.RateLimitUnit numbers units as rules.Unit, without week).
func override(o *rlv3.RateLimitDescriptor_RateLimitOverride, index int) (rules.Override, error) {
	u := o.GetUnit()
	if u < typev3.RateLimitUnit_SECOND || u > typev3.RateLimitUnit_YEAR {
		return rules.Override{}, fmt.Errorf("descriptors[%d].limit: unit %v is not a rate-limit unit (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", index, u)
	}
	mult := uint32(1)
	if m := o.GetUnitMultiplier(); m != nil {
		mult = m.GetValue() // 0 is refused by Resolve, naming the field
	}
	return rules.Override{RequestsPerUnit: o.GetRequestsPerUnit(), Unit: rules.Unit(u), UnitMultiplier: mult}, nil
}

// overrideMetric names the rule of an override that matched none.
const overrideMetric = "(override)"

// metricLabel names the rule a descriptor counts against: its path,
// overrideMetric, or "" when no limit applies.
func metricLabel(rd *rules.Resolved) string {
	switch {
	case rd.Override && rd.Rule == nil:
		return overrideMetric
	case rd.Override || (rd.Rule != nil && len(rd.Rule.Limits) > 0):
		return rd.Rule.Path
	}
	return ""
}

// descOutcome is one descriptor's outcome.
type descOutcome struct {
	code      pb.RateLimitResponse_Code
	limit     *rules.Limit    // reported as current_limit; nil for none
	decision  *limit.Decision // limit's
	wouldDeny bool            // a limit denied (even if shadow mode turned it OK)
	near      int64           // hits that reached a limit's near-limit ratio (nearHits), the most of any limit
}

// judge computes each descriptor's outcome (descPlan.out) and reports
// whether the request is rejected (before global shadow mode): when an
// enforced descriptor is over, or every quota descriptor is. A descriptor
// is over when one of its limits denied, and reports its most restrictive
// limit. After a store failure only the limits whose policy denies count
// (applyFailure).
func (sc *scratch) judge(nearRatio float64, storeFailed bool) (over bool) {
	for di := range sc.descs {
		sc.descs[di].out = descOutcome{code: pb.RateLimitResponse_OK}
	}
	for i, at := range sc.at {
		if storeFailed && sc.descs[at.desc].failure != rules.FailureDeny {
			continue
		}
		l := sc.res.Descriptors[at.desc].Limits[at.limit].Limit
		sc.descs[at.desc].out.add(l, &sc.decisions[i], nearRatio)
	}
	quotas, quotasOver := 0, 0
	for di := range sc.descs {
		out := &sc.descs[di].out
		if out.wouldDeny && sc.res.Descriptors[di].Mode != limit.Advisory {
			out.code = pb.RateLimitResponse_OVER_LIMIT
		}
		isOver := out.code == pb.RateLimitResponse_OVER_LIMIT
		switch {
		case sc.descs[di].quota:
			quotas++
			if isOver {
				quotasOver++
			}
		case isOver:
			over = true
		}
	}
	return over || (quotas > 0 && quotasOver == quotas)
}

// add counts the decision d of the descriptor's limit l.
func (o *descOutcome) add(l *rules.Limit, d *limit.Decision, nearRatio float64) {
	if !d.Allowed {
		o.wouldDeny = true
	} else {
		o.near = max(o.near, nearHits(l.Spec.Capacity(), d.Remaining, nearRatio))
	}
	// The most restrictive limit: a denial first, then the least remaining.
	if o.limit == nil || (!d.Allowed && o.decision.Allowed) ||
		(d.Allowed == o.decision.Allowed && d.Remaining < o.decision.Remaining) {
		o.limit, o.decision = l, d
	}
}

// nearHits is how many hits of an admission that left remaining landed at
// or above nearRatio of capacity: as the reference server, only the hits
// past the ratio.
func nearHits(capacity, remaining int64, nearRatio float64) int64 {
	if capacity <= 0 {
		return 0
	}
	used, threshold := capacity-remaining, int64(math.Ceil(nearRatio*float64(capacity)))
	return max(0, used-threshold+1)
}

// applyFailure turns each limit's decision into its failure policy's: a
// denial for FailureDeny, nothing known for the others. It reports whether
// a limit asks for FailureUnavailable.
func (sc *scratch) applyFailure() (unavailable bool) {
	for i, at := range sc.at {
		switch sc.descs[at.desc].failure {
		case rules.FailureDeny:
			sc.decisions[i] = limit.Decision{}
		case rules.FailureUnavailable:
			unavailable = true
		}
	}
	return unavailable
}

// hitsOf is what the request did to each descriptor a limit decided,
// refunds excepted, for Options.Metrics.
func (sc *scratch) hitsOf(charged bool) []DescriptorHits {
	for di := range sc.descs {
		ds, out := &sc.descs[di], &sc.descs[di].out
		if ds.metric == "" || out.limit == nil || ds.refund {
			continue
		}
		sc.reported = append(sc.reported, DescriptorHits{Resolved: &sc.res.Descriptors[di], Rule: ds.metric,
			Cost: ds.cost, Usage: ds.usage, Over: out.wouldDeny, Near: out.near, Charged: charged})
	}
	return sc.reported
}
