package limit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// ErrFull reports that a Memory refused a call, changing nothing, because
// a counter it needed to create would not fit (see Memory).
var ErrFull = errors.New("memory store full")

// MemoryOptions configures a Memory. The zero value is usable.
type MemoryOptions struct {
	// MaxEntries bounds the number of counters held; 0 or less means
	// 1<<20.
	MaxEntries int
	// Now is the clock, read once per Evaluate; nil means time.Now.
	Now func() time.Time
	// Logger, if not nil, gets a warning when calls are refused with
	// ErrFull: at the first refusal, then at most every 10 seconds, with
	// the number refused since the last warning.
	Logger *slog.Logger
}

// A Memory has up to maxShards shards, so that the shards of one call fit
// in a uint64 mask, each of at least minShardEntries counters: a shard
// refuses new counters when its share is live, even if others have room,
// and a hash fills large shards nearly evenly but tiny ones not
// (docs/benchmarks.md, pkg/limit). Below 2048 entries there is one shard,
// and MaxEntries is an exact bound.
const (
	maxShards          = 64
	minShardEntries    = 1024
	defaultMaxEntries  = 1 << 20          // when MemoryOptions.MaxEntries is 0
	refusalLogInterval = 10 * time.Second // see MemoryOptions.Logger
)

// Memory is the Limiter that keeps its counters in process memory: the
// store of a server without Redis, and the oracle the Redis scripts are
// tested against. A call locks only the shards of its keys.
//
// A counter expires at the instant its state becomes equivalent to no
// state (the end of a fixed window, a full bucket), so expiry never
// changes a decision. Memory never forgets a live counter, which would
// admit more than its limit: the counters are spread over up to 64 shards
// by a hash of the key, each holding its share of MaxEntries, and a call
// that would create a counter in a full shard is refused with an error
// wrapping ErrFull, which may happen a little before MaxEntries counters
// are held.
type Memory struct {
	now       func() time.Time
	shards    []shard
	shardBits int       // len(shards) == 1 << shardBits
	pool      sync.Pool // of *scratch
	capacity  int       // MaxEntries
	refused   atomic.Int64

	// The warnings about refused calls.
	logger  *slog.Logger
	logMu   sync.Mutex   // held to write logNext and logged
	logNext atomic.Int64 // µs: no warning before then
	logged  int64        // refusals counted by the warnings so far
}

// NewMemory returns an empty Memory.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{now: opts.Now, logger: opts.Logger}
	if m.now == nil {
		m.now = time.Now
	}
	m.logNext.Store(math.MinInt64) // the first refusal is logged
	m.capacity = opts.MaxEntries
	if m.capacity <= 0 {
		m.capacity = defaultMaxEntries
	}
	// As many shards as possible (a power of 2), MaxEntries spread exactly.
	m.shardBits = bits.Len(uint(max(1, min(m.capacity/minShardEntries, maxShards)))) - 1
	m.shards = make([]shard, 1<<m.shardBits)
	for i := range m.shards {
		m.shards[i].capacity = m.capacity / len(m.shards)
		if i < m.capacity%len(m.shards) {
			m.shards[i].capacity++
		}
		m.shards[i].entries = make(map[string]*entry)
	}
	m.pool.New = func() any { return new(scratch) }
	return m
}

