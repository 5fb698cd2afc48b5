package replay

import (
	"context"
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
	rules map[*rules.Rule]*RuleCount
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

func newSide(set *rules.Set, name string) (*side, error) {
	s := &side{set: set, stats: &SetStats{Name: name}, rules: map[*rules.Rule]*RuleCount{}}
	// Big enough never to refuse a counter: a replay judges the rules,
	// not the production store's size.
	s.store = &recorder{Limiter: limit.NewMemory(limit.MemoryOptions{Now: s.clock.Now, MaxEntries: math.MaxInt32})}
	svc, err := envoy.New(fixedSource{set}, s.store, envoy.Options{
		Now: s.clock.Now,
		// The store is memory on a virtual clock: no deadline may cut it
		// (run passes a context whose deadline is farther than this).
		StoreTimeout: math.MaxInt64,
	})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	s.svc = svc
	for _, r := range set.Rules() {
		s.rules[r] = &RuleCount{Domain: r.Domain, Rule: r.Path, Shadow: r.ShadowMode, Pos: r.Pos.String()}
	}
	return s, nil
}

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

// decide runs one request through the side's service at time t.
func (s *side) decide(ctx context.Context, t time.Time, req *pb.RateLimitRequest) outcome {
	if t.After(s.clock.t) {
		s.clock.t = t
	}
	s.store.last = s.store.last[:0]
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
		if r != nil {
			rc := s.rules[r]
			if over {
				rc.Denied++
			} else {
				rc.Allowed++
			}
		}
		if over && o.overBy == "" && r != nil && !r.ShadowMode {
			o.overBy = r.Path
		}
	}
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		s.stats.Denied++
		o.code = denied
	} else {
		s.stats.Allowed++
	}
	return o
}

func entriesOf(es []*rlv3.RateLimitDescriptor_Entry) []rules.Entry {
	out := make([]rules.Entry, len(es))
	for i, e := range es {
		out[i] = rules.Entry{Key: e.GetKey(), Value: e.GetValue()}
	}
	return out
}

// counterPeak tracks one counter's busiest second and minute.
type counterPeak struct {
	c            *CounterPeak
	sec, min     int64 // the current second and minute (Unix)
	inSec, inMin int64
}

