package rlqs

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// The store's part: what the fleet admitted and asked for, per limit.
//
// Each round charges a bucket's allowed requests to the counters of its
// limits, the ones RLS decides with, and adds its demand (allowed +
// denied) to the demand counter of its first limit for the current slot
// (a report interval of floodgate's clock, numbered from the epoch:
// resolver.demandKey plus the slot), which every instance adds to; it
// reads the counter of the slot before. Every stream reports once per
// interval, so a slot that has ended holds one report of each stream:
// the fleet's demand over one interval, whatever the phase of each
// stream's reports (bucket.demand). All of it goes through limit.Limiter,
// hence through the store's key encoding, time to live, at-most-once
// calls and Redis Cluster's per-slot split.
//
// Every hit is Advisory: a counter that cannot take a bucket's whole
// usage (Envoy admitted more than was left, which its local enforcement
// allows between two reports) writes nothing and blocks no other hit; it
// is then charged what it has left, so that it reads spent, which is
// what happened.

// demandCapacity is the demand counters' limit: never reached (a trillion
// requests per demand window), exact in the Lua scripts' doubles, so
// that capacity − remaining is the count.
const demandCapacity = 1 << 40

// chunkHits bounds the hits of one store call: a Redis script call holds
// Redis for its whole length, and a flush may carry thousands of
// buckets.
const chunkHits = 128

// demandSlots is how many report intervals a demand slot's counter
// spans: its sliding window holds every write of its slot, made within
// one interval of floodgate's clock and at most an interval off on the
// store's, until the slot after next reads it.
const demandSlots = 4

// demandSpec is the spec of the demand slots' counters: a sliding window
// of demandSlots report intervals, in sub-windows of one interval.
func demandSpec(reportInterval time.Duration) limit.Spec {
	return limit.Spec{Algorithm: limit.SlidingWindow, Limit: demandCapacity, Window: demandSlots * reportInterval, Precision: demandSlots}
}

// slotOf returns the number of the demand slot holding t.
func slotOf(t time.Time, reportInterval time.Duration) int64 {
	return t.UnixNano() / int64(reportInterval)
}

// slotKey returns the key of the counter of slot for demandKey.
func slotKey(demandKey string, slot int64) string {
	return demandKey + ":" + strconv.FormatInt(slot, 10)
}

// ledger charges buckets to the store for one stream, through the
// Service's coalescer.
type ledger struct {
	store  *coalescer
	demand limit.Spec
	// interval is the report interval: the length of a demand slot.
	interval time.Duration
	// bufs holds the Service's charge buffers, shared by its streams so
	// that their memory follows the rounds running, not the streams
	// times their buckets.
	bufs *sync.Pool
}

// chargeBuf is one round's hits and what became of them.
type chargeBuf struct {
	hits   []limit.Hit
	decs   []limit.Decision
	failed []bool
	owners []owner
}

// newChargeBufs returns the pool of a Service's charge buffers.
func newChargeBufs() *sync.Pool {
	return &sync.Pool{New: func() any { return &chargeBuf{} }}
}

// owner is where a hit's decision goes: bucket b's counter c, or its
// demand in the current slot (ownerDemand) or the slot before
// (ownerDemandBefore).
type owner struct{ b, c int }

// Owners of a bucket's demand hits.
const (
	ownerDemand       = -1
	ownerDemandBefore = -2
)

// charge charges each bucket of bs (all with counters) and reads its
// counters and the fleet's demand. A bucket whose counters' store call
// failed is marked failed and keeps its usage for the next round; one
// whose demand alone failed keeps the fleet's demand it had. The first
// error is returned, with the number of buckets it left failed.
//
// A bucket of several limits whose store calls went apart may have
// some of its counters charged and others failed: all are charged again
// at the next round, the charged ones twice (never less than Envoy
// admitted).
func (l *ledger) charge(ctx context.Context, now time.Time, bs []*bucket) (failed int, err error) {
	cb := l.bufs.Get().(*chargeBuf)
	defer l.bufs.Put(cb)
	defer clear(cb.hits) // their keys belong to the buckets
	l.hitsOf(cb, now, bs)
	cb.decs = resize(cb.decs, len(cb.hits))
	cb.failed = resize(cb.failed, len(cb.hits))
	err = l.store.charge(ctx, cb.hits, cb.decs, cb.failed)
	for _, b := range bs {
		b.failed = false
	}
	for k, o := range cb.owners {
		if cb.failed[k] {
			if o.c >= 0 {
				bs[o.b].failed = true
			}
			continue
		}
		l.take(bs[o.b], o, cb.decs[k], now)
	}
	for _, b := range bs {
		if b.failed {
			failed++
			continue
		}
		b.pending = 0
		if b.reported {
			// Envoy's usage is charged up to its report, not up to a
			// round the timer ran.
			b.since = now
		}
	}
	return failed, err
}

// hitsOf fills cb with the hits of bs: each counter's, then the demand
// of the current slot and a look at the slot before's.
func (l *ledger) hitsOf(cb *chargeBuf, now time.Time, bs []*bucket) {
	cb.hits, cb.owners = cb.hits[:0], cb.owners[:0]
	slot := slotOf(now, l.interval)
	for i, b := range bs {
		for j := range b.counters {
			c := &b.counters[j]
			cost := inWindow(c, b.pending, b.since, now)
			cb.hits = append(cb.hits, limit.Hit{Key: c.key.Value(), Spec: c.spec, Cost: cost, Mode: limit.Advisory})
			cb.owners = append(cb.owners, owner{i, j})
		}
		cb.hits = append(cb.hits,
			limit.Hit{Key: slotKey(b.demandKey.Value(), slot), Spec: l.demand, Cost: b.fresh, Mode: limit.Advisory},
			limit.Hit{Key: slotKey(b.demandKey.Value(), slot-1), Spec: l.demand, Mode: limit.Advisory})
		cb.owners = append(cb.owners, owner{i, ownerDemand}, owner{i, ownerDemandBefore})
	}
}

// take sets what a hit's decision says on its bucket.
func (l *ledger) take(b *bucket, o owner, d limit.Decision, now time.Time) {
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

// inWindow returns the part of usage, admitted since since and taken as
// spread evenly until now, that falls in c's current window: a report
// that straddles the start of a fixed window charges it only what came
// after, the rest belonging to a window that is over. Without it, each
// window would start charged with the end of the one before, and its
// pace would be too slow. Other algorithms take all of it.
func inWindow(c *counter, usage int64, since, now time.Time) int64 {
	if c.spec.Algorithm != limit.FixedWindow || since.IsZero() || usage == 0 || !now.After(since) {
		return usage
	}
	var start time.Time
	switch {
	case c.spec.Calendar.IsZero():
		// Fixed windows start at multiples of their length since the
		// epoch, on the store's clock, which this one follows closely.
		w := c.spec.WindowMicros()
		start = time.UnixMicro(now.UnixMicro() / w * w)
	case !c.end.IsZero() && !c.end.After(now):
		// A calendar window: the one the last round saw has ended.
		start = c.end
	}
	if !start.After(since) {
		return usage
	}
	return int64(math.Round(float64(usage) * float64(now.Sub(start)) / float64(now.Sub(since))))
}

// resize returns s with length n, reusing its array when it can.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
