// Package denycache answers, without the store, the calls the store would
// deny anyway. A Cache wraps a limit.Limiter and is one itself.
//
// A denial of a hit (Key, Spec, cost c) at instant t0 with RetryAfter r
// means no hit of cost c or more passes before t0+r: other callers can
// only consume more, and a denied call consumes nothing. A fixed window
// left at Remaining 0 means the same for cost 1 until it ends; other
// algorithms give budget back earlier, so only their denials are kept.
// Budget comes back early only through a refund (which drops the key's
// denial), a changed Spec (which never matches) or a reset (Reset, and
// Flush on every rule reload). What this instance cannot see, such as a
// refund sent to another instance or a store that lost its data, makes it
// deny where the store would admit, never the reverse, for at most
// Options.MaxAge. t0 is read before the store is called, so it is never
// later than the store's. docs/operations.md (Deny cache) says what users
// see.
package denycache

import (
	"cmp"
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

// DefaultMaxAge is Options.MaxAge when it is zero.
const DefaultMaxAge = time.Second

// maxShards bounds the separately locked parts of a Cache; there are fewer
// when MaxEntries is smaller, so that the bound is exact.
const maxShards = 64

// Options configure a Cache. The zero value is usable; no bound is negative.
type Options struct {
	// MaxEntries bounds the denials held; 0 means DefaultMaxEntries. When
	// full, expired denials go first, then arbitrary ones: a forgotten
	// denial only sends the next call to the store.
	MaxEntries int
	// MaxAge bounds how long a denial is used, never past its RetryAfter;
	// 0 means DefaultMaxAge.
	MaxAge time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Cache is a limit.Limiter that answers from the denials it has seen the
// calls the wrapped one would deny. It is safe for concurrent use; a call
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

// denial says that a hit of cost or more under spec is denied until until.
// Instants are ns since the Unix epoch.
type denial struct {
	spec    limit.Spec
	cost    int64
	until   int64 // the denied Decision's RetryAfter, made absolute
	resetAt int64 // its ResetAfter, made absolute
	expires int64 // used while now < expires (<= until)
}

// New returns a Cache in front of inner.
func New(inner limit.Limiter, opts Options) *Cache {
	c := &Cache{inner: inner, now: opts.Now, seed: maphash.MakeSeed(), maxAge: int64(cmp.Or(opts.MaxAge, DefaultMaxAge))}
	if c.now == nil {
		c.now = time.Now
	}
	maxEntries := cmp.Or(opts.MaxEntries, DefaultMaxEntries)
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

// Evaluate implements limit.Limiter. A call whose every hit has a cached
// denial (same Key and Spec, a cost no greater) that blocks it
// (limit.Blocked) is answered without the wrapped Limiter: each hit denied
// with Remaining 0, Debt 0, and the store's RetryAfter and ResetAfter less
// the time elapsed (Never and RetryAfter 0 for a cost above capacity).
// When a cached denial blocks the call and its other hits are enforced
// fixed windows on keys of their own, the wrapped Limiter only looks at
// those (see looked). Any other call goes to the wrapped Limiter whole;
// its denials and exhausted fixed windows are remembered, and a refund or
// an allowed hit drops its key's denial.
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
		err = c.look(ctx, gen, now, hits, decisions, looks)
		return err == nil, err
	}
	blocked, err = c.inner.Evaluate(ctx, hits, decisions)
	if err != nil {
		return false, err
	}
	c.learn(gen, now, hits, decisions)
	return blocked, nil
}

// maxLooks bounds the hits of a call answered with looks: a bit each.
const maxLooks = 64

// answer fills the decisions of the hits the cache denies. ok with no
// looks: the cached denials block the call. ok with looks: every hit is
// enforced, not a refund, on a key of its own, either denied by the cache
// (one at least) or a fixed window within its capacity, and bit i of
// looks marks hit i to look at (look). Otherwise the call goes whole.
func (c *Cache) answer(now int64, hits []limit.Hit, decisions []limit.Decision) (looks uint64, ok bool) {
	if len(decisions) != len(hits) {
		return 0, false // the wrapped Limiter says what is wrong
	}
	lookable := len(hits) <= maxLooks
	denied := false
	for i := range hits {
		h := &hits[i]
		if h.Usage && h.Cost > 0 {
			return 0, false // charged whatever the store decides
		}
		lookable = lookable && !h.Refund && h.Mode == limit.Enforce && once(hits, i)
		if d, ok := c.denied(now, h); ok {
			decisions[i] = d.decision(now, h)
			denied = true
			continue
		}
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

// look asks the wrapped Limiter to look (cost 0) at the hits of mask,
// fills their decisions from what it sees and learns from those alone:
// relearning the cached denials would keep them past Options.MaxAge.
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

// looked returns the store's decision for h, a fixed-window hit on a key
// of its own, from a look at its counter: the store denies h iff its cost
// is over the Remaining seen, and a denied hit keeps that Remaining and
// may retry when the window ends.
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

// learn remembers the denials and exhausted fixed windows of a call the
// wrapped Limiter decided at now (read before the call), and forgets the
// keys it allowed or refunded. Nothing is learnt across a Flush, nor from
// a key hit twice in one call, whose second decision counts the first.
func (c *Cache) learn(gen uint64, now int64, hits []limit.Hit, decisions []limit.Decision) {
	for i := range hits {
		h, d := &hits[i], &decisions[i]
		s := c.shardOf(h.Key)
		switch {
		case h.Refund:
			s.forget(h.Key)
		case exhausted(h, d) && once(hits, i):
			// Any hit is denied until the window ends.
			s.store(c, gen, now, h.Key, c.denial(now, h.Spec, 1, d.ResetAfter, d.ResetAfter))
		case d.Allowed && h.Cost > 0:
			s.forget(h.Key)
		case !d.Allowed && h.Cost > 0 && !d.Never && d.RetryAfter > 0 && once(hits, i):
			s.store(c, gen, now, h.Key, c.denial(now, h.Spec, h.Cost, d.RetryAfter, d.ResetAfter))
		}
	}
}

// exhausted reports whether d, the store's decision on h, leaves a fixed
// window empty until it ends (see the package doc).
func exhausted(h *limit.Hit, d *limit.Decision) bool {
	return d.Allowed && !h.Refund && h.Spec.Algorithm == limit.FixedWindow && h.Spec.Limit > 0 &&
		d.Remaining == 0 && d.ResetAfter > 0
}

// denial returns the denial of hits of cost or more under spec for retry,
// from a store answer at now; the counter is whole again after reset.
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

// sweepInterval is how often a full shard drops expired denials; in
// between it drops arbitrary ones.
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

// Flush forgets every denial, those calls in flight are learning
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

// ErrNoReset is wrapped by the error of Reset when the wrapped Limiter
// has no Reset of its own.
var ErrNoReset = errors.New("the wrapped limiter cannot reset counters")

// Reset resets the counter in the wrapped Limiter, then forgets the key's
// denial and what calls in flight learn from the state before it, even
// when the wrapped Reset fails: the store may have deleted the counter all
// the same. A wrapped Limiter without Reset is an error wrapping
// ErrNoReset.
func (c *Cache) Reset(ctx context.Context, key string, spec limit.Spec) error {
	r, ok := c.inner.(interface {
		Reset(ctx context.Context, key string, spec limit.Spec) error
	})
	if !ok {
		return fmt.Errorf("denycache: reset: %w (%T)", ErrNoReset, c.inner)
	}
	err := r.Reset(ctx, key, spec)
	// After the store's reset: a call learning from the old state has
	// loaded the old generation and stores nothing.
	c.gen.Add(1)
	c.shardOf(key).forget(key)
	if err != nil {
		return fmt.Errorf("denycache: reset: %w", err)
	}
	return nil
}

// Len returns the denials held, expired ones included until swept.
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
