package replay

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/capture"
	"github.com/floodgate/floodgate/pkg/rules"
)

// The defaults of Options' fields.
const (
	defaultExamples    = 5
	defaultTopCounters = 20
	defaultValues      = 20
)

// maxCounters bounds the counters whose peak rate is tracked, so that
// endless distinct values (client IPs) do not hold memory without bound.
const maxCounters = 1 << 20

// Options tune Run.
type Options struct {
	// Examples is the number of changed requests kept as examples, the
	// first ones in traffic order; 0 keeps 5, negative none.
	Examples int
	// TopCounters is the number of counters listed by peak rate (0: 20).
	TopCounters int
	// Values is the number of descriptor values listed by the change in
	// their denials (Report.Values); 0 lists 20, negative none.
	Values int
	// OldName and NewName label the rule sets in the report; empty means
	// "old" and "new".
	OldName, NewName string
}

// counter is one descriptor value's traffic: its busiest second and
// minute, and its requests denied under each set.
type counter struct {
	CounterPeak
	sec, min             int64 // the current second and minute (Unix)
	inSec, inMin         int64
	oldDenied, newDenied int64
}

func (p *counter) add(t time.Time, a, b decision) {
	p.Requests++
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
	if p.inSec > p.PeakPerSecond {
		p.PeakPerSecond, p.PeakSecond = p.inSec, time.Unix(p.sec, 0).UTC()
	}
	if m := unixMinute(t); m != p.min {
		p.min, p.inMin = m, 0
	}
	p.inMin++
	p.PeakPerMinute = max(p.PeakPerMinute, p.inMin)
}

