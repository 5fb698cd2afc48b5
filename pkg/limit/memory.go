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
	"unsafe"
)

// DefaultMaxEntries is the number of counters a Memory holds when
// MemoryOptions.MaxEntries is 0.
const DefaultMaxEntries = 1 << 20

// ErrFull reports that a Memory refused a call because a counter it needed
// to create would not fit: the shard of its key holds its share of
// MaxEntries in counters that have not expired. The call changed nothing.
// Callers answer it as they answer a failed store (by the failure policy);
// errors.Is tells it apart.
var ErrFull = errors.New("memory store full")

// RefusalLogInterval is the least time between two warnings a Memory logs
// about refused calls (see MemoryOptions.Logger), on its clock.
const RefusalLogInterval = 10 * time.Second

// MemoryOptions configures a Memory. The zero value is usable.
type MemoryOptions struct {
	// MaxEntries bounds the number of counters held; 0 or less means
	// DefaultMaxEntries. See Memory for what happens when it is reached.
	MaxEntries int
	// Now is the clock; nil means time.Now. It is read once per Evaluate, at
	// microsecond resolution. Tests inject a fake clock.
	Now func() time.Time
	// Logger, if not nil, gets a warning when a call is refused with
	// ErrFull: at the first refusal, then at the first refusal at least
	// RefusalLogInterval after the previous warning, with the number of
	// calls refused since it. Nothing is logged while no call is refused.
	Logger *slog.Logger
}

// MemoryStats describes a Memory's use, for metrics and logs.
type MemoryStats struct {
	// Entries is the number of counters held, expired ones dropped.
	Entries int
	// Capacity is MaxEntries: the most counters held.
	Capacity int
	// Refused counts the calls refused with ErrFull since NewMemory.
	Refused int64
	// Expired counts the counters dropped since NewMemory because their
	// state had become equivalent to none. Dropping them changes no
	// decision; it is what makes room for new counters.
	Expired int64
}

// maxShards is the number of independently locked parts of a Memory (fewer
// when MaxEntries is smaller). At most 64, so that the shards of one call fit
// in a uint64 mask.
const maxShards = 64

// minShardEntries is the least share of MaxEntries per shard when there are
// several. A shard refuses new counters when its share is live, even if
// others have room; keys spread by a hash fill shards of a thousand or more
// nearly evenly (measured: the first refusal comes at 93% of MaxEntries or
// more with 64 shards of 1024, at 98% with the 16384 of DefaultMaxEntries),
// tiny shards not (at 10 to 20% with 64 shards of 1). Smaller stores get
// fewer shards; one below 2048 entries, which is then an exact bound.
const minShardEntries = 1024

// Memory evaluates limits in process memory, with exactly the arithmetic of
// the Redis scripts (see the step functions in algorithms.go): the store of
// a server without Redis, and the oracle those scripts are tested against.
//
// Each counter expires at the instant its state becomes equivalent to no
// state (the end of a fixed window, a full bucket, ...), so expiry never
// changes a decision; expired counters are dropped whenever their shard is
// used, and by Len.
//
// Memory holds at most MaxEntries counters, and never forgets one that has
// not expired: forgetting a counter would start it again from no state and
// admit more than its limit (a flood of new keys would free a blocked
// user). The counters are spread over 64 shards by a hash of the key (fewer
// if MaxEntries < 65536, so that each has at least 1024), each holding at
// most its share of MaxEntries. A call that would create a counter in a
// shard whose share is all live counters is refused with an error wrapping
// ErrFull and changes nothing; calls on the counters held go on being
// decided exactly. Since keys hash unevenly, a shard may refuse while the
// Memory holds somewhat fewer than MaxEntries counters (from about 93% of
// it). Each shard keeps its counters in a heap by expiry, so dropping
// expired ones costs O(log n) each. Stats counts refusals and expired
// counters.
//
// A sliding log's counter holds one entry per distinct µs of its admitted
// hits in the window, and a call on it takes time proportional to that.
//
// Memory implements Limiter and is safe for concurrent use. Each Evaluate locks only the shards of
// its hits, in ascending order, so calls on different keys rarely wait for
// each other, and the hits of one call decide atomically.
type Memory struct {
	now       func() time.Time
	shards    []shard
	shardBits int       // len(shards) == 1 << shardBits
	pool      sync.Pool // of *scratch
	capacity  int       // MaxEntries
	refused   atomic.Int64
	log       refusalLog
}

// refusalLog rate-limits the warnings about refused calls.
type refusalLog struct {
	logger *slog.Logger
	next   atomic.Int64 // µs: no warning before then
	mu     sync.Mutex
	logged int64 // refusals counted by the warnings so far
}