// Evaluate implements Limiter, deciding every hit at one reading of the
// clock. Beyond Limiter's errors, it returns ctx's error, deciding
// nothing, if ctx is done; and an error wrapping ErrFull, changing
// nothing, if a counter the call would create does not fit. A blocked
// call creates no counter, so it is decided even when full.
func (m *Memory) Evaluate(ctx context.Context, hits []Hit, decisions []Decision) (blocked bool, err error) {
	if len(decisions) != len(hits) {
		return false, fmt.Errorf("limit: %d decisions for %d hits", len(decisions), len(hits))
	}
	for i := range hits {
		if err := hits[i].Validate(); err != nil {
			return false, fmt.Errorf("limit: hit %d: %w", i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	sc := m.pool.Get().(*scratch)
	defer m.pool.Put(sc)
	now, blocked, full := m.decide(sc, hits, decisions)
	if full >= 0 {
		return false, m.refuse(now, full)
	}
	return blocked, nil
}

// decide is Evaluate on valid hits. It returns the instant of the call,
// whether the call is blocked, and -1, or, if the call is refused for lack
// of room, the index of a shard that is full.
func (m *Memory) decide(sc *scratch, hits []Hit, decisions []Decision) (now int64, blocked bool, full int) {
	locked := m.lock(sc, hits)
	defer m.unlock(sc, locked)

	// Expired counters go first: a shard is full only of live ones.
	now = m.now().UnixMicro()
	for set := locked; set != 0; set &= set - 1 {
		m.shards[bits.TrailingZeros64(set)].expire(now)
	}
	// A call of one hit needs no working copy, which spares copying a long
	// sliding log twice: a denied or peeking step leaves the stored state
	// as it was (see step), an allowed one is committed, and an existing
	// counter never lacks room.
	sc.load(len(hits) == 1)

	sc.apply(hits, decisions, now, false)
	blocked = Blocked(hits, decisions)
	if blocked && !sc.block(hits, decisions, now) {
		return now, true, -1
	}
	if s := sc.overflow(); s != nil {
		return now, false, shardIndex(s.key, m.shardBits)
	}
	for i := range sc.slots {
		if sc.slots[i].dirty {
			sc.slots[i].store(now)
		}
	}
	return now, blocked, -1
}

// lock finds each hit's counter, a slot per distinct key, and locks every
// shard involved in ascending order, so that concurrent calls never wait
// for each other in a cycle. It returns the set of shards locked.
func (m *Memory) lock(sc *scratch, hits []Hit) (locked uint64) {
	sc.slots = sc.slots[:0]
	sc.slotOf = sc.slotOf[:0]
	for i := range hits {
		s := sc.slotFor(hits[:i], hits[i].Key)
		if s < 0 {
			s = len(sc.slots)
			idx := shardIndex(hits[i].Key, m.shardBits)
			locked |= 1 << idx
			sc.slots = growSlot(sc.slots)
			sc.slots[s].key, sc.slots[s].shard = hits[i].Key, &m.shards[idx]
		}
		sc.slotOf = append(sc.slotOf, s)
	}
	for set := locked; set != 0; set &= set - 1 {
		m.shards[bits.TrailingZeros64(set)].mu.Lock()
	}
	return locked
}

// unlock undoes lock, and lets the pooled scratch pin neither entries,
// keys, nor an entry's runs.
func (m *Memory) unlock(sc *scratch, locked uint64) {
	for i := range sc.slots {
		sl := &sc.slots[i]
		sl.entry, sl.key = nil, ""
		if sl.shared {
			sl.st.runs = nil
		}
	}
	for set := locked; set != 0; set &= set - 1 {
		m.shards[bits.TrailingZeros64(set)].mu.Unlock()
	}
}

// refuse counts a call refused for lack of room in shard i, logs it if the
// rate limit allows, and returns the error wrapping ErrFull.
func (m *Memory) refuse(now int64, i int) error {
	total := m.refused.Add(1)
	capacity := m.shards[i].capacity // constant: readable without the lock
	if m.logger != nil && now >= m.logNext.Load() {
		m.logMu.Lock()
		since := int64(0)
		if now >= m.logNext.Load() {
			m.logNext.Store(now + refusalLogInterval.Microseconds())
			since = max(total, m.logged) - m.logged
			m.logged += since
		}
		m.logMu.Unlock()
		if since > 0 {
			m.logger.Warn("in-memory store full: refusing calls that need a new counter; the failure policy answers them",
				"refused", since, "refused_total", total, "shard", i, "shard_capacity", capacity,
				"max_entries", m.capacity)
		}
	}
	return fmt.Errorf("limit: %w: no room for a new counter in shard %d of %d: its share of the %d max entries is %d counters, none expired",
		ErrFull, i, len(m.shards), m.capacity, capacity)
}

// Reset forgets the counter key, so that its next hit finds no state: what
// an operator asks to unblock a client at once. The spec is not needed and
// is taken to match the other stores' Reset. It returns ctx's error,
// forgetting nothing, if ctx is done.
func (m *Memory) Reset(ctx context.Context, key string, _ Spec) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s := &m.shards[shardIndex(key, m.shardBits)]
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.entries[key]; e != nil {
		s.remove(e)
	}
	return nil
}

// Len returns the number of counters m holds, after dropping expired
// ones. It locks one shard at a time, so under concurrent calls the count
// is not of one instant.
func (m *Memory) Len() int {
	n, _ := m.count()
	return n
}

// Cap returns the most counters m holds: MemoryOptions.MaxEntries, or its
// default.
func (m *Memory) Cap() int { return m.capacity }

// Refused returns the number of calls refused with ErrFull since
// NewMemory.
func (m *Memory) Refused() int64 { return m.refused.Load() }

// count drops the expired counters, and returns the number held and the
// number dropped since NewMemory.
func (m *Memory) count() (entries int, expired int64) {
	now := m.now().UnixMicro()
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.expire(now)
		entries += len(s.entries)
		expired += s.expired
		s.mu.Unlock()
	}
	return entries, expired
}
