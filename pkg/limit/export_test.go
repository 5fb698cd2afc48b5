package limit

// ShardOf returns the index of the shard of m that holds key.
func ShardOf(m *Memory, key string) int { return shardIndex(key, m.shardBits) }

// Shards returns the number of shards of m.
func Shards(m *Memory) int { return len(m.shards) }
