package replay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// DefaultExamples is Options.Examples when it is 0.
const DefaultExamples = 5

// DefaultTopCounters is Options.TopCounters when it is 0.
const DefaultTopCounters = 20

// DefaultValues is Options.Values when it is 0.
const DefaultValues = 20

// maxCounters bounds the counters whose peak rate is tracked, so that
// traffic of endless distinct values (client IPs) does not hold memory
// without bound; Report.UntrackedCounters says how many were left out.
const maxCounters = 1 << 20

// Options tune Run. The zero value is usable.
type Options struct {
	// Examples is the number of changed requests kept as examples, the
	// first ones in traffic order; 0 means DefaultExamples, a negative
	// number none.
	Examples int
	// TopCounters is the number of counters listed by peak rate; 0 means
	// DefaultTopCounters.
	TopCounters int
	// Values is the number of descriptor values listed by the change in
	// their denials (Report.Values); 0 means DefaultValues, a negative
	// number none.
	Values int
	// OldName and NewName label the rule sets in the report (their
	// directories, say); empty means "old" and "new".
	OldName, NewName string
}

// clock is a virtual clock: the time of the request being replayed.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

// fixedSource serves one rule set.
type fixedSource struct{ set *rules.Set }

func (f fixedSource) Current() *rules.Set { return f.set }

// side is one rule set with its own store and service.
type side struct {
	set   *rules.Set
	clock clock
	svc   *envoy.Service
	store *recorder
	stats *SetStats
	rules map[*rules.Rule]*ruleTally
	seen  []seenRule // the rules the request being decided met
}

// ruleTally is where a rule's requests are counted: its own counts in one
// set, and the changes of the rule of the same path in both.
type ruleTally struct {
	count *RuleCount
	diff  *RuleDiff
}

// recorder is the store of a side: limit.Memory, remembering the hits of
// the last call (overOf).
type recorder struct {
	limit.Limiter
	last []hitSeen
}

type hitSeen struct {
	key     string
	allowed bool
	mode    limit.Mode
}

func (r *recorder) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	blocked, err = r.Limiter.Evaluate(ctx, hits, decisions)
	r.last = r.last[:0]
	if err == nil {
		for i := range hits {
			r.last = append(r.last, hitSeen{hits[i].Key, decisions[i].Allowed, hits[i].Mode})
		}
	}
	return blocked, err
}

// overOf reads the hits of a descriptor that met rule r (nil for none) in
// the last call and reports whether one was denied. Hits come in
// descriptor order: those from *next on are this descriptor's and later
// ones'; *next moves past this one's. A descriptor with a limit override
// has exactly one hit.
func (r *recorder) overOf(rule *rules.Rule, override bool, next *int) bool {
	over := false
	for ; *next < len(r.last); *next++ {
		h := &r.last[*next]
		if !override && (rule == nil || !ofRule(h.key, rule)) {
			break
		}
		over = over || !h.allowed
		if override {
			*next++
			break
		}
	}
	return over
}

// ofRule reports whether key is the counter of one of r's limits: 'r'
// then the limit's ID (see package rules' counter keys).
func ofRule(key string, r *rules.Rule) bool {
	if len(key) == 0 || key[0] != 'r' {
		return false
	}
	for _, l := range r.Limits {
		if l.ID != "" && strings.HasPrefix(key[1:], l.ID) {
			return true
		}
	}
	return false
}

