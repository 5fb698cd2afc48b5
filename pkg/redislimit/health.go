package redislimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Probe checks that Redis can run the Lua code: it loads it on every node
// (every master of a Cluster) as a function library (FUNCTION LOAD), or as
// a script (SCRIPT LOAD) if Redis runs no functions for floodgate, which
// needs the connection, TLS, credentials and the permission to run scripts
// to be right. It decides how calls run the code if no call has yet (see
// Options.Logger), and loads the library on Cluster nodes added since.
//
// Each node's outcome goes to that node's circuit breaker as a call's
// would, except that a failure opens the breaker at once, however few
// failures came before, and a success closes it: on a Cluster, a master
// that fails the probe fails the calls on its slots at once, and only
// those. A failure is an error wrapping ErrStore that names the nodes that
// failed. Callers probe at start, and while a breaker is open, so that
// health follows Redis without waiting for requests.
func (l *Limiter) Probe(ctx context.Context) error {
	if l.cluster != nil {
		return l.probeCluster(ctx)
	}
	var err error
	if l.fn.mode.Load() != modeScript {
		err = l.decide(ctx)
	}
	if err == nil && l.fn.mode.Load() == modeScript {
		err = loadScript(ctx, l.client)
	}
	l.force(ctx, l.nodes.home, err)
	if err != nil {
		return fmt.Errorf("redislimit: probe: %w: %w", ErrStore, err)
	}
	return nil
}

// probeCluster probes each master of a Cluster on its own. The slot map
// (CLUSTER SLOTS, from any node) and the loads share the probe's time
// (ctx's deadline, else the call Timeout), each master its own part: a
// master that does not answer (frozen, partitioned) spends its own time,
// never the time of the live masters, which would otherwise fail their
// loads on an expired context and be forced open for a fault not theirs.
// The home node (the slot map) fails only when no master answers, as
// the calls' slot lookups, served from the client's map, fail only then.
func (l *Limiter) probeCluster(ctx context.Context) error {
	budget := l.opts.Timeout
	if dl, ok := ctx.Deadline(); ok {
		budget = time.Until(dl)
	}
	sctx, cancel := context.WithTimeout(ctx, budget/2)
	slots, slotsErr := l.clusterSlots(sctx)
	cancel()
	outcomes, err := l.loadEach(ctx, budget/2)
	if err != nil {
		l.force(ctx, l.nodes.home, err)
		return fmt.Errorf("redislimit: probe: %w: the cluster's slot map: %w", ErrStore, err)
	}
	var errs []error
	answered := false
	for _, o := range outcomes {
		n := l.nodes.get(o.addr)
		l.force(ctx, n, o.err)
		if o.err != nil {
			errs = append(errs, nodeError(n, o.err))
		}
		answered = answered || o.err == nil
	}
	switch {
	case slotsErr == nil:
		l.force(ctx, l.nodes.home, nil)
		l.nodes.keep(slots)
	case answered:
		l.force(ctx, l.nodes.home, nil)
	default:
		l.force(ctx, l.nodes.home, slotsErr)
		errs = append(errs, fmt.Errorf("the cluster's slot map: %w", slotsErr))
	}
	if len(errs) > 0 {
		return fmt.Errorf("redislimit: probe: %w: %w", ErrStore, errors.Join(errs...))
	}
	return nil
}

// clusterSlots returns each master's slot ranges by address.
func (l *Limiter) clusterSlots(ctx context.Context) (map[string]string, error) {
	slots, err := l.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	ranges := make(map[string][][2]int64)
	for _, s := range slots {
		if len(s.Nodes) > 0 {
			addr := s.Nodes[0].Addr
			ranges[addr] = append(ranges[addr], [2]int64{int64(s.Start), int64(s.End)})
		}
	}
	out := make(map[string]string, len(ranges))
	for addr, r := range ranges {
		out[addr] = slotRanges(r)
	}
	return out, nil
}

// loadOutcome is how loading the Lua code went on one Cluster master.
type loadOutcome struct {
	addr string
	err  error
}

// loadEach loads the Lua code on every master of a Cluster, as a library
// unless the Limiter runs it as a script, and returns each master's
// outcome, each master given perNode from when its load starts, whatever
// ctx's deadline (the client's own reload of its slot map, which may wait
// on a master that does not answer, spends ctx's). It decides the mode if
// undecided, from the masters that answered: a refusal anywhere means
// EVALSHA; a master that could not be reached does not hold the decision
// back (it gets the library when a call finds it missing there). The
// error is for want of a slot map.
func (l *Limiter) loadEach(ctx context.Context, perNode time.Duration) ([]loadOutcome, error) {
	script := l.fn.mode.Load() == modeScript
	var mu sync.Mutex
	var outcomes []loadOutcome
	err := l.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), perNode)
		defer cancel()
		var err error
		if script {
			err = loadScript(ctx, c)
		} else {
			err = loadLibrary(ctx, c)
		}
		mu.Lock()
		outcomes = append(outcomes, loadOutcome{addr: c.Options().Addr, err: err})
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	if script {
		return outcomes, nil
	}
	loaded := false
	for _, o := range outcomes {
		if o.err != nil && l.fallBack(o.err) {
			return l.loadEach(ctx, perNode) // as scripts, this time
		}
		loaded = loaded || o.err == nil
	}
	if loaded {
		l.useFunctions()
	}
	return outcomes, nil
}

// loadScript loads the script on c (SCRIPT LOAD), for EVALSHA.
func loadScript(ctx context.Context, c redis.Scripter) error {
	return evaluateScript.Load(ctx, c).Err()
}
