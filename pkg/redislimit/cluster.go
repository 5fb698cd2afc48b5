package redislimit

import (
	"context"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// evaluateCluster decides hits whose keys may live in different slots. A
// script can only touch keys of one slot, so hits are grouped by slot and
// each group is one script call; evaluateGroups makes the groups one
// all-or-nothing call.
func (l *Limiter) evaluateCluster(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) error {
	groups := groupBySlot(l.opts.KeyPrefix, hits)
	if len(groups) == 1 {
		return l.run(ctx, clock, hits, decisions)
	}
	return evaluateGroups(ctx, hits, decisions, groups, func(ctx context.Context, _ int, hits []limit.Hit, decisions []limit.Decision) error {
		return l.run(ctx, clock, hits, decisions)
	})
}

// groupBySlot returns the indices of hits grouped by the Cluster slot of
// their keys, groups in order of first appearance, indices ascending.
func groupBySlot(prefix string, hits []limit.Hit) [][]int {
	var groups [][]int
	slots := make(map[uint16]int, len(hits))
	for i := range hits {
		s := Slot(prefix, hits[i].Key)
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
