package replay

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// side is one rule set with its own store and service. It is the
// service's Metrics, to learn which rules were over a limit in shadow mode,
// where the answer says OK.
type side struct {
	set   *rules.Set
	now   time.Time // the virtual clock: the time of the request being decided
	svc   *envoy.Service
	stats *SetStats
	rules map[*rules.Rule]*ruleTally
	seen  []seenRule    // the rules the request being decided met
	over  []*rules.Rule // those of its descriptors a limit denied, shadow mode included
}

// ruleTally is where a rule's requests are counted: its own counts in one
// set, and the changes of the rule of the same path in both.
type ruleTally struct {
	count *RuleCount
	diff  *RuleDiff
}

// Hits notes the rules of the descriptors a limit denied.
func (s *side) Hits(_ *rules.Set, _ string, hits []envoy.DescriptorHits) {
	for _, h := range hits {
		if h.Over && h.Resolved.Rule != nil {
			s.over = append(s.over, h.Resolved.Rule)
		}
	}
}

// The rest of envoy.Metrics: a replay counts in its report alone.
func (*side) Decision(time.Duration, *pb.RateLimitResponse, error) {}
func (*side) Refused(string)                                       {}
func (*side) DomainNotFound(string, int)                           {}
func (*side) StoreCall(time.Duration, error)                       {}
func (*side) FailureAnswer(rules.FailureMode, string)              {}
func (*side) GlobalShadow()                                        {}

// newSide returns the side of set, whose rules count their changes in
// diffs (by domain and path, filled in here for the rules diffs lacks).
func newSide(set *rules.Set, name string, diffs map[ruleKey]*RuleDiff, isNew bool) (*side, error) {
	s := &side{set: set, stats: &SetStats{Name: name}, rules: map[*rules.Rule]*ruleTally{}}
	now := func() time.Time { return s.now }
	// Big enough never to refuse a counter: a replay judges the rules,
	// not the production store's size.
	store := limit.NewMemory(limit.MemoryOptions{Now: now, MaxEntries: math.MaxInt32})
	svc, err := envoy.New(func() *rules.Set { return set }, store, envoy.Options{Now: now, Metrics: s})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	s.svc = svc
	for _, r := range set.Rules() {
		k := ruleKey{r.Domain, r.Path}
		d := diffs[k]
		if d == nil {
			d = &RuleDiff{Domain: r.Domain, Rule: r.Path}
			diffs[k] = d
		}
		c := &RuleCount{Pos: r.Pos.String(), Shadow: r.ShadowMode}
		if isNew {
			d.New = c
		} else {
			d.Old = c
		}
		s.rules[r] = &ruleTally{count: c, diff: d}
	}
	return s, nil
}

// ruleKey names a rule in either set.
type ruleKey struct{ domain, path string }

// outcome is what one side decided for a request.
type outcome struct {
	code    decision
	overBy  string // the rule of the first descriptor over its limit
	errText string
}

type decision uint8

const (
	allowed decision = iota
	denied
	invalid
)

func (d decision) String() string {
	return [...]string{"allowed", "denied", "invalid"}[d]
}

// decide runs one request through the side's service at time t, which is
// never before the last one's (Run hands requests in time order).
func (s *side) decide(ctx context.Context, t time.Time, req *pb.RateLimitRequest) outcome {
	s.now = t
	s.seen, s.over = s.seen[:0], s.over[:0]
	resp, err := s.svc.ShouldRateLimit(ctx, req)
	if err != nil {
		s.stats.Invalid++
		return outcome{code: invalid, errText: status.Convert(err).Message()}
	}
	var o outcome
	for i, st := range resp.GetStatuses() { // one per descriptor
		r := s.set.Match(req.Domain, entriesOf(req.Descriptors[i].GetEntries()))
		if r == nil {
			continue
		}
		over := st.GetCode() == pb.RateLimitResponse_OVER_LIMIT || r.ShadowMode && slices.Contains(s.over, r)
		s.see(r, over)
		if over && o.overBy == "" && !r.ShadowMode {
			o.overBy = r.Path
		}
	}
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		s.stats.Denied++
		o.code = denied
	} else {
		s.stats.Allowed++
	}
	for _, sr := range s.seen {
		sr.t.count.add(o.code == denied, sr.over)
	}
	return o
}

// seenRule is a rule a descriptor of the request being decided matched,
// and whether one such descriptor was over its limit.
type seenRule struct {
	t    *ruleTally
	over bool
}

// see notes that a descriptor of the request matched r: a rule met by
// several descriptors of one request counts the request once.
func (s *side) see(r *rules.Rule, over bool) {
	t := s.rules[r]
	for i := range s.seen {
		if s.seen[i].t == t {
			s.seen[i].over = s.seen[i].over || over
			return
		}
	}
	s.seen = append(s.seen, seenRule{t, over})
}

func entriesOf(es []*rlv3.RateLimitDescriptor_Entry) []rules.Entry {
	out := make([]rules.Entry, len(es))
	for i, e := range es {
		out[i] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return out
}