// shard is one locked part of a Memory, alone on its cache lines so that
// locking it does not slow the cores working on its neighbours.
type shard struct {
	shardState
	_ [128 - unsafe.Sizeof(shardState{})%128]byte
}

type shardState struct {
	mu       sync.Mutex
	entries  map[string]*entry
	byExpiry []*entry // min-heap on entry.expires
	capacity int
	expired  int64 // counters dropped by expire
}

// entry is one stored counter.
type entry struct {
	key     string
	expires int64 // µs since the Unix epoch; the entry is gone from then on
	index   int   // position in shard.byExpiry; -1 once removed
	st      state
}

// NewMemory returns an empty Memory.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{now: opts.Now}
	if m.now == nil {
		m.now = time.Now
	}
	m.log.logger = opts.Logger
	m.log.next.Store(math.MinInt64) // the first refusal is logged
	maxEntries := opts.MaxEntries
	if maxEntries <= 0 {
		maxEntries = DefaultMaxEntries
	}
	m.capacity = maxEntries
	// As many shards as possible (a power of 2), each holding at least
	// minShardEntries counters.
	m.shardBits = bits.Len(uint(max(1, min(maxEntries/minShardEntries, maxShards)))) - 1
	m.shards = make([]shard, 1<<m.shardBits)
	for i := range m.shards {
		// Spread MaxEntries exactly.
		m.shards[i].capacity = maxEntries / len(m.shards)
		if i < maxEntries%len(m.shards) {
			m.shards[i].capacity++
		}
		m.shards[i].entries = make(map[string]*entry)
	}
	m.pool.New = func() any { return new(scratch) }
	return m
}

// scratch is the working memory of one Evaluate call, reused across calls.
type scratch struct {
	// slots holds one working copy of state per distinct key of the call.
	slots []slot
	// slotOf[i] is the index in slots of hits[i]'s key.
	slotOf []int
}

// slot is the working copy of one counter during a call.
type slot struct {
	key   string
	shard *shard
	entry *entry // the stored counter, nil if none
	ok    bool   // whether the working state exists
	st    state
	// shared reports that st.runs is the entry's own, not a copy.
	shared bool
	dirty  bool  // whether a hit wrote the working state
	ttl    int64 // of the last write
}