func (p *counterPeak) add(t time.Time) {
	p.c.Requests++
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
// behind its own envoy.Service, whose clock is set to each request's time
// (never back: a request older than one replayed before is decided at the
// later time, and counted in Report.OutOfOrder). It stops at the end of
// the traffic, at the first line the Reader refuses (an error naming it)
// or when ctx ends.
func Run(ctx context.Context, old, new *rules.Set, traffic *Reader, opts Options) (*Report, error) {
	if old == nil || new == nil || traffic == nil {
		return nil, errors.New("replay: nil rule set or traffic")
	}
	if opts.Examples == 0 {
		opts.Examples = DefaultExamples
	}
	opts.Examples = max(opts.Examples, 0)
	if opts.TopCounters == 0 {
		opts.TopCounters = DefaultTopCounters
	}
	if opts.OldName == "" {
		opts.OldName = "old"
	}
	if opts.NewName == "" {
		opts.NewName = "new"
	}
	a, err := newSide(old, opts.OldName)
	if err != nil {
		return nil, err
	}
	b, err := newSide(new, opts.NewName)
	if err != nil {
		return nil, err
	}
	// A deadline the service never shortens (see newSide), set once.
	callCtx, cancel := context.WithDeadline(context.Background(), time.Now().Add(100*365*24*time.Hour))
	defer cancel()

	rep := &Report{Old: a.stats, New: b.stats}
	domains := map[string]*DomainCount{}
	minutes := map[int64]*MinuteCount{}
	counters := map[string]*counterPeak{}
	var last time.Time
	var key strings.Builder
	batches, errc := readAhead(ctx, traffic)
	for batch := range batches {
		for _, r := range batch {
			rep.Requests++
			if rep.From.IsZero() || r.Time.Before(rep.From) {
				rep.From = r.Time
			}
			if r.Time.Before(last) {
				rep.OutOfOrder++
			} else {
				last = r.Time
			}
			oa := a.decide(callCtx, r.Time, r.Req)
			ob := b.decide(callCtx, r.Time, r.Req)

			d := domains[r.Req.Domain]
			if d == nil {
				d = &DomainCount{Domain: r.Req.Domain}
				domains[r.Req.Domain] = d
			}
			d.Old.add(oa.code)
			d.New.add(ob.code)
			if oa.code == denied || ob.code == denied {
				m := floorDiv(r.Time.Unix(), 60)
				mc := minutes[m]
				if mc == nil {
					mc = &MinuteCount{Minute: time.Unix(m*60, 0).UTC()}
					minutes[m] = mc
				}
				if oa.code == denied {
					mc.OldDenied++
				}
				if ob.code == denied {
					mc.NewDenied++
				}
			}
			if oa.code != ob.code {
				rep.Changed.add(oa, ob)
				if len(rep.Changed.Examples) < opts.Examples {
					rep.Changed.Examples = append(rep.Changed.Examples, Example{
						Time: r.Time, Domain: r.Req.Domain, Descriptors: describe(r.Req),
						Old: oa.code.String(), New: ob.code.String(),
						OldRule: oa.overBy, NewRule: ob.overBy, Error: oa.errText + ob.errText,
					})
				}
			}
			for _, desc := range r.Req.Descriptors {
				key.Reset()
				key.WriteString(r.Req.Domain)
				for _, e := range desc.GetEntries() {
					key.WriteString(" ")
					key.WriteString(e.GetKey())
					key.WriteString("=")
					key.WriteString(e.GetValue())
				}
				p := counters[key.String()]
				if p == nil {
					if len(counters) >= maxCounters {
						rep.UntrackedCounters++
						continue
					}
					entries := entriesOf(desc.GetEntries())
					p = &counterPeak{c: &CounterPeak{Domain: r.Req.Domain, Descriptor: key.String()[len(r.Req.Domain)+1:]}, sec: math.MinInt64, min: math.MinInt64}
					if rr := old.Match(r.Req.Domain, entries); rr != nil {
						p.c.OldRule = rr.Path
					}
					if rr := new.Match(r.Req.Domain, entries); rr != nil {
						p.c.NewRule = rr.Path
					}
					counters[key.String()] = p
				}
				p.add(r.Time)
			}
		}
	}
	if err := <-errc; err != nil {
		return nil, err
	}
	rep.To = last
	rep.Skipped = traffic.Skipped()
	rep.Truncated = traffic.Truncated()
	rep.fill(a, b, domains, minutes, counters, opts.TopCounters)
	return rep, nil
}

// readAhead parses traffic in a goroutine of its own, in batches, so that
// parsing and deciding use two cores. The error channel gets one value once
// batches is closed: nil at the end of the traffic, the Reader's error, or
// ctx's.
func readAhead(ctx context.Context, traffic *Reader) (<-chan []Request, <-chan error) {
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
func (rep *Report) fill(a, b *side, domains map[string]*DomainCount, minutes map[int64]*MinuteCount, counters map[string]*counterPeak, top int) {
	for _, d := range domains {
		rep.Domains = append(rep.Domains, *d)
	}
	sort.Slice(rep.Domains, func(i, j int) bool { return rep.Domains[i].Domain < rep.Domains[j].Domain })
	byPath := map[string]*RuleDiff{}
	var order []string
	for i, s := range []*side{a, b} {
		for _, r := range s.set.Rules() {
			rc := s.rules[r]
			k := r.Domain + "\x00" + r.Path
			rd := byPath[k]
			if rd == nil {
				rd = &RuleDiff{Domain: r.Domain, Rule: r.Path}
				byPath[k] = rd
				order = append(order, k)
			}
			c := *rc
			if i == 0 {
				rd.Old = &c
			} else {
				rd.New = &c
			}
		}
	}
	sort.Strings(order)
	for _, k := range order {
		rep.Rules = append(rep.Rules, *byPath[k])
	}
	for _, m := range minutes {
		rep.Minutes = append(rep.Minutes, *m)
	}
	sort.Slice(rep.Minutes, func(i, j int) bool { return rep.Minutes[i].Minute.Before(rep.Minutes[j].Minute) })
	for _, p := range counters {
		rep.Counters++
		rep.Peaks = append(rep.Peaks, *p.c)
	}
	sort.Slice(rep.Peaks, func(i, j int) bool {
		x, y := &rep.Peaks[i], &rep.Peaks[j]
		if x.PeakPerSecond != y.PeakPerSecond {
			return x.PeakPerSecond > y.PeakPerSecond
		}
		if x.Requests != y.Requests {
			return x.Requests > y.Requests
		}
		return x.Domain+" "+x.Descriptor < y.Domain+" "+y.Descriptor
	})
	if len(rep.Peaks) > top {
		rep.Peaks = rep.Peaks[:top]
	}
}

// describe renders a request's descriptors as "(k=v, k=v) (k=v)".
func describe(req *pb.RateLimitRequest) string {
	var b strings.Builder
	for i, d := range req.Descriptors {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteByte('(')
		for j, e := range d.GetEntries() {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(e.GetKey() + "=" + e.GetValue())
		}
		b.WriteByte(')')
	}
	return b.String()
}
