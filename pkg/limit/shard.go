package limit

import (
	"container/heap"
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
	byExpiry expiryHeap
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
	heap.Remove(&s.byExpiry, e.index)
}

// expiryHeap orders a shard's entries by expiry (container/heap): [0]
// expires first.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	e.index = -1
	return e
}