// Evaluate implements Limiter, deciding every hit at one reading of the
// clock. Beyond Limiter's errors, it returns ctx's error, deciding
// nothing, if ctx is done; and an error wrapping ErrFull, changing
// nothing, if a counter the call would create does not fit (see Memory).
// A blocked call creates no counter, so it is decided even when full.
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
	sc.slots = sc.slots[:0]
	sc.slotOf = sc.slotOf[:0]

	// Find each hit's counter, locking every shard involved in ascending
	// order, so that concurrent calls never wait for each other in a cycle.
	var locked uint64
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
	defer func() {
		for i := range sc.slots {
			// Let the pooled scratch pin neither entries, keys, nor an
			// entry's runs.
			sl := &sc.slots[i]
			sl.entry, sl.key = nil, ""
			if sl.shared {
				sl.st.runs = nil
			}
		}
		for set := locked; set != 0; set &= set - 1 {
			m.shards[bits.TrailingZeros64(set)].mu.Unlock()
		}
	}()

	// Expired counters go first, so that a shard is full only of live
	// ones.
	now = m.now().UnixMicro()
	for set := locked; set != 0; set &= set - 1 {
		m.shards[bits.TrailingZeros64(set)].expire(now)
	}
	// A call of one hit needs no working copy: a denied or peeking step
	// leaves the stored state as it was (see step), and an allowed one is
	// committed. This spares copying a long sliding log twice per call.
	// Such a shared state is an existing counter's, which never lacks room,
	// so a refused call leaves it as it was too.
	single := len(hits) == 1
	for i := range sc.slots {
		sc.slots[i].load(single)
	}

	sc.apply(hits, decisions, now, false)
	blocked = Blocked(hits, decisions)
	if blocked {
		// Nothing is consumed but the usage hits, which, when the call has
		// others, are applied again alone.
		switch usage := countUsage(hits); {
		case usage == 0:
			for i := range hits {
				if decisions[i].Allowed {
					sl := &sc.slots[sc.slotOf[i]]
					var st state
					if sl.entry != nil {
						st = sl.entry.st
					}
					decisions[i] = peek(st, sl.entry != nil, &hits[i].Spec, now)
				}
			}
			return now, true, -1
		case usage < len(hits):
			sc.reload()
			sc.apply(hits, decisions, now, true)
		}
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

// apply steps every hit of the call on the working copies of their
// counters, in order, and sets its decision. With usageOnly, the call is
// blocked: it steps the usage hits alone (see countUsage), and the other
// allowed hits report a look at the state after them.
func (sc *scratch) apply(hits []Hit, decisions []Decision, now int64, usageOnly bool) {
	for i := range hits {
		h := &hits[i]
		sl := &sc.slots[sc.slotOf[i]]
		if usageOnly && !h.charges() {
			continue
		}
		o := step(&sl.st, sl.ok, &h.Spec, now, h.Cost, h.Refund, h.Usage)
		if o.write {
			sl.dirty, sl.ok, sl.ttl = true, o.ttl > 0, o.ttl
		}
		decisions[i] = o.decision()
	}
	if !usageOnly {
		return
	}
	for i := range hits {
		if sl := &sc.slots[sc.slotOf[i]]; !hits[i].charges() && decisions[i].Allowed {
			decisions[i] = peek(sl.st, sl.ok, &hits[i].Spec, now)
		}
	}
}

// charges reports whether h is a usage hit that changes its counter
// whatever the call's verdict: a charge or a usage refund.
func (h *Hit) charges() bool { return h.Usage && h.Cost > 0 }

// countUsage returns the number of hits that charge (Hit.charges).
func countUsage(hits []Hit) int {
	n := 0
	for i := range hits {
		if hits[i].charges() {
			n++
		}
	}
	return n
}

// reload makes every slot's working state the stored one again, as before
// the call's first hit.
func (sc *scratch) reload() {
	for i := range sc.slots {
		sl := &sc.slots[i]
		sl.load(false)
		sl.dirty, sl.ttl = false, 0
	}
}

// overflow returns the slot of a counter to create in a shard that would
// then hold more than its capacity, or nil if the call's counters fit. The
// shards are locked and rid of expired counters.
func (sc *scratch) overflow() *slot {
	for i := range sc.slots {
		sl := &sc.slots[i]
		if !sl.creates() {
			continue
		}
		// Count what the call's stores would do to this shard.
		s := sl.shard
		n := len(s.entries)
		for j := range sc.slots {
			switch o := &sc.slots[j]; {
			case o.shard != s:
			case o.creates():
				n++
			case o.dirty && !o.ok && o.entry != nil:
				n-- // deleted: its state became equivalent to none
			}
		}
		if n > s.capacity {
			return sl
		}
	}
	return nil
}

// creates reports whether storing the slot creates a counter.
func (sl *slot) creates() bool { return sl.dirty && sl.ok && sl.entry == nil }

// refuse counts a call refused for lack of room in shard i, logs it if the
// rate limit allows, and returns the error wrapping ErrFull.
func (m *Memory) refuse(now int64, i int) error {
	total := m.refused.Add(1)
	capacity := m.shards[i].capacity // constant: readable without the lock
	if l := &m.log; l.logger != nil && now >= l.next.Load() {
		l.mu.Lock()
		since := int64(0)
		if now >= l.next.Load() {
			l.next.Store(now + RefusalLogInterval.Microseconds())
			since, l.logged = max(total, l.logged)-l.logged, max(total, l.logged)
		}
		l.mu.Unlock()
		if since > 0 {
			l.logger.Warn("in-memory store full: refusing calls that need a new counter; the failure policy answers them",
				"refused", since, "refused_total", total, "shard", i, "shard_capacity", capacity,
				"max_entries", m.capacity)
		}
	}
	return fmt.Errorf("limit: %w: no room for a new counter in shard %d of %d: its share of the %d max entries is %d counters, none expired",
		ErrFull, i, len(m.shards), m.capacity, capacity)
}

// slotFor returns the slot of an earlier hit with the given key, or -1.
// Calls have few hits, so a scan beats a map.
func (sc *scratch) slotFor(earlier []Hit, key string) int {
	for i := range earlier {
		if earlier[i].Key == key {
			return sc.slotOf[i]
		}
	}
	return -1
}

// growSlot appends a slot to slots, reusing the runs buffer a previous call
// left in that position.
func growSlot(slots []slot) []slot {
	if len(slots) < cap(slots) {
		slots = slots[:len(slots)+1]
		buf := slots[len(slots)-1].st.runs[:0]
		slots[len(slots)-1] = slot{st: state{runs: buf}}
		return slots
	}
	return append(slots, slot{})
}

// load makes the stored state the working one: a copy, or, if shared, the
// stored state itself. The shard is locked.
func (sl *slot) load(shared bool) {
	buf := sl.st.runs[:0]
	e := sl.shard.entries[sl.key]
	sl.entry, sl.ok, sl.shared = e, e != nil, shared && e != nil
	switch {
	case e == nil:
		sl.st = state{runs: buf}
	case shared:
		sl.st = e.st
	default:
		sl.st = e.st
		sl.st.runs = append(buf, e.st.runs...)
	}
}

// peek returns the decision of an allowed hit in a blocked call: a hit of
// cost 0 against st (ok: whether there is any), allowed: the stored state,
// or the working one after the call's usage hits. The shard is locked; st
// is a copy, and the memory it shares is left as it is (see step).
func peek(st state, ok bool, sp *Spec, now int64) Decision {
	o := step(&st, ok, sp, now, 0, false, false)
	o.allowed, o.retryAfter, o.never = true, 0, false
	return o.decision()
}

// store makes the working state the stored one, or deletes the counter when
// the working state is equivalent to none. The shard is locked.
func (sl *slot) store(now int64) {
	s := sl.shard
	e := sl.entry
	if !sl.ok {
		if e != nil {
			s.remove(e)
		}
		return
	}
	if e == nil {
		// overflow made sure it fits.
		e = &entry{key: sl.key, index: -1}
	}
	if sl.shared {
		e.st = sl.st
	} else {
		runs := append(e.st.runs[:0], sl.st.runs...)
		e.st = sl.st
		e.st.runs = runs
	}
	e.expires = now + sl.ttl
	if e.index < 0 {
		s.entries[e.key] = e
		s.push(e)
	} else {
		s.fix(e.index)
	}
}

// shardIndex returns the shard of a key among 1<<shardBits: the top bits of
// its 64-bit FNV-1a hash after a multiplicative mix. FNV-1a alone spreads
// the last bytes of a key only into the low and middle bits, so keys that
// differ only at the end (descriptor values, counters) would share shards.
func shardIndex(key string, shardBits int) int {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
		golden = 0x9e3779b97f4a7c15 // 2^64 / φ
	)
	h := uint64(offset)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime
	}
	h ^= h >> 32
	h *= golden
	return int(h >> (64 - shardBits)) // a shift by 64 gives 0
}

