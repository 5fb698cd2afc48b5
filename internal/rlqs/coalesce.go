package rlqs

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// coalescer merges the store calls of a Service's streams, whose Envoys
// report the same buckets: the hits that wait together go as one flush,
// each counter once with the sum of their costs, and every hit gets its
// counter's decision. A flush starts as soon as the last one has ended, at
// most once every Options.ChargeInterval.
//
// Every hit is Advisory: a merged hit the counter cannot take whole writes
// nothing, and is then charged what the counter has left (clipRefused), so
// that it reads spent, as its hits one by one would have left it. It is
// safe for concurrent use.
type coalescer struct {
	limiter limit.Limiter
	every   time.Duration

	mu       sync.Mutex
	queue    []*charge
	flushing bool
	last     time.Time // when the last flush started

	// The flusher's buffers, reused until the queue empties.
	flushBufs
}

type flushBufs struct {
	index map[hitKey]int
	// The merged hits, then the clipped ones (clipRefused), with their
	// decisions and errors.
	hits   []limit.Hit
	decs   []limit.Decision
	errs   []error
	clipAt []int
	shards map[string][]int
	call   []limit.Hit
	cdec   []limit.Decision
}

// sharder is a Limiter whose counters live apart, on the masters of a
// Redis Cluster: a flush sends one call per shard, so that a master that
// fails fails its own counters only.
type sharder interface {
	Shard(ctx context.Context, counter string) string
}

// hitKey is what hits merge on: one counter, read with one spec.
type hitKey struct {
	key  string
	spec limit.Spec
}

// charge is one round's call: its hits, where their decisions and
// failures go, and at, the merged hit of each; owners says whose each hit
// is (ledger.go).
type charge struct {
	hits   []limit.Hit
	decs   []limit.Decision
	failed []bool
	owners []owner
	at     []int
	err    error
	done   chan struct{}
}

// charge charges ch's hits with those of the other rounds that wait
// meanwhile, fills its decs with their counters' decisions and failed with
// whether each hit's store call failed, and returns the first error. Once
// queued, the hits are charged whatever ctx says: the flush serves other
// streams too.
func (c *coalescer) charge(ctx context.Context, ch *charge) error {
	if err := ctx.Err(); err != nil {
		for i := range ch.failed {
			ch.failed[i] = true
		}
		return err
	}
	ch.err, ch.done = nil, make(chan struct{})
	c.mu.Lock()
	c.queue = append(c.queue, ch)
	start := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if start {
		go c.flushLoop(context.WithoutCancel(ctx))
	}
	<-ch.done
	return ch.err
}

func (c *coalescer) flushLoop(ctx context.Context) {
	for {
		time.Sleep(c.every - time.Since(c.last)) // at once when the interval has passed
		c.mu.Lock()
		batch := c.queue
		c.queue = nil
		if len(batch) == 0 {
			c.flushing = false
			c.flushBufs = flushBufs{}
			c.mu.Unlock()
			return
		}
		c.last = time.Now()
		c.mu.Unlock()
		c.flush(ctx, batch)
	}
}

// flush sends the batch's hits, merged, and hands each its decision.
func (c *coalescer) flush(ctx context.Context, batch []*charge) {
	c.merge(batch)
	c.decs = resize(c.decs, len(c.hits))
	c.errs = resize(c.errs, len(c.hits))
	c.evaluate(ctx, c.hits, c.decs, c.errs)
	c.clipRefused(ctx)
	for _, ch := range batch {
		for j, i := range ch.at {
			ch.decs[j], ch.failed[j] = c.decs[i], c.errs[i] != nil
			if c.errs[i] != nil && ch.err == nil {
				ch.err = c.errs[i]
			}
		}
		close(ch.done)
	}
}

// merge makes c.hits the batch's hits, one per counter and spec, each
// costing the sum of its hits' costs, and points each hit at its own.
func (c *coalescer) merge(batch []*charge) {
	if c.index == nil {
		c.index = map[hitKey]int{}
	}
	clear(c.index)
	c.hits = c.hits[:0]
	for _, ch := range batch {
		ch.at = resize(ch.at, len(ch.hits))
		for j := range ch.hits {
			h := &ch.hits[j]
			k := hitKey{h.Key, h.Spec}
			i, ok := c.index[k]
			if !ok {
				i = len(c.hits)
				c.index[k] = i
				c.hits = append(c.hits, limit.Hit{Key: h.Key, Spec: h.Spec, Mode: limit.Advisory})
			}
			c.hits[i].Cost = min(c.hits[i].Cost+h.Cost, maxCount)
			ch.at[j] = i
		}
	}
}

// evaluate decides hits in store calls of at most chunkHits, each of one
// shard's hits, and sets each hit's error to its call's.
func (c *coalescer) evaluate(ctx context.Context, hits []limit.Hit, decs []limit.Decision, errs []error) {
	for _, idx := range c.byShard(ctx, hits) {
		for start := 0; start < len(idx); start += chunkHits {
			part := idx[start:min(start+chunkHits, len(idx))]
			c.call, c.cdec = c.call[:0], resize(c.cdec, len(part))
			for _, i := range part {
				c.call = append(c.call, hits[i])
			}
			_, err := c.limiter.Evaluate(ctx, c.call, c.cdec)
			for k, i := range part {
				decs[i], errs[i] = c.cdec[k], err
			}
		}
	}
	clear(c.call)
}

// byShard returns the indices of hits grouped by shard ("" for a limiter
// without shards).
func (c *coalescer) byShard(ctx context.Context, hits []limit.Hit) map[string][]int {
	if c.shards == nil {
		c.shards = map[string][]int{}
	}
	for k, v := range c.shards {
		c.shards[k] = v[:0]
	}
	sh, ok := c.limiter.(sharder)
	for i := range hits {
		s := ""
		if ok {
			s = sh.Shard(ctx, hits[i].Key)
		}
		c.shards[s] = append(c.shards[s], i)
	}
	return c.shards
}

// clipRefused charges each counter that refused a merged hit what it has
// left, and takes that decision instead. If that fails, the refusals
// stand: the counters were nearly spent anyway.
func (c *coalescer) clipRefused(ctx context.Context) {
	n := len(c.hits)
	c.clipAt = c.clipAt[:0]
	for k := range n {
		if h, d := c.hits[k], c.decs[k]; c.errs[k] == nil && h.Cost > 0 && !d.Allowed && d.Remaining > 0 {
			h.Cost = d.Remaining
			c.hits = append(c.hits, h)
			c.clipAt = append(c.clipAt, k)
		}
	}
	if len(c.clipAt) == 0 {
		return
	}
	c.decs = slices.Grow(c.decs, len(c.clipAt))[:len(c.hits)]
	c.errs = slices.Grow(c.errs, len(c.clipAt))[:len(c.hits)]
	c.evaluate(ctx, c.hits[n:], c.decs[n:], c.errs[n:])
	for i, k := range c.clipAt {
		if c.errs[n+i] == nil {
			c.decs[k] = c.decs[n+i]
		}
	}
}
