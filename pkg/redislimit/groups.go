package redislimit

import (
	"context"
	"errors"
	"sync"

	"github.com/floodgate/floodgate/pkg/limit"
)

// runGroup decides hits, all of group g, in one atomic call: the request's
// or a compensation.
type runGroup func(ctx context.Context, g int, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error)

// groupResult is one group's call; blocked means it consumed nothing.
type groupResult struct {
	hits      []limit.Hit
	decisions []limit.Decision
	blocked   bool
	err       error
}

// evaluateGroups decides hits all-or-nothing although no atomic call holds
// them all (a Cluster's slots, a Split's two Redis). groups partitions the
// indices of hits, ascending; run decides one group, the groups
// concurrently. Quota hits go as Advisory, since a group sees only part of
// a quota, and the verdict is decided once every group answered. If the
// request is blocked or a group failed, the groups that consumed get it
// back (compensate). The error joins every failed call's.
func evaluateGroups(ctx context.Context, hits []limit.Hit, decisions []limit.Decision, groups [][]int, run runGroup) (blocked bool, err error) {
	results := make([]groupResult, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		r := &results[g]
		r.hits = make([]limit.Hit, len(idx))
		for j, i := range idx {
			r.hits[j] = hits[i]
			if r.hits[j].Mode == limit.Quota {
				r.hits[j].Mode = limit.Advisory
			}
		}
		r.decisions = make([]limit.Decision, len(idx))
		wg.Go(func() { r.blocked, r.err = run(ctx, g, r.hits, r.decisions) })
	}
	wg.Wait()

	var errs []error
	for g, idx := range groups {
		r := &results[g]
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		for j, i := range idx {
			decisions[i] = r.decisions[j]
		}
	}
	blocked = len(errs) == 0 && limit.Blocked(hits, decisions)
	if len(errs) == 0 && !blocked {
		return false, nil
	}
	errs = append(errs, compensate(ctx, hits, decisions, groups, results, run)...)
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	return blocked, nil
}

// compensate gives back what the groups that answered without a denial
// consumed, by a second call per group that refunds its allowed hits and
// peeks at them, so that their decisions describe the counters without
// the request; it returns those calls' errors. Refund and usage hits are
// not undone, nor a failed group's call, which may have consumed.
func compensate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision, groups [][]int,
	results []groupResult, run runGroup) []error {
	// Worth finishing once the request is decided, whatever the caller.
	ctx = context.WithoutCancel(ctx)
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for g, idx := range groups {
		r := &results[g]
		if r.err != nil || r.blocked {
			continue
		}
		comp, refunds, peeked := compensation(hits, idx, r)
		if len(comp) == 0 {
			continue
		}
		wg.Go(func() {
			out := make([]limit.Decision, len(comp))
			if _, errs[g] = run(ctx, g, comp, out); errs[g] != nil {
				return
			}
			for p, i := range peeked {
				d := out[refunds+p]
				d.Allowed, d.RetryAfter, d.Never = true, 0, false
				decisions[i] = d
			}
		})
	}
	wg.Wait()
	return errs
}

// compensation returns the hits that give back what group r (hits at idx)
// consumed: a refund per allowed consuming hit, then a peek per allowed
// hit; how many refunds lead, and the index in hits of each peek.
func compensation(hits []limit.Hit, idx []int, r *groupResult) (comp []limit.Hit, refunds int, peeked []int) {
	for j := range r.hits {
		if h := &r.hits[j]; h.Cost > 0 && !h.Refund && !h.Usage && r.decisions[j].Allowed {
			back := *h
			back.Refund = true
			comp = append(comp, back)
		}
	}
	refunds = len(comp)
	for j, i := range idx {
		if r.decisions[j].Allowed && !(hits[i].Usage && hits[i].Cost > 0) {
			comp = append(comp, limit.Hit{Key: hits[i].Key, Spec: hits[i].Spec})
			peeked = append(peeked, i)
		}
	}
	return comp, refunds, peeked
}
