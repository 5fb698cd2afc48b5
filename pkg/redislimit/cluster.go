package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// evaluateCluster decides hits whose keys may live in different slots, a
// call per slot, all-or-nothing (evaluateGroups).
func (l *Limiter) evaluateCluster(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	groups := groupBySlot(l.opts.KeyPrefix, hits)
	if len(groups) == 1 {
		return l.runSlot(ctx, clock, hits, decisions)
	}
	return evaluateGroups(ctx, hits, decisions, groups, func(ctx context.Context, _ int, hits []limit.Hit, decisions []limit.Decision) (bool, error) {
		return l.runSlot(ctx, clock, hits, decisions)
	})
}

// runSlot decides hits, all in one slot, on its master, through its
// circuit breaker. The error names the master.
func (l *Limiter) runSlot(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	n, err := l.masterOf(ctx, hits[0].Key)
	if err != nil {
		return false, fmt.Errorf("redislimit: evaluate %d hits: %w", len(hits), err)
	}
	ok, probe := n.breaker.admit()
	if !ok {
		return false, fmt.Errorf("redislimit: evaluate %d hits on node %s: %w", len(hits), n.addr, errCircuitOpen)
	}
	blocked, err = l.run(ctx, clock, hits, decisions)
	l.report(ctx, n, probe, err)
	return blocked, nodeError(n, err)
}

// masterOf returns the node of the master serving counter's slot. It
// fails while no node gives a slot map, at once while the home node's
// breaker is open.
func (l *Limiter) masterOf(ctx context.Context, counter string) (*node, error) {
	home := l.nodes.home
	ok, probe := home.breaker.admit()
	if !ok {
		return nil, fmt.Errorf("the cluster's slot map: %w", errCircuitOpen)
	}
	c, err := l.cluster.MasterForKey(ctx, Key(l.opts.KeyPrefix, counter))
	l.report(ctx, home, probe, err)
	if err != nil {
		return nil, fmt.Errorf("%w: the cluster's slot map: %w", ErrStore, err)
	}
	return l.nodes.get(c.Options().Addr), nil
}

// groupBySlot returns the indices of hits grouped by their keys' slot.
func groupBySlot(prefix string, hits []limit.Hit) [][]int {
	var groups [][]int
	slots := make(map[uint16]int, len(hits))
	for i := range hits {
		s := slot(prefix, hits[i].Key)
		g, ok := slots[s]
		if !ok {
			g = len(groups)
			slots[s] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return groups
}

// Shard names the Redis Cluster master that holds counter; "" on a single
// node or Sentinel, or without a slot map. A caller that sends many
// counters at once groups its calls by it, so that a failing master fails
// only its own counters'.
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
