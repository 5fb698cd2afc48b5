package redislimit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one Redis server with its circuit breaker: the home node (a
// single node, Sentinel's master, or a Cluster's slot map), or a Cluster
// master, so that a master failing fails only the calls that need it.
type node struct {
	addr        string   // "" for the home node
	breaker     *breaker // nil when disabled
	lastFailure atomic.Pointer[failure]
}

// failure is a failure of Redis and when it happened.
type failure struct {
	err error
	at  time.Time
}

// nodeSet is a Limiter's nodes: the home node, and a Cluster's masters,
// added as calls meet them and dropped by a Probe once they serve no slot.
type nodeSet struct {
	opts breakerOptions // valid: newNodeSet checked them
	home *node

	mu     sync.RWMutex
	byAddr map[string]*node
	slots  map[string]string // master address → its slot ranges, from the latest Probe
}

func newNodeSet(o breakerOptions) (*nodeSet, error) {
	b, err := newBreaker(o)
	if err != nil {
		return nil, err
	}
	return &nodeSet{opts: o, home: &node{breaker: b}, byAddr: make(map[string]*node)}, nil
}

// get returns the node of the master at addr, adding it if new.
func (s *nodeSet) get(addr string) *node {
	s.mu.RLock()
	n := s.byAddr[addr]
	s.mu.RUnlock()
	if n != nil {
		return n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n = s.byAddr[addr]; n == nil {
		b, _ := newBreaker(s.opts) // the options passed newNodeSet
		n = &node{addr: addr, breaker: b}
		s.byAddr[addr] = n
	}
	return n
}

// keep drops the masters not in slots (address → slot ranges).
func (s *nodeSet) keep(slots map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for addr := range s.byAddr {
		if _, ok := slots[addr]; !ok {
			delete(s.byAddr, addr)
		}
	}
	s.slots = slots
}

// all returns the home node, then the masters by address.
func (s *nodeSet) all() []*node {
	s.mu.RLock()
	defer s.mu.RUnlock()
	ns := make([]*node, 0, 1+len(s.byAddr))
	for _, n := range s.byAddr {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, func(a, b *node) int { return strings.Compare(a.addr, b.addr) })
	return append([]*node{s.home}, ns...)
}

// Probe loads the Lua code on every node (every master of a Cluster),
// which needs the connection, TLS, credentials and permissions right. A
// node's failure opens its circuit breaker at once, its success closes it.
// A failure is an error wrapping ErrStore naming the nodes that failed.
// Callers probe at start and while Healthy is false.
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

// probeCluster probes each master of a Cluster on its own: the slot map
// and the loads share the probe's time, each master its own part, so that
// one that does not answer never spends the others'. The home node (the
// slot map) fails only when no master answers.
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

// clusterSlots returns each master's slot ranges by address, as
// "0-5460,10923".
func (l *Limiter) clusterSlots(ctx context.Context) (map[string]string, error) {
	slots, err := l.cluster.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, err
	}
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	out := make(map[string]string)
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		r := strconv.Itoa(s.Start)
		if s.End != s.Start {
			r += "-" + strconv.Itoa(s.End)
		}
		if addr := s.Nodes[0].Addr; out[addr] == "" {
			out[addr] = r
		} else {
			out[addr] += "," + r
		}
	}
	return out, nil
}

// loadOutcome is how loading the Lua code went on one Cluster master.
type loadOutcome struct {
	addr string
	err  error
}

// loadEach loads the Lua code on every master of a Cluster, as a library
// unless the Limiter runs it as a script, each within perNode whatever
// ctx's deadline, and returns each master's outcome. An undecided mode is
// decided by the masters that answered: a refusal anywhere means EVALSHA.
// The error is for want of a slot map.
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

// NodeHealth is the health of one Redis node a Limiter calls.
type NodeHealth struct {
	// Addr is the host:port of a Cluster master, or "" for the home node:
	// the single node, Sentinel's master, or a Cluster's slot map.
	Addr string
	// Slots are a Cluster master's hash slots as of the latest Probe
	// ("0-5460,10923").
	Slots string
	// Breaker is the state of the node's circuit breaker: "closed",
	// "open" or "probing"; calls that need it fail at once unless closed.
	Breaker string
	// LastFailure is the node's latest failure, seen by a call or a Probe,
	// and LastFailureAt when; nil if none ever did. It stays after recovery.
	LastFailure   error
	LastFailureAt time.Time
}

// Healthy reports whether the node's breaker is closed.
func (h NodeHealth) Healthy() bool { return h.Breaker == breakerClosed.String() }

// Nodes returns the health of the home node, then of each Cluster master
// met by a call or the latest Probe, by address.
func (l *Limiter) Nodes() []NodeHealth {
	ns := l.nodes.all()
	l.nodes.mu.RLock()
	defer l.nodes.mu.RUnlock()
	out := make([]NodeHealth, len(ns))
	for i, n := range ns {
		out[i] = NodeHealth{Addr: n.addr, Slots: l.nodes.slots[n.addr], Breaker: n.breaker.stateOf().String()}
		if f := n.lastFailure.Load(); f != nil {
			out[i].LastFailure, out[i].LastFailureAt = f.err, f.at
		}
	}
	return out
}

// Healthy reports whether every node's circuit breaker is closed; Nodes
// says which is not.
func (l *Limiter) Healthy() bool {
	return !slices.ContainsFunc(l.nodes.all(), func(n *node) bool { return n.breaker.stateOf() != breakerClosed })
}

// LastFailure returns the latest failure of any node, seen by a call or a
// Probe, and when; nil if none ever did. It stays after recovery. A
// canceled call or a request's own script error is no failure.
func (l *Limiter) LastFailure() (at time.Time, err error) {
	var last *failure
	for _, n := range l.nodes.all() {
		if f := n.lastFailure.Load(); f != nil && (last == nil || f.at.After(last.at)) {
			last = f
		}
	}
	if last == nil {
		return time.Time{}, nil
	}
	return last.at, last.err
}

// report tells n's breaker and health how a call to it under ctx ended.
func (l *Limiter) report(ctx context.Context, n *node, probe bool, err error) {
	l.noteFailure(ctx, n, err)
	n.breaker.done(probe, outcomeOf(ctx, err))
}

// noteFailure records err, met under ctx, as n's latest failure if it is
// one.
func (l *Limiter) noteFailure(ctx context.Context, n *node, err error) {
	if outcomeOf(ctx, err) == callFailed && !errors.Is(err, errCircuitOpen) {
		n.lastFailure.Store(&failure{err: err, at: time.Now()})
	}
}

// force records a probe's verdict on n (see breaker.force).
func (l *Limiter) force(ctx context.Context, n *node, err error) {
	l.noteFailure(ctx, n, err)
	if o := outcomeOf(ctx, err); o != callUnknown {
		n.breaker.force(o == callFailed)
	}
}

// nodeError names the Cluster master a call failed on.
func nodeError(n *node, err error) error {
	if err == nil || n.addr == "" {
		return err
	}
	return fmt.Errorf("node %s: %w", n.addr, err)
}