// newSide returns the side of set, whose rules count their changes in
// diffs (by domain and path, filled in here for the rules diffs lacks).
func newSide(set *rules.Set, name string, diffs map[ruleKey]*RuleDiff, isNew bool) (*side, error) {
	s := &side{set: set, stats: &SetStats{Name: name}, rules: map[*rules.Rule]*ruleTally{}}
	// Big enough never to refuse a counter: a replay judges the rules,
	// not the production store's size.
	s.store = &recorder{Limiter: limit.NewMemory(limit.MemoryOptions{Now: s.clock.Now, MaxEntries: math.MaxInt32})}
	svc, err := envoy.New(fixedSource{set}.Current, s.store, envoy.Options{Now: s.clock.Now})
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
	s.clock.t = t
	s.store.last = s.store.last[:0]
	s.seen = s.seen[:0]
	resp, err := s.svc.ShouldRateLimit(ctx, req)
	if err != nil {
		s.stats.Invalid++
		return outcome{code: invalid, errText: status.Convert(err).Message()}
	}
	var o outcome
	next := 0
	for i, st := range resp.GetStatuses() {
		if i >= len(req.Descriptors) {
			break
		}
		r := s.set.Match(req.Domain, entriesOf(req.Descriptors[i].GetEntries()))
		over := st.GetCode() == pb.RateLimitResponse_OVER_LIMIT
		// The answer says OK for a rule in shadow mode; its hits say
		// whether it was over.
		if s.store.overOf(r, req.Descriptors[i].GetLimit() != nil, &next) && r != nil && r.ShadowMode {
			over = true
		}
		if r == nil {
			continue
		}
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
		sr.t.count.add(o.code == denied, sr.over, sr.t.count.Shadow)
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

// counter is one descriptor value's traffic: its busiest second and
// minute, and its requests denied under each set.
type counter struct {
	c                    *CounterPeak
	sec, min             int64 // the current second and minute (Unix)
	inSec, inMin         int64
	oldDenied, newDenied int64
}

func (p *counter) add(t time.Time, a, b decision) {
	p.c.Requests++
	if a == denied {
		p.oldDenied++
	}
	if b == denied {
		p.newDenied++
	}
	if s := t.Unix(); s != p.sec {
		p.sec, p.inSec = s, 0
	}
	p.inSec++
	if p.inSec > p.c.PeakPerSecond {
		p.c.PeakPerSecond, p.c.PeakSecond = p.inSec, time.Unix(p.sec, 0).UTC()
	}
	if m := floorDiv(t.Unix(), 60); m != p.min {
		p.min, p.inMin = m, 0
	}
	p.inMin++
	p.c.PeakPerMinute = max(p.c.PeakPerMinute, p.inMin)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// Run replays traffic through old and new, each on its own in-memory store
// behind its own envoy.Service, whose clock is set to each request's time.
// Traffic hands requests in time order, or fails: a replay never decides a
// request at a time other than its own. Run stops at the end of the
// traffic, at its first error (naming the input and line) or when ctx
// ends.
func Run(ctx context.Context, old, new *rules.Set, traffic *Traffic, opts Options) (*Report, error) {
	if old == nil || new == nil || traffic == nil {
		return nil, errors.New("replay: nil rule set or traffic")
	}
	rp, err := newReplayer(old, new, opts)
	if err != nil {
		return nil, err
	}
	callCtx := context.Background()
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	batches, errc := readAhead(readCtx, traffic)
	for batch := range batches {
		for _, r := range batch {
			if err := rp.request(callCtx, r); err != nil {
				stop()
				for range batches {
				}
				return nil, err
			}
		}
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	rp.rep.Traffic = traffic.Stats()
	for _, in := range rp.rep.Traffic {
		rp.rep.Skipped += in.Skipped
		rp.rep.Truncated += in.Truncated
		rp.rep.Reordered += in.Reordered
	}
	rp.fill()
	return rp.rep, nil
}

// replayer is the state of one Run.
type replayer struct {
	a, b     *side
	opts     Options
	rep      *Report
	diffs    map[ruleKey]*RuleDiff
	domains  map[string]*DomainCount
	minutes  map[int64]*MinuteCount
	counters map[string]*counter
	seq      uint64 // the request being replayed, from 1
	key      []byte
}

func newReplayer(old, new *rules.Set, opts Options) (*replayer, error) {
	if opts.Examples == 0 {
		opts.Examples = DefaultExamples
	}
	opts.Examples = max(opts.Examples, 0)
	if opts.TopCounters == 0 {
		opts.TopCounters = DefaultTopCounters
	}
	if opts.Values == 0 {
		opts.Values = DefaultValues
	}
	opts.Values = max(opts.Values, 0)
	if opts.OldName == "" {
		opts.OldName = "old"
	}
	if opts.NewName == "" {
		opts.NewName = "new"
	}
	rp := &replayer{opts: opts, diffs: map[ruleKey]*RuleDiff{}, domains: map[string]*DomainCount{},
		minutes: map[int64]*MinuteCount{}, counters: map[string]*counter{}}
	var err error
	if rp.a, err = newSide(old, opts.OldName, rp.diffs, false); err != nil {
		return nil, err
	}
	if rp.b, err = newSide(new, opts.NewName, rp.diffs, true); err != nil {
		return nil, err
	}
	rp.rep = &Report{Old: rp.a.stats, New: rp.b.stats}
	return rp, nil
}

// request replays one request under both sets and counts what they
// decided.
func (rp *replayer) request(ctx context.Context, r Request) error {
	rep := rp.rep
	if r.Time.Before(rep.To) {
		// Traffic never hands one; deciding it would distort the report.
		return fmt.Errorf("replay: %w: a request at %s after one at %s", ErrOutOfOrder, r.Time.Format(TimeLayout), rep.To.Format(TimeLayout))
	}
	rp.seq++
	rep.Requests++
	if rep.Requests == 1 {
		rep.From = r.Time
	}
	rep.To = r.Time
	oa := rp.a.decide(ctx, r.Time, r.Req)
	ob := rp.b.decide(ctx, r.Time, r.Req)

	d := rp.domains[r.Req.Domain]
	if d == nil {
		d = &DomainCount{Domain: r.Req.Domain}
		rp.domains[r.Req.Domain] = d
	}
	d.Old.add(oa.code)
	d.New.add(ob.code)
	if oa.code == denied || ob.code == denied {
		m := floorDiv(r.Time.Unix(), 60)
		mc := rp.minutes[m]
		if mc == nil {
			mc = &MinuteCount{Minute: time.Unix(m*60, 0).UTC()}
			rp.minutes[m] = mc
		}
		if oa.code == denied {
			mc.OldDenied++
		}
		if ob.code == denied {
			mc.NewDenied++
		}
	}
	if oa.code != ob.code {
		rp.changed(r, oa, ob)
	}
	rp.count(r, oa.code, ob.code)
	return nil
}

// changed counts a request whose decision differs: on the report, and on
// the rules that made the difference. A request now denied counts on each
// rule that refused it under the new set (over its limit, enforced), a
// request now allowed on each that refused it under the old one. So taking
// a rule out of shadow mode shows on that rule alone, not on every rule
// the request met; and each request whose answer changed between allowed
// and denied shows on at least one rule.
func (rp *replayer) changed(r Request, oa, ob outcome) {
	rep := rp.rep
	rep.Changed.add(oa, ob)
	if len(rep.Changed.Examples) < rp.opts.Examples {
		rep.Changed.Examples = append(rep.Changed.Examples, Example{
			Time: r.Time, Domain: r.Req.Domain, Descriptors: describe(r.Req),
			Old: oa.code.String(), New: ob.code.String(),
			OldRule: oa.overBy, NewRule: ob.overBy, Error: oa.errText + ob.errText,
		})
	}
	switch {
	case oa.code == allowed && ob.code == denied:
		for _, sr := range rp.b.seen {
			if sr.over && !sr.t.count.Shadow {
				sr.t.diff.NowDenied++
			}
		}
	case oa.code == denied && ob.code == allowed:
		for _, sr := range rp.a.seen {
			if sr.over && !sr.t.count.Shadow {
				sr.t.diff.NowAllowed++
			}
		}
	}
}

// count adds a request to the counters of its descriptors.
func (rp *replayer) count(r Request, a, b decision) {
	for _, desc := range r.Req.Descriptors {
		rp.key = appendCounterKey(rp.key[:0], r.Req.Domain, desc.GetEntries())
		p := rp.counters[string(rp.key)]
		if p == nil {
			if len(rp.counters) >= maxCounters {
				rp.rep.UntrackedCounters++
				continue
			}
			entries := entriesOf(desc.GetEntries())
			p = &counter{c: &CounterPeak{Domain: r.Req.Domain, Descriptor: describeEntries(desc.GetEntries())}, sec: math.MinInt64, min: math.MinInt64}
			if rr := rp.a.set.Match(r.Req.Domain, entries); rr != nil {
				p.c.OldRule = rr.Path
			}
			if rr := rp.b.set.Match(r.Req.Domain, entries); rr != nil {
				p.c.NewRule = rr.Path
			}
			rp.counters[string(rp.key)] = p
		}
		p.add(r.Time, a, b)
	}
}

// appendCounterKey appends the key of a descriptor value in the counters
// map: the domain and each entry's key and value, each preceded by its
// length, so that no two descriptors share a key (joining them with a
// separator would let a value holding it pass for two entries).
func appendCounterKey(dst []byte, domain string, entries []*rlv3.RateLimitDescriptor_Entry) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(domain)))
	dst = append(dst, domain...)
	for _, e := range entries {
		dst = binary.AppendUvarint(dst, uint64(len(e.GetKey())))
		dst = append(dst, e.GetKey()...)
		dst = binary.AppendUvarint(dst, uint64(len(e.GetValue())))
		dst = append(dst, e.GetValue()...)
	}
	return dst
}

// readAhead parses traffic in a goroutine of its own, in batches, so that
// parsing and deciding use two cores. The error channel gets one value once
// batches is closed: nil at the end of the traffic, the traffic's error,
// or ctx's.
func readAhead(ctx context.Context, traffic *Traffic) (<-chan []Request, <-chan error) {
	const size = 512
	batches := make(chan []Request, 4)
	errc := make(chan error, 1)
	go func() {
		defer close(batches)
		batch := make([]Request, 0, size)
		for {
			r, err := traffic.Next()
			if err == nil {
				batch = append(batch, r)
				if len(batch) < size {
					continue
				}
			}
			if len(batch) > 0 {
				if ctx.Err() != nil {
					errc <- ctx.Err()
					return
				}
				select {
				case batches <- batch:
				case <-ctx.Done():
					errc <- ctx.Err()
					return
				}
				batch = make([]Request, 0, size)
			}
			if errors.Is(err, io.EOF) {
				errc <- nil
				return
			}
			if err != nil {
				errc <- fmt.Errorf("replay: traffic %w", err)
				return
			}
		}
	}()
	return batches, errc
}

// fill sorts what Run gathered into the report.
func (rp *replayer) fill() {
	rep := rp.rep
	for _, d := range rp.domains {
		rep.Domains = append(rep.Domains, *d)
	}
	sort.Slice(rep.Domains, func(i, j int) bool { return rep.Domains[i].Domain < rep.Domains[j].Domain })
	for _, d := range rp.diffs {
		rep.Rules = append(rep.Rules, *d)
	}
	sort.Slice(rep.Rules, func(i, j int) bool {
		x, y := &rep.Rules[i], &rep.Rules[j]
		if x.Domain != y.Domain {
			return x.Domain < y.Domain
		}
		return x.Rule < y.Rule
	})
	for _, m := range rp.minutes {
		rep.Minutes = append(rep.Minutes, *m)
	}
	sort.Slice(rep.Minutes, func(i, j int) bool { return rep.Minutes[i].Minute.Before(rep.Minutes[j].Minute) })
	rep.Counters = len(rp.counters)
	rep.Peaks, rep.Values, rep.ValuesDenied = topCounters(rp.counters, rp.opts.TopCounters, rp.opts.Values)
}

// topCounters returns the top counters by peak rate, the top values by
// change in denials, and the number of values with a denial.
func topCounters(counters map[string]*counter, top, values int) ([]CounterPeak, []ValueChange, int) {
	peaks := make([]CounterPeak, 0, len(counters))
	var vals []ValueChange
	for _, p := range counters {
		peaks = append(peaks, *p.c)
		if p.oldDenied+p.newDenied > 0 {
			vals = append(vals, ValueChange{Domain: p.c.Domain, Descriptor: p.c.Descriptor, Requests: p.c.Requests,
				OldDenied: p.oldDenied, NewDenied: p.newDenied, Change: p.newDenied - p.oldDenied, OldRule: p.c.OldRule, NewRule: p.c.NewRule})
		}
	}
	sort.Slice(peaks, func(i, j int) bool {
		x, y := &peaks[i], &peaks[j]
		if x.PeakPerSecond != y.PeakPerSecond {
			return x.PeakPerSecond > y.PeakPerSecond
		}
		if x.Requests != y.Requests {
			return x.Requests > y.Requests
		}
		return x.Domain+" "+x.Descriptor < y.Domain+" "+y.Descriptor
	})
	sort.Slice(vals, func(i, j int) bool {
		x, y := &vals[i], &vals[j]
		if ax, ay := abs(x.Change), abs(y.Change); ax != ay {
			return ax > ay
		}
		if x.NewDenied != y.NewDenied {
			return x.NewDenied > y.NewDenied
		}
		if x.Requests != y.Requests {
			return x.Requests > y.Requests
		}
		return x.Domain+" "+x.Descriptor < y.Domain+" "+y.Descriptor
	})
	n := len(vals)
	return peaks[:min(top, len(peaks))], vals[:min(values, len(vals))], n
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// describe renders a request's descriptors as "(k=v, k=v) (k=v)".
func describe(req *pb.RateLimitRequest) string {
	var b strings.Builder
	for i, d := range req.Descriptors {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('(')
		b.WriteString(describeEntries(d.GetEntries()))
		b.WriteByte(')')
	}
	return b.String()
}

// describeEntries renders a descriptor's entries as "k=v, k=v".
func describeEntries(es []*rlv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	for j, e := range es {
		if j > 0 {
			b.WriteString(", ")
		}
		b.WriteString(e.GetKey() + "=" + e.GetValue())
	}
	return b.String()
}
