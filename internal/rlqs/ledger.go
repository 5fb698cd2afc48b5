package rlqs

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// What the fleet admitted and asked for lives in the store. A round
// charges each bucket's allowed requests to its limits' counters, the ones
// RLS decides with, and adds its demand (allowed + denied) to its first
// limit's demand counter for the current slot, a report interval numbered
// from the epoch, which every instance adds to; it reads the slot
// before's too, which holds the fleet's demand over one interval.

// demandCapacity is the demand counters' limit: never reached, and exact
// in the Lua scripts' doubles, so that capacity − remaining is the count.
const demandCapacity = 1 << 40

// chunkHits bounds the hits of one store call: a Redis script holds Redis
// for its whole length.
const chunkHits = 128

// demandSlots is how many report intervals a demand counter's window
// spans: it keeps its slot's writes, at most an interval off on the
// store's clock, until the slot after next reads them.
const demandSlots = 4

// DemandSpec is the spec of the counters of the fleet's demand that a
// Service with opts keeps beside the rules' own, which the store must
// support: a sliding window of demandSlots report intervals, in
// sub-windows of one interval.
func DemandSpec(opts Options) limit.Spec {
	window := demandSlots * opts.withDefaults().ReportInterval
	return limit.Spec{Algorithm: limit.SlidingWindow, Limit: demandCapacity, Window: window, Precision: demandSlots}
}

func slotOf(t time.Time, reportInterval time.Duration) int64 {
	return t.UnixNano() / int64(reportInterval)
}

func slotKey(demandKey string, slot int64) string {
	return demandKey + ":" + strconv.FormatInt(slot, 10)
}

// owner is where a hit's decision goes: bucket b's counter c, or its
// demand in the current slot or the one before.
type owner struct{ b, c int }

const (
	ownerDemand       = -1
	ownerDemandBefore = -2
)

// charge charges each bucket of a stream's bs (all with counters) and
// reads its counters and the fleet's demand; it returns the first error
// and how many buckets failed. A bucket whose counters' call failed keeps
// its usage for the next round, which charges all its counters again
// (never less than Envoy admitted). One whose demand alone failed keeps
// the demand it had.
func (s *Service) charge(ctx context.Context, now time.Time, bs []*bucket) (failed int, err error) {
	ch := s.bufs.Get().(*charge)
	defer s.bufs.Put(ch)
	defer clear(ch.hits) // their keys belong to the buckets
	s.hitsOf(ch, now, bs)
	ch.decs = resize(ch.decs, len(ch.hits))
	ch.failed = resize(ch.failed, len(ch.hits))
	err = s.store.charge(ctx, ch)
	for _, b := range bs {
		b.failed = false
	}
	for k, o := range ch.owners {
		if ch.failed[k] {
			if o.c >= 0 {
				bs[o.b].failed = true
			}
			continue
		}
		take(bs[o.b], o, ch.decs[k], now)
	}
	for _, b := range bs {
		if b.failed {
			failed++
		} else {
			b.settle(now)
		}
	}
	return failed, err
}

// hitsOf fills ch with the hits of bs: each counter's, then the demand of
// the current slot and a look at the slot before's.
func (s *Service) hitsOf(ch *charge, now time.Time, bs []*bucket) {
	ch.hits, ch.owners = ch.hits[:0], ch.owners[:0]
	slot := slotOf(now, s.opts.ReportInterval)
	for i, b := range bs {
		for j := range b.counters {
			c := &b.counters[j]
			cost := inWindow(c, b.pending, b.since, now)
			ch.hits = append(ch.hits, limit.Hit{Key: c.key.Value(), Spec: c.spec, Cost: cost, Mode: limit.Advisory})
			ch.owners = append(ch.owners, owner{i, j})
		}
		ch.hits = append(ch.hits,
			limit.Hit{Key: slotKey(b.demandKey.Value(), slot), Spec: s.demand, Cost: b.fresh, Mode: limit.Advisory},
			limit.Hit{Key: slotKey(b.demandKey.Value(), slot-1), Spec: s.demand, Mode: limit.Advisory})
		ch.owners = append(ch.owners, owner{i, ownerDemand}, owner{i, ownerDemandBefore})
	}
}

func take(b *bucket, o owner, d limit.Decision, now time.Time) {
	switch o.c {
	case ownerDemand:
		b.fleet = demandCapacity - d.Remaining
	case ownerDemandBefore:
		b.fleetBefore = demandCapacity - d.Remaining
	default:
		c := &b.counters[o.c]
		c.dec, c.end = d, now.Add(d.ResetAfter)
	}
}

// inWindow returns the part of usage, admitted evenly from since to now,
// that falls in c's current fixed window: the rest belongs to one that is
// over. Other algorithms take all of it.
func inWindow(c *counter, usage int64, since, now time.Time) int64 {
	if c.spec.Algorithm != limit.FixedWindow || since.IsZero() || usage == 0 || !now.After(since) {
		return usage
	}
	var start time.Time
	switch {
	case c.spec.Calendar == nil:
		start, _ = c.spec.WindowAt(now)
	case !c.end.IsZero() && !c.end.After(now):
		// A calendar window: the one the last round saw has ended.
		start = c.end
	}
	if !start.After(since) {
		return usage
	}
	return int64(math.Round(float64(usage) * float64(now.Sub(start)) / float64(now.Sub(since))))
}

func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
