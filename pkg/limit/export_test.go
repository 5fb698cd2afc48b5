package limit

// ShardOf returns the index of the shard of m that holds key.
func ShardOf(m *Memory, key string) int { return shardIndex(key, m.shardBits) }

// Shards returns the number of shards of m.
func Shards(m *Memory) int { return len(m.shards) }

const (
	MaxSlidingLog      = maxSlidingLog
	RefusalLogInterval = refusalLogInterval
)

// Takes reports whether a takes the parameter named p.
func (a Algorithm) Takes(p string) bool {
	for i := range params {
		if params[i].name == p {
			return a.takes(param(i))
		}
	}
	return false
}

var (
	ErrInvalidMode  = errInvalidMode
	ErrNegativeCost = errNegativeCost
)

// MemoryStats is what the tests check of a Memory's use.
type MemoryStats struct {
	Entries, Capacity int
	Refused, Expired  int64
}

func (m *Memory) Stats() MemoryStats {
	entries, expired := m.count()
	return MemoryStats{Entries: entries, Capacity: m.Cap(), Refused: m.Refused(), Expired: expired}
}
