package redislimit

import (
	"context"
	"errors"
	"sync"

	"github.com/floodgate/floodgate/pkg/limit"
)

// runGroup decides hits, all of group g, in one atomic call (all-or-nothing
// within itself), fills decisions and returns that call's verdict. The hits
// may be a compensation: refunds and peeks of hits the group admitted.
type runGroup func(ctx context.Context, g int, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error)

// evaluateGroups decides hits as one all-or-nothing call although no single
// atomic call can hold them all: the slots of a Redis Cluster, or the two
// Redis of a Split. groups partitions the indices of hits (each in exactly
// one group, ascending within it); run decides one group, and the groups
// run concurrently. A group sees only some of the request's quotas, so
// its Quota hits go to it as Advisory ones (consuming when allowed, never
// blocking it), and the request's verdict is decided once every group
// answered (limit.Blocked over all the decisions, quotas included), and
// returned. If the request is blocked or a
// group fails, every group that consumed gets its consumption back by a second call to run that refunds
// it, and peeks (cost 0) at its allowed hits so that their decisions, like
// those of the denied groups, describe the counters without the request.
//
// Between the two calls, for about one round trip, another request may see
// those counters as consumed; a refund never gives back more than was
// taken. Refund hits of a request denied by another group are not undone,
// nor are usage hits (limit.Hit.Usage), which every group applies whatever
// the verdict, and a group whose call failed may or may not have consumed.
// The error joins those of every failed call, compensations included.
func evaluateGroups(ctx context.Context, hits []limit.Hit, decisions []limit.Decision, groups [][]int, run runGroup) (blocked bool, err error) {
	type result struct {
		hits      []limit.Hit
		decisions []limit.Decision
		blocked   bool // the group's own verdict: it consumed nothing
		err       error
	}
	results := make([]result, len(groups))
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

	// Give back what the groups that committed consumed: every group that
	// answered without a denial wrote its hits. Each group's compensation
	// goes where its hits went, refunds first, then peeks. A compensation
	// is worth finishing once the request is decided, so it is detached
	// from the caller's cancellation.
	compCtx := context.WithoutCancel(ctx)
	compErrs := make([]error, len(groups))
	for g, idx := range groups {
		r := &results[g]
		if r.err != nil || r.blocked {
			continue
		}
		var comp []limit.Hit
		for j := range r.hits {
			if h := &r.hits[j]; h.Cost > 0 && !h.Refund && !h.Usage && r.decisions[j].Allowed {
				back := r.hits[j]
				back.Refund = true
				comp = append(comp, back)
			}
		}
		refunds := len(comp)
		var peeked []int // indices in hits of the peeks, in comp's order
		for j, i := range idx {
			if r.decisions[j].Allowed && !(hits[i].Usage && hits[i].Cost > 0) {
				comp = append(comp, limit.Hit{Key: hits[i].Key, Spec: hits[i].Spec})
				peeked = append(peeked, i)
			}
		}
		if len(comp) == 0 {
			continue
		}
		wg.Go(func() {
			out := make([]limit.Decision, len(comp))
			if _, compErrs[g] = run(compCtx, g, comp, out); compErrs[g] != nil {
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
	if err := errors.Join(append(errs, compErrs...)...); err != nil {
		return false, err
	}
	return blocked, nil
}
