package redislimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// evaluateCluster decides hits whose keys may live in different slots. A
// script can only touch keys of one slot, so hits are grouped by slot and
// each group is one script call, all-or-nothing within itself, the groups
// running concurrently. If any group denies, the groups that consumed get
// their consumption back by a second call that refunds it.
func (l *Limiter) evaluateCluster(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) error {
	groups := groupBySlot(l.opts.KeyPrefix, hits)
	if len(groups) == 1 {
		return l.run(ctx, clock, hits, decisions)
	}
	type result struct {
		hits      []limit.Hit
		decisions []limit.Decision
		err       error
	}
	results := make([]result, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		r := &results[g]
		r.hits = make([]limit.Hit, len(idx))
		for j, i := range idx {
			r.hits[j] = hits[i]
		}
		r.decisions = make([]limit.Decision, len(idx))
		wg.Go(func() { r.err = l.run(ctx, clock, r.hits, r.decisions) })
	}
	wg.Wait()

	var errs []error
	anyDenied := false
	for g, idx := range groups {
		r := &results[g]
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		for j, i := range idx {
			decisions[i] = r.decisions[j]
			anyDenied = anyDenied || denied(&r.hits[j], &r.decisions[j])
		}
	}
	if len(errs) == 0 && !anyDenied {
		return nil
	}

	// Give back what the groups that committed consumed: every group that
	// answered without a denial wrote its hits. Then peek (cost 0) at every
	// allowed hit of those groups, so that their decisions, like those of
	// the denied groups, describe the counters without the request.
	var comp []limit.Hit
	var peeked []int // indices in hits of the peeks, in comp's order
	for g, idx := range groups {
		r := &results[g]
		if r.err != nil || groupDenied(r.hits, r.decisions) {
			continue
		}
		for j := range r.hits {
			if r.hits[j].Cost > 0 && !r.hits[j].Refund && r.decisions[j].Allowed {
				back := r.hits[j]
				back.Refund = true
				comp = append(comp, back)
			}
		}
		for j, i := range idx {
			if r.decisions[j].Allowed {
				peeked = append(peeked, i)
			}
		}
	}
	refunds := len(comp)
	for _, i := range peeked {
		comp = append(comp, limit.Hit{Key: hits[i].Key, Spec: hits[i].Spec})
	}
	compDecisions := make([]limit.Decision, len(comp))
	if err := l.compensate(context.WithoutCancel(ctx), clock, comp, compDecisions); err != nil {
		errs = append(errs, err)
	} else {
		for p, i := range peeked {
			d := compDecisions[refunds+p]
			d.Allowed, d.RetryAfter, d.Never = true, 0, false
			decisions[i] = d
		}
	}
	return errors.Join(errs...)
}

func groupDenied(hits []limit.Hit, decisions []limit.Decision) bool {
	for j := range hits {
		if denied(&hits[j], &decisions[j]) {
			return true
		}
	}
	return false
}

// compensate evaluates hits (refunds, then peeks) slot by slot, in order
// within each slot, and sets decisions. Its caller detaches ctx from
// cancellation: a compensation is worth finishing once the request is
// decided.
func (l *Limiter) compensate(ctx context.Context, clock time.Time, hits []limit.Hit, decisions []limit.Decision) error {
	if len(hits) == 0 {
		return nil
	}
	groups := groupBySlot(l.opts.KeyPrefix, hits)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		wg.Go(func() {
			part := make([]limit.Hit, len(idx))
			for j, i := range idx {
				part[j] = hits[i]
			}
			out := make([]limit.Decision, len(part))
			if errs[g] = l.run(ctx, clock, part, out); errs[g] == nil {
				for j, i := range idx {
					decisions[i] = out[j]
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
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