// Reset forgets the counter key, whatever its spec, so that its next hit
// finds no state: a fixed window empty, a bucket full, a log without
// entries. It is what an operator asks to unblock a client at once; the
// spec is not needed to find the counter and is taken only to match the
// stores' Reset, whose keys may depend on it. It returns ctx's error,
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

// Len returns the number of counters held, after dropping expired ones.
func (m *Memory) Len() int { return m.Stats().Entries }

// Stats returns counts of m's use, after dropping expired counters. It
// locks one shard at a time, so under concurrent calls the counts are not
// of one instant.
func (m *Memory) Stats() MemoryStats {
	now := m.now().UnixMicro()
	st := MemoryStats{Capacity: m.capacity, Refused: m.refused.Load()}
	for i := range m.shards {
		s := &m.shards[i]
		s.mu.Lock()
		s.expire(now)
		st.Entries += len(s.entries)
		st.Expired += s.expired
		s.mu.Unlock()
	}
	return st
}

// expire removes the entries that expire at or before now.
func (s *shard) expire(now int64) {
	for len(s.byExpiry) > 0 && s.byExpiry[0].expires <= now {
		s.remove(s.byExpiry[0])
		s.expired++
	}
}

// remove deletes e from the shard.
func (s *shard) remove(e *entry) {
	delete(s.entries, e.key)
	i, last := e.index, len(s.byExpiry)-1
	if i != last {
		s.swap(i, last)
	}
	s.byExpiry[last] = nil
	s.byExpiry = s.byExpiry[:last]
	if i != last {
		s.fix(i)
	}
	e.index = -1
}

// The expiry heap: byExpiry[0] expires first. Written out rather than
// through container/heap, whose interface boxing would allocate per call.

func (s *shard) push(e *entry) {
	e.index = len(s.byExpiry)
	s.byExpiry = append(s.byExpiry, e)
	s.up(e.index)
}

func (s *shard) fix(i int) {
	if !s.down(i) {
		s.up(i)
	}
}

func (s *shard) up(i int) {
	h := s.byExpiry
	for i > 0 {
		p := (i - 1) / 2
		if h[p].expires <= h[i].expires {
			return
		}
		s.swap(i, p)
		i = p
	}
}

// down moves entry i towards the leaves and reports whether it moved.
func (s *shard) down(i int) bool {
	h := s.byExpiry
	start := i
	for {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if r := c + 1; r < len(h) && h[r].expires < h[c].expires {
			c = r
		}
		if h[i].expires <= h[c].expires {
			break
		}
		s.swap(i, c)
		i = c
	}
	return i > start
}

func (s *shard) swap(i, j int) {
	h := s.byExpiry
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
