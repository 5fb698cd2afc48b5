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
)

// node is one Redis server as a Limiter's circuit breaker and health see
// it. A single node, or Sentinel's master whatever address Sentinel names,
// is the Limiter's home node. A Cluster has a node per master, so that one
// master failing fails only the calls that need it, and its home node
// stands for the cluster as a whole: it fails when no node can say which
// master serves a slot.
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

// nodeSet is a Limiter's nodes: the home node, and a Cluster's masters by
// address, added as calls meet them and dropped by a Probe once they no
// longer serve slots.
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

// get returns the node of the master at addr, with a closed breaker if it
// is new.
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

// keep drops the masters not in slots, which maps each master serving
// slots to their ranges.
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

// NodeHealth is the health of one Redis node a Limiter calls.
type NodeHealth struct {
	// Addr is the host:port of a Cluster master, or "" for the Limiter's
	// home node: the single node, Sentinel's master, or a Cluster's slot
	// map, which fails when no node says where a slot is served.
	Addr string
	// Slots are the hash slots a Cluster master serves as of the latest
	// Probe, as ranges ("0-5460,10923"); empty otherwise.
	Slots string
	// Breaker is the state of the node's circuit breaker: "closed",
	// "open" or "probing". Calls that need the node fail at once unless it
	// is closed.
	Breaker string
	// LastFailure is the latest failure of the node seen by a call or a
	// Probe, and LastFailureAt when it happened; nil if none ever did. It
	// stays after the node recovers.
	LastFailure   error
	LastFailureAt time.Time
}

// Healthy reports whether the node's breaker is closed.
func (h NodeHealth) Healthy() bool { return h.Breaker == breakerClosed.String() }

// Nodes returns the health of the Limiter's nodes: the home node first,
// then, on a Cluster, each master met by a call or listed by the latest
// Probe, by address.
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

// Healthy reports whether every node's circuit breaker is closed, so that
// every call goes to Redis; Nodes says which node is not. A failed Probe
// opens its node's breaker, so a Redis that cannot be reached at start is
// reported before any request meets it.
func (l *Limiter) Healthy() bool {
	for _, n := range l.nodes.all() {
		if n.breaker.stateOf() != breakerClosed {
			return false
		}
	}
	return true
}

// LastFailure returns the latest failure of Redis seen by a call or a
// Probe on any node, and when it happened; nil if none ever did. It stays
// after Redis recovers, so that a report can say why Redis was last
// unhealthy. A canceled call or a request's own script error is no
// failure.
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

// noteFailure records err, met by a call to n under ctx, as n's latest
// failure if it is one.
func (l *Limiter) noteFailure(ctx context.Context, n *node, err error) {
	if outcomeOf(ctx, err) == callFailed && !errors.Is(err, errCircuitOpen) {
		n.lastFailure.Store(&failure{err: err, at: time.Now()})
	}
}

// force records a probe's verdict on n: a failure opens its breaker at
// once, a success closes it.
func (l *Limiter) force(ctx context.Context, n *node, err error) {
	l.noteFailure(ctx, n, err)
	switch outcomeOf(ctx, err) {
	case callOK:
		n.breaker.force(false)
	case callFailed:
		n.breaker.force(true)
	}
}

// slotRanges formats a master's slot ranges as "0-5460,10923".
func slotRanges(ranges [][2]int64) string {
	slices.SortFunc(ranges, func(a, b [2]int64) int { return int(a[0] - b[0]) })
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(r[0], 10))
		if r[1] != r[0] {
			b.WriteByte('-')
			b.WriteString(strconv.FormatInt(r[1], 10))
		}
	}
	return b.String()
}

// nodeError names the Cluster master a call failed on.
func nodeError(n *node, err error) error {
	if err == nil || n.addr == "" {
		return err
	}
	return fmt.Errorf("node %s: %w", n.addr, err)
}
