// Package denycache answers, without the store, the calls the store would
// reject anyway. A Cache wraps a limit.Limiter and is one itself.
//
// A denial of (Key, Spec, cost c) with RetryAfter r at instant t0 says that
// no hit of cost >= c passes before t0+r if nothing else happens. Other
// callers can only consume more, which delays that instant, and a denied
// call consumes nothing: until then the store would deny again. A fixed
// window left with Remaining 0 says the same for cost 1 until it ends.
// Other algorithms give budget back before their ResetAfter, so only
// their denials are kept. Budget comes back only through a refund (which
// drops the key's denial), a changed limit (a Spec that differs never
// matches) and a reset (Reset forgets the key; the server flushes the
// Cache on every reload). What this instance cannot see, a refund sent to
// another instance or a store that lost its data, makes it deny although
// the store would admit, never the reverse, for at most Options.MaxAge.
// The instant t0 is read before the store is called, so the cached
// instant is never later than the store's. docs/operations.md (Deny cache)
// says what users see.
package denycache

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/floodgate/floodgate/pkg/limit"
)

// DefaultMaxEntries is Options.MaxEntries when it is zero.
const DefaultMaxEntries = 1 << 16

// DefaultMaxAge is Options.MaxAge when it is zero: under a flood, one
// store call per second per denied key, and at most a second of stale
// denials after the store lost its data.
const DefaultMaxAge = time.Second

// maxShards is the number of independently locked parts of a Cache (fewer
// when MaxEntries is smaller, so that the bound is exact).
const maxShards = 64

// Options configure a Cache. The zero value is usable.
type Options struct {
	// MaxEntries bounds the number of denials held; 0 means
	// DefaultMaxEntries. A full part of the cache drops expired denials,
	// then arbitrary ones: a forgotten denial only sends the next call to
	// the store.
	MaxEntries int
	// MaxAge bounds how long a denial is used after the store returned
	// it (it is never used past its RetryAfter either); 0 means
	// DefaultMaxAge.
	MaxAge time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake one.
	Now func() time.Time
}

// Cache is a limit.Limiter that answers calls the wrapped one would reject
// from the denials it has seen. It is safe for concurrent use, and a call
// answered from the cache does not allocate.
type Cache struct {
	inner  limit.Limiter
	now    func() time.Time
	maxAge int64 // ns
	seed   maphash.Seed
	gen    atomic.Uint64 // bumped by Flush; denials learnt before it are dropped
	shards []shard       // a power of two of them, at most maxShards

	answered, evaluated atomic.Uint64
}

type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte // own cache lines
}

type shardState struct {
	mu        sync.Mutex
	entries   map[string]denial
	capacity  int
	lastSweep int64 // ns since the epoch
}

// denial says that a hit of Cost or more on the counter Key under spec is
// denied until until.
type denial struct {
	spec    limit.Spec
	cost    int64
	until   int64 // ns since the Unix epoch: the denied Decision's RetryAfter, made absolute
	resetAt int64 // ns since the Unix epoch: the denied Decision's ResetAfter, made absolute
	expires int64 // ns since the Unix epoch; the denial is used while now < expires (<= until)
}

// New returns a Cache in front of inner.
func New(inner limit.Limiter, opts Options) *Cache {
	c := &Cache{inner: inner, now: opts.Now, seed: maphash.MakeSeed(), maxAge: int64(opts.MaxAge)}
	if c.now == nil {
		c.now = time.Now
	}
	if c.maxAge <= 0 {
		c.maxAge = int64(DefaultMaxAge)
	}
	maxEntries := opts.MaxEntries
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	c.shards = make([]shard, 1<<(bits.Len(uint(min(maxEntries, maxShards)))-1))
	for i := range c.shards {
		s := &c.shards[i]
		s.capacity = maxEntries / len(c.shards)
		if i < maxEntries%len(c.shards) {
			s.capacity++
		}
		s.entries = make(map[string]denial)
	}
	return c
}

func (c *Cache) shardOf(key string) *shard {
	return &c.shards[maphash.String(c.seed, key)&uint64(len(c.shards)-1)]
}

// Evaluate implements limit.Limiter. When every hit has a cached denial
// for its Key and Spec at a cost no greater than its own, and those
// denials block the call (limit.Blocked), the call is answered without
// the wrapped Limiter: each hit denied with Remaining 0, Debt 0 (the
// cache keeps none), and RetryAfter and ResetAfter those the store gave,
// less the time elapsed; Never and RetryAfter 0 for a cost above the
// capacity. When an enforced hit's denial blocks the call and its other
// hits are fixed windows on keys of their own, the wrapped Limiter only
// looks at those (see looked). Any other call (a refund, a usage hit, a
// key without a denial in another algorithm) goes to the wrapped Limiter
// whole. Its denials and exhausted fixed windows are remembered; a refund
// or another allowed hit drops its key's denial.
func (c *Cache) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	now := c.now().UnixNano()
	looks, ok := c.answer(now, hits, decisions)
	if ok && looks == 0 {
		c.answered.Add(1)
		return true, nil
	}
	gen := c.gen.Load()
	c.evaluated.Add(1)
	if ok {
		if err := c.look(ctx, gen, now, hits, decisions, looks); err != nil {
			return false, err
		}
		return true, nil
	}
	blocked, err = c.inner.Evaluate(ctx, hits, decisions)
	if err != nil {
		return false, err
	}
	c.learn(gen, now, hits, decisions)
	return blocked, nil
}