// Run replays traffic through old and new, each on its own in-memory store
// behind its own envoy.Service, whose clock is set to each request's time.
// It stops at the end of the traffic, at its first error (naming the input
// and line) or when ctx ends.
func Run(ctx context.Context, old, new *rules.Set, traffic *Traffic, opts Options) (*Report, error) {
	rp, err := newReplayer(old, new, opts)
	if err != nil {
		return nil, err
	}
	callCtx := context.Background()
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	batches, errc := readAhead(readCtx, traffic)
	for {
		var batch []Request
		var more bool
		select {
		case batch, more = <-batches:
		case <-ctx.Done():
			// The reader may wait on input that only its end releases
			// (stdin held open): it is left to the process's exit.
			return nil, ctx.Err()
		}
		if !more {
			break
		}
		for _, r := range batch {
			if err := rp.request(callCtx, r); err != nil {
				return nil, err // the deferred stop ends the reader
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
	counters map[string]*counter
	key      []byte
}

func newReplayer(old, new *rules.Set, opts Options) (*replayer, error) {
	opts.Examples = max(cmp.Or(opts.Examples, defaultExamples), 0)
	opts.TopCounters = cmp.Or(opts.TopCounters, defaultTopCounters)
	opts.Values = max(cmp.Or(opts.Values, defaultValues), 0)
	opts.OldName = cmp.Or(opts.OldName, "old")
	opts.NewName = cmp.Or(opts.NewName, "new")
	rp := &replayer{opts: opts, diffs: map[ruleKey]*RuleDiff{}, domains: map[string]*DomainCount{},
		counters: map[string]*counter{}}
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
		return fmt.Errorf("replay: %w: a request at %s after one at %s", ErrOutOfOrder, r.Time.Format(capture.TimeLayout), rep.To.Format(capture.TimeLayout))
	}
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
		// Requests come in time order: a minute is the last one or new.
		m := r.Time.Truncate(time.Minute).UTC()
		if n := len(rep.Minutes); n == 0 || !rep.Minutes[n-1].Minute.Equal(m) {
			rep.Minutes = append(rep.Minutes, MinuteCount{Minute: m})
		}
		mc := &rep.Minutes[len(rep.Minutes)-1]
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
// the rules that refused it under the set that denied it (see RuleDiff),
// so that taking a rule out of shadow mode shows on that rule alone.
func (rp *replayer) changed(r Request, oa, ob outcome) {
	c := &rp.rep.Changed
	c.Total++
	if len(c.Examples) < rp.opts.Examples {
		c.Examples = append(c.Examples, Example{
			Time: r.Time, Domain: r.Req.Domain, Descriptors: describe(r.Req),
			Old: oa.code.String(), New: ob.code.String(),
			OldRule: oa.overBy, NewRule: ob.overBy, Error: oa.errText + ob.errText,
		})
	}
	switch {
	case oa.code == allowed && ob.code == denied:
		c.NowDenied++
		for _, sr := range rp.b.seen {
			if sr.over && !sr.t.count.Shadow {
				sr.t.diff.NowDenied++
			}
		}
	case oa.code == denied && ob.code == allowed:
		c.NowAllowed++
		for _, sr := range rp.a.seen {
			if sr.over && !sr.t.count.Shadow {
				sr.t.diff.NowAllowed++
			}
		}
	default:
		c.Other++
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
			p = &counter{CounterPeak: CounterPeak{Domain: r.Req.Domain, Descriptor: describeEntries(desc.GetEntries())}}
			if rr := rp.a.set.Match(r.Req.Domain, entries); rr != nil {
				p.OldRule = rr.Path
			}
			if rr := rp.b.set.Match(r.Req.Domain, entries); rr != nil {
				p.NewRule = rr.Path
			}
			rp.counters[string(rp.key)] = p
		}
		p.add(r.Time, a, b)
	}
}

// appendCounterKey appends the key of a descriptor value in the counters
// map: the domain and each entry's key and value, each preceded by its
// length, so that no value can pass for two entries.
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

// readAhead parses traffic in batches on a goroutine of its own, so that
// parsing and deciding use two cores. The error channel gets one value
// once batches is closed: nil at the end, or the traffic's or ctx's error.
func readAhead(ctx context.Context, traffic *Traffic) (<-chan []Request, <-chan error) {
	const size = 512
	batches := make(chan []Request, 4)
	errc := make(chan error, 1)
	go func() {
		defer close(batches)
		var err error
		for err == nil {
			batch := make([]Request, 0, size)
			for err == nil && len(batch) < size {
				var r Request
				if r, err = traffic.Next(); err == nil {
					batch = append(batch, r)
				}
			}
			if len(batch) == 0 {
				break
			}
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
		}
		if errors.Is(err, io.EOF) {
			errc <- nil
		} else {
			errc <- fmt.Errorf("replay: traffic %w", err)
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
	slices.SortFunc(rep.Domains, func(x, y DomainCount) int { return cmp.Compare(x.Domain, y.Domain) })
	for _, d := range rp.diffs {
		rep.Rules = append(rep.Rules, *d)
	}
	slices.SortFunc(rep.Rules, func(x, y RuleDiff) int {
		return cmp.Or(cmp.Compare(x.Domain, y.Domain), cmp.Compare(x.Rule, y.Rule))
	})
	rep.Counters = len(rp.counters)
	rep.Peaks, rep.Values, rep.ValuesDenied = topCounters(rp.counters, rp.opts.TopCounters, rp.opts.Values)
}

// topCounters returns the top counters by peak rate, the top values by
// change in denials, and the number of values with a denial.
func topCounters(counters map[string]*counter, top, values int) ([]CounterPeak, []ValueChange, int) {
	peaks := make([]CounterPeak, 0, len(counters))
	var vals []ValueChange
	for _, p := range counters {
		peaks = append(peaks, p.CounterPeak)
		if p.oldDenied+p.newDenied > 0 {
			vals = append(vals, ValueChange{Domain: p.Domain, Descriptor: p.Descriptor, Requests: p.Requests,
				OldDenied: p.oldDenied, NewDenied: p.newDenied, Change: p.newDenied - p.oldDenied, OldRule: p.OldRule, NewRule: p.NewRule})
		}
	}
	// Most first; ties by name, so that the report is the same every run.
	slices.SortFunc(peaks, func(x, y CounterPeak) int {
		return cmp.Or(cmp.Compare(y.PeakPerSecond, x.PeakPerSecond), cmp.Compare(y.Requests, x.Requests),
			cmp.Compare(x.Domain+" "+x.Descriptor, y.Domain+" "+y.Descriptor))
	})
	slices.SortFunc(vals, func(x, y ValueChange) int {
		return cmp.Or(cmp.Compare(abs(y.Change), abs(x.Change)), cmp.Compare(y.NewDenied, x.NewDenied),
			cmp.Compare(y.Requests, x.Requests), cmp.Compare(x.Domain+" "+x.Descriptor, y.Domain+" "+y.Descriptor))
	})
	n := len(vals)
	return peaks[:min(top, len(peaks))], vals[:min(values, len(vals))], n
}

// unixMinute is t's minute since the Unix epoch, rounded down (also
// before 1970).
func unixMinute(t time.Time) int64 { return t.Truncate(time.Minute).Unix() / 60 }

func abs(n int64) int64 { return max(n, -n) }

// describe renders a request's descriptors as "(k=v, k=v) (k=v)".
func describe(req *pb.RateLimitRequest) string {
	parts := make([]string, len(req.Descriptors))
	for i, d := range req.Descriptors {
		parts[i] = "(" + describeEntries(d.GetEntries()) + ")"
	}
	return strings.Join(parts, " ")
}

// describeEntries renders a descriptor's entries as "k=v, k=v".
func describeEntries(es []*rlv3.RateLimitDescriptor_Entry) string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.GetKey() + "=" + e.GetValue()
	}
	return strings.Join(parts, ", ")
}
