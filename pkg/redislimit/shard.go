package redislimit

import "context"

// Shard names the Redis master that holds counter's key, as the Cluster
// client's slot map has it: the node an Evaluate call with that counter
// goes to. It is "" on a single node or Sentinel, which have one master,
// and when the slot map cannot be had. A caller that sends many counters
// at once (RLQS's flushes) groups its calls by it, so that one failing
// master fails only the calls of its own counters.
func (l *Limiter) Shard(ctx context.Context, counter string) string {
	if l.cluster == nil {
		return ""
	}
	c, err := l.cluster.MasterForKey(ctx, Key(l.opts.KeyPrefix, counter))
	if err != nil {
		return ""
	}
	return c.Options().Addr
}
