package limit

import (
	"sync"
	"unsafe"
)

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
// through container/heap, whose calls through an interface measured
// slower on Evaluate's path.

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