// maxLooks bounds the hits of a call answered with looks (a bit each in
// answer's mask).
const maxLooks = 64

// answer fills the decisions of the hits the cache denies and reports
// whether the call can be answered without sending it whole: ok with no
// looks when the cached denials block the call; ok with bit i of looks
// set for each hit to look at (see look) when every hit is enforced, not
// a refund, on a key of its own, and either denied by the cache or a
// fixed window within its capacity, with at least one denied.
func (c *Cache) answer(now int64, hits []limit.Hit, decisions []limit.Decision) (looks uint64, ok bool) {
	if len(decisions) != len(hits) {
		return 0, false // the wrapped Limiter says what is wrong
	}
	lookable := len(hits) <= maxLooks
	denied := false
	for i := range hits {
		h := &hits[i]
		if h.Usage && h.Cost > 0 {
			return 0, false // the store charges it whatever it decides
		}
		lookable = lookable && !h.Refund && h.Mode == limit.Enforce && once(hits, i)
		if d, ok := c.denied(now, h); ok {
			decisions[i] = d.decision(now, h)
			denied = true
			continue
		}
		// A refund must reach the store; a look, or a hit the cache knows
		// nothing of, gets its real state from it: whole, or by a look.
		if !lookable || h.Spec.Algorithm != limit.FixedWindow || h.Spec.Limit == 0 || h.Cost > h.Spec.Capacity() {
			return 0, false
		}
		looks |= 1 << i
	}
	if looks == 0 {
		return 0, limit.Blocked(hits, decisions)
	}
	return looks, lookable && denied
}

// decision is what the cache answers for h, which d denies at instant now.
func (d *denial) decision(now int64, h *limit.Hit) limit.Decision {
	dec := limit.Decision{
		RetryAfter: time.Duration(d.until - now),
		ResetAfter: time.Duration(max(d.resetAt-now, d.until-now)),
	}
	if h.Cost > d.spec.Capacity() {
		dec.Never, dec.RetryAfter = true, 0
	}
	return dec
}

// look asks the wrapped Limiter to look (cost 0) at the hits of mask and
// fills their decisions from what it sees, then learns from those as from
// the store's own answer (not from the cached denials: relearning them
// would keep them past Options.MaxAge).
func (c *Cache) look(ctx context.Context, gen uint64, now int64, hits []limit.Hit, decisions []limit.Decision, mask uint64) error {
	n := bits.OnesCount64(mask)
	looks, seen := make([]limit.Hit, 0, n), make([]limit.Decision, n)
	for i := range hits {
		if mask&(1<<i) != 0 {
			h := hits[i]
			h.Cost = 0
			looks = append(looks, h)
		}
	}
	if _, err := c.inner.Evaluate(ctx, looks, seen); err != nil {
		return err
	}
	j := 0
	for i := range hits {
		if mask&(1<<i) != 0 {
			looks[j].Cost = hits[i].Cost
			seen[j] = looked(&hits[i], seen[j])
			decisions[i] = seen[j]
			j++
		}
	}
	c.learn(gen, now, looks, seen)
	return nil
}

// looked returns the store's decision for h, a fixed-window hit of a
// blocked call on a key of its own, from a look at its counter: the look
// says Remaining max(0, L-n) for the count n, and the store denies the
// hit iff n + cost > L, that is iff cost > Remaining; a denied hit keeps
// that Remaining and is retried when the window ends.
func looked(h *limit.Hit, seen limit.Decision) limit.Decision {
	if h.Cost == 0 || h.Cost <= seen.Remaining && seen.Allowed {
		return seen
	}
	return limit.Decision{Remaining: seen.Remaining, Debt: seen.Debt, ResetAfter: seen.ResetAfter, RetryAfter: seen.ResetAfter}
}

// denied returns h's cached denial, if one is in force; a refund or a
// look has none.
func (c *Cache) denied(now int64, h *limit.Hit) (denial, bool) {
	if h.Cost <= 0 || h.Refund {
		return denial{}, false
	}
	s := c.shardOf(h.Key)
	s.mu.Lock()
	d, ok := s.entries[h.Key]
	s.mu.Unlock()
	return d, ok && now < d.expires && h.Cost >= d.cost && d.spec == h.Spec
}

// learn remembers the denials of a call the wrapped Limiter decided at
// instant now (read before the call) and the fixed windows it left
// exhausted, and forgets the keys it allowed or refunded. Nothing is
// learnt across a Flush, nor from a key hit twice in one call, whose
// later decision counts the earlier hit's consumption.
func (c *Cache) learn(gen uint64, now int64, hits []limit.Hit, decisions []limit.Decision) {
	for i := range hits {
		h, d := &hits[i], &decisions[i]
		s := c.shardOf(h.Key)
		switch {
		case h.Refund:
			s.forget(h.Key)
		case exhausted(h, d) && once(hits, i):
			// The next hit of cost 1 or more is denied until the window
			// ends, as the store would say on that hit.
			s.store(c, gen, now, h.Key, c.denial(now, h.Spec, 1, d.ResetAfter, d.ResetAfter))
		case d.Allowed && h.Cost > 0:
			s.forget(h.Key)
		case !d.Allowed && h.Cost > 0 && !d.Never && d.RetryAfter > 0 && once(hits, i):
			s.store(c, gen, now, h.Key, c.denial(now, h.Spec, h.Cost, d.RetryAfter, d.ResetAfter))
		}
	}
}

// exhausted reports whether d, the store's decision on h, leaves a fixed
// window with nothing to give until it ends (ResetAfter); the package doc
// says why that is as safe to cache as a denial, and only for fixed
// windows.
func exhausted(h *limit.Hit, d *limit.Decision) bool {
	return d.Allowed && !h.Refund && h.Spec.Algorithm == limit.FixedWindow && h.Spec.Limit > 0 &&
		d.Remaining == 0 && d.ResetAfter > 0
}

// denial returns what a store's answer at instant now teaches: hits of
// cost or more on a counter under spec are denied for retry, and the
// counter is whole again after reset.
func (c *Cache) denial(now int64, spec limit.Spec, cost int64, retry, reset time.Duration) denial {
	until := now + int64(retry)
	return denial{
		spec:    spec,
		cost:    cost,
		until:   until,
		resetAt: now + int64(reset),
		expires: min(until, now+c.maxAge),
	}
}

func (s *shard) forget(key string) {
	s.mu.Lock()
	delete(s.entries, key)
	s.mu.Unlock()
}

// sweepInterval is how often a full shard looks for expired denials; in
// between, it makes room by dropping arbitrary ones.
const sweepInterval = int64(100 * time.Millisecond)

func (s *shard) store(c *Cache, gen uint64, now int64, key string, d denial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.gen.Load() != gen {
		return // flushed while the store decided
	}
	if _, ok := s.entries[key]; !ok && len(s.entries) >= s.capacity {
		if now-s.lastSweep >= sweepInterval {
			s.lastSweep = now
			for k, e := range s.entries {
				if now >= e.expires {
					delete(s.entries, k)
				}
			}
		}
		for k := range s.entries {
			if len(s.entries) < s.capacity {
				break
			}
			delete(s.entries, k)
		}
	}
	s.entries[key] = d
}

// Flush forgets every denial, those being learnt by calls in flight
// included. The server calls it when the rules change.
func (c *Cache) Flush() {
	c.gen.Add(1)
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.entries)
		s.mu.Unlock()
	}
}

// resetter is the stores' Reset.
type resetter interface {
	Reset(ctx context.Context, key string, spec limit.Spec) error
}

// ErrNoReset is wrapped by the error of Reset when the wrapped Limiter
// has no Reset of its own.
var ErrNoReset = errors.New("the wrapped limiter cannot reset counters")

// Reset resets the counter in the wrapped Limiter, then forgets the key's
// denial, which would otherwise deny for up to Options.MaxAge a client
// the reset meant to let through, and drops what calls in flight learn
// from the state before it (as Flush does). The denial is forgotten even
// when the wrapped Reset fails, since the store may have deleted the
// counter all the same. A wrapped Limiter without Reset is an error
// wrapping ErrNoReset.
func (c *Cache) Reset(ctx context.Context, key string, spec limit.Spec) error {
	r, ok := c.inner.(resetter)
	if !ok {
		return fmt.Errorf("denycache: reset: %w (%T)", ErrNoReset, c.inner)
	}
	err := r.Reset(ctx, key, spec)
	// After the store's reset, so that a call that learns from the old
	// state has loaded the old generation and stores nothing.
	c.gen.Add(1)
	c.shardOf(key).forget(key)
	if err != nil {
		return fmt.Errorf("denycache: reset: %w", err)
	}
	return nil
}

// Len returns the number of denials held, expired ones included until
// they are swept.
func (c *Cache) Len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// Stats counts calls since New: Answered from cached denials, Evaluated by
// the wrapped Limiter.
type Stats struct {
	Answered, Evaluated uint64
}

// Stats returns the call counts.
func (c *Cache) Stats() Stats {
	return Stats{Answered: c.answered.Load(), Evaluated: c.evaluated.Load()}
}

// once reports whether hits[i]'s key appears nowhere else in hits.
func once(hits []limit.Hit, i int) bool {
	for j := range hits {
		if j != i && hits[j].Key == hits[i].Key {
			return false
		}
	}
	return true
}
