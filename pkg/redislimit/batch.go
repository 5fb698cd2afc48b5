package redislimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/internal/tracing"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Defaults of BatchOptions.
const (
	DefaultBatchRequests   = 64
	DefaultBatchInFlight   = 2
	DefaultBatchBusyWindow = 150 * time.Microsecond
)

// maxBatchArgs bounds the arguments of one batched script call (64
// requests of one hit take 320; at most about 130 hits), so that one call
// keeps Redis, which runs scripts one at a time, busy for well under a
// millisecond (64 one-hit requests took 0.3 to 0.5 ms on a loaded 2-core
// machine). A single call bigger than that is still sent, alone.
const maxBatchArgs = 400

// BatchOptions configures how a Limiter shares Redis round trips among
// concurrent Evaluate calls on a single node or Sentinel (Cluster calls are
// not batched). A call is sent at once, alone, while fewer than
// MaxInFlight round trips are outstanding; otherwise it waits for one of
// them to end and leaves with up to MaxRequests-1 other waiting calls in
// one script call. Each call in a batch is decided all-or-nothing on its
// own, exactly as if it were sent alone: one call's denial or error never
// affects another's. The zero value enables batching with the defaults.
//
// A call that finds a round trip free while another is outstanding does
// not leave at once: it waits up to BusyWindow for others to join it, or
// until MaxRequests calls wait, and they leave together. Under load, where
// a round trip is nearly always outstanding, a call that took the free one
// at once would mostly travel alone: half of all round trips carried one
// request at 64 callers, each a script call of its own in Redis's CPU.
// With no round trip outstanding a call leaves at once, so that an idle
// server adds no latency; and once lonelyWindows windows in a row end
// without company, calls leave at once until one finds every round trip
// taken, so that a server at a few thousand calls a second, where company
// seldom comes within the window, does not wait for it: at 1,000 calls a
// second waiting cost about 35 µs of server CPU per call, and 0.1-0.2 ms
// at p90 (docs/benchmarks.md). A Window makes every call that finds a round
// trip free wait, outstanding or not. Calls that find every round trip
// taken wait for one, and leave as soon as one ends.
//
// Every call ends within Options.Timeout of its start, or at its
// context's deadline if that is sooner, queued or sent, whether or not its
// context has a deadline: the batcher ends the calls it holds past theirs
// with one timer of its own (see Limiter.Evaluate). A batch's round
// trip has the latest of its calls' deadlines; each caller still returns
// as soon as its own context ends or its deadline passes. Context values
// of the callers do not reach go-redis hooks for a batch of several calls.
type BatchOptions struct {
	// Disabled sends every call in a round trip of its own, at once.
	Disabled bool
	// MaxRequests bounds the calls in one round trip; 0 means
	// DefaultBatchRequests.
	MaxRequests int
	// MaxInFlight bounds the round trips a Limiter has outstanding at
	// once; 0 means DefaultBatchInFlight. While they are all outstanding,
	// calls wait for one to end.
	MaxInFlight int
	// Window is how long a call that finds a round trip free waits for
	// other calls to share it, whether or not another is outstanding; 0
	// leaves it to BusyWindow. It is the reference server's
	// REDIS_PIPELINE_WINDOW.
	Window time.Duration
	// BusyWindow is how long a call that finds a round trip free while
	// another is outstanding waits for other calls to share it, when Window
	// is 0 and such waits draw company (see above); 0 means
	// DefaultBatchBusyWindow, a negative value sends it at once.
	BusyWindow time.Duration
}

// States of a batched call.
const (
	callQueued    int32 = iota // waiting in the queue
	callSent                   // in a batch on its way to Redis
	callDone                   // answered: err, blocked and decisions set, done closed
	callAbandoned              // the caller left (its context ended)
)

// call is an Evaluate call waiting for, or in, a batch. Its keys and args
// are built by the caller before it is queued, so a batch never reads the
// caller's hits, which the caller owns again once it returns.
type call struct {
	ctx       context.Context
	keys      []string
	args      []any
	decisions []limit.Decision
	probe     bool // the breaker's probe
	// deadline is when the call ends at the latest: its start plus the
	// Limiter's Timeout, or its context's deadline when sooner.
	deadline time.Time
	state    atomic.Int32
	sent     bool  // set before done is closed: the call went to Redis
	blocked  bool  // set before done is closed: the script's verdict
	err      error // set before done is closed
	done     chan struct{}
}

// batcher queues calls while MaxInFlight round trips are outstanding.
type batcher struct {
	l           *Limiter
	maxRequests int
	maxInFlight int

	window     time.Duration // Window
	busyWindow time.Duration // BusyWindow, 0 when off

	mu       sync.Mutex
	inFlight int
	queue    []*call
	// gathering is set while a call waits out the window in a round trip
	// it holds (see gather); calls that come meanwhile queue for it, and
	// joined counts them.
	gathering bool
	joined    int
	// lonely counts the windows in a row that ended without company; from
	// lonelyWindows on, BusyWindow is not waited. A call that finds every
	// round trip taken resets it.
	lonely int
	// full wakes the gathering call before the window ends once
	// maxRequests calls wait; one token at most.
	full chan struct{}
	// windowTimer times the window; only the gathering call uses it.
	windowTimer *time.Timer

	// senders hands a batch to a sender goroutine waiting for one (see
	// sender).
	senders chan []*call

	// timeout is the Limiter's Options.Timeout: a call ends within it of
	// its start, queued or sent, though its context set no deadline (see
	// expire).
	timeout time.Duration
	// watched lists the calls queued since the last expiry whose context
	// ends later than their deadline, in the order they came; expiry fires
	// at the first undecided one's deadline. One timer for the queue, not
	// one per call: a timer and a context per request were 7 % of the
	// server's CPU under load.
	watched []*call
	expiry  *time.Timer
	armed   bool // expiry is set
}

// senderIdle is how long a sender goroutine waits for another batch before
// it ends.
const senderIdle = time.Second

// lonelyWindows is how many busy windows in a row must end without company
// before calls stop waiting for it: at a few thousand calls a second most
// windows do, under load a few, and one alone would send calls off alone
// until the next call that queues.
const lonelyWindows = 2

func newBatcher(l *Limiter, o BatchOptions) (*batcher, error) {
	if o.Disabled {
		return nil, nil
	}
	switch {
	case o.MaxRequests < 0:
		return nil, refused("Batch.MaxRequests", o.MaxRequests, "must not be negative")
	case o.MaxInFlight < 0:
		return nil, refused("Batch.MaxInFlight", o.MaxInFlight, "must not be negative")
	case o.Window < 0:
		return nil, refused("Batch.Window", o.Window, "must not be negative")
	}
	b := &batcher{l: l, maxRequests: o.MaxRequests, maxInFlight: o.MaxInFlight, window: o.Window, busyWindow: o.BusyWindow,
		senders: make(chan []*call), full: make(chan struct{}, 1), windowTimer: time.NewTimer(time.Hour), timeout: l.opts.Timeout}
	b.windowTimer.Stop()
	b.expiry = time.AfterFunc(time.Hour, b.expire)
	b.expiry.Stop()
	switch {
	case b.busyWindow == 0:
		b.busyWindow = DefaultBatchBusyWindow
	case b.busyWindow < 0:
		b.busyWindow = 0
	}
	if b.maxRequests == 0 {
		b.maxRequests = DefaultBatchRequests
	}
	if b.maxInFlight == 0 {
		b.maxInFlight = DefaultBatchInFlight
	}
	return b, nil
}

// evaluate decides hits, alone at once if a round trip is free (after the
// window, with the calls that came meanwhile), else in a batch, and
// returns the verdict.
func (b *batcher) evaluate(ctx context.Context, clock time.Time, probe bool, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	b.mu.Lock()
	if b.inFlight < b.maxInFlight && b.windowNow() == 0 {
		b.inFlight++
		b.mu.Unlock()
		blocked, err = b.l.run(ctx, clock, hits, decisions)
		b.l.report(ctx, b.l.nodes.home, probe, err)
		b.next()
		return blocked, err
	}
	// Read the clock only for a call that may wait: one sent at once has
	// the deadline runArgs gives it.
	c := &call{ctx: ctx, decisions: decisions, probe: probe, deadline: time.Now().Add(b.timeout), done: make(chan struct{})}
	if dl, ok := ctx.Deadline(); ok && dl.Before(c.deadline) {
		c.deadline = dl
	}
	b.mu.Unlock()
	// Build the arguments outside the lock, then queue.
	c.keys, c.args = b.l.appendRequest(make([]string, 0, len(hits)), make([]any, 0, argsFor(hits)), clock, hits)
	b.mu.Lock()
	window := b.windowNow()
	switch {
	case b.inFlight < b.maxInFlight && window == 0:
		// A round trip ended meanwhile, with nothing queued.
		b.inFlight++
		b.mu.Unlock()
		blocked, err = b.l.runArgs(ctx, c.keys, c.args, decisions)
		b.l.report(ctx, b.l.nodes.home, probe, err)
		b.next()
		return blocked, err
	case b.inFlight < b.maxInFlight && !b.gathering:
		b.inFlight++
		b.gathering, b.joined = true, 0
		select {
		case <-b.full: // a token left from an earlier window
		default:
		}
		b.queue = append(b.queue, c)
		b.watch(c)
		if b.batchFull() {
			// Calls left from an earlier window fill a batch already.
			b.full <- struct{}{}
		}
		b.mu.Unlock()
		b.gather(ctx, window)
	default:
		b.enqueue(c)
		b.mu.Unlock()
	}

	select {
	case <-c.done:
	case <-ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			if c.probe {
				// Never sent, the probe told nothing: let the next call
				// probe.
				b.l.nodes.home.breaker.done(true, callUnknown)
			}
			return false, b.abandoned(c)
		}
		if c.state.CompareAndSwap(callSent, callAbandoned) {
			return false, b.abandoned(c) // its batch reports to the breaker
		}
		<-c.done
	}
	return b.finish(c)
}

// enqueue queues c for a round trip to end, or for the window being
// gathered, which it joins. b.mu must be held.
func (b *batcher) enqueue(c *call) {
	if b.inFlight == b.maxInFlight {
		b.lonely = 0 // under load: company comes
	}
	b.queue = append(b.queue, c)
	b.watch(c)
	if !b.gathering {
		return
	}
	b.joined++
	if b.batchFull() {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// watch has expire end c at its deadline unless its context ends it
// first: the context of a request from Envoy, with Envoy's deadline, does,
// and one without a deadline (or a later one) does not. b.mu must be held.
func (b *batcher) watch(c *call) {
	if dl, ok := c.ctx.Deadline(); ok && !dl.After(c.deadline) {
		return
	}
	// Calls mostly end in the order they came: forget those ended at the
	// front now, rather than hold their arguments until the next expiry.
	for len(b.watched) > 0 && b.watched[0].state.Load() >= callDone {
		b.watched[0] = nil
		b.watched = b.watched[1:]
	}
	b.watched = append(b.watched, c)
	if !b.armed {
		b.armed = true
		b.expiry.Reset(time.Until(c.deadline))
	}
}

// expire ends the watched calls past their deadline, queued or sent, as
// their context would have: with an error wrapping
// context.DeadlineExceeded. A batch that still carries such a call answers
// the others and drops its reply (as for a caller that left). It forgets
// the calls that ended meanwhile, and sets the timer for the next deadline.
// Deadlines come in the order calls were queued, but for the microseconds
// between a call's start and its queueing: a call due a little before the
// one ahead of it ends with that one.
func (b *batcher) expire() {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	i := 0
	for ; i < len(b.watched); i++ {
		c := b.watched[i]
		if c.state.Load() >= callDone {
			continue // answered, or its caller left
		}
		if c.deadline.After(now) {
			break
		}
		if c.state.CompareAndSwap(callQueued, callDone) || c.state.CompareAndSwap(callSent, callDone) {
			c.err = fmt.Errorf("redislimit: evaluate %d hits: %w: %w", len(c.decisions), ErrStore, context.DeadlineExceeded)
			close(c.done)
		}
	}
	n := copy(b.watched, b.watched[i:])
	clear(b.watched[n:])
	b.watched = b.watched[:n]
	b.armed = n > 0
	if b.armed {
		b.expiry.Reset(time.Until(b.watched[0].deadline))
	}
}

// windowNow is how long a call that finds a round trip free now waits for
// others (0: it leaves at once). b.mu must be held.
func (b *batcher) windowNow() time.Duration {
	if b.window > 0 || b.inFlight == 0 || b.lonely >= lonelyWindows {
		return b.window
	}
	return b.busyWindow
}

// gather waits out the window in the round trip the calling goroutine
// holds, its own call queued: until the window ends, a batch is full, or
// ctx ends (the calls that joined are then sent at once). It then hands
// what waits to a sender, as a round trip's end does (next), so that the
// caller waits for its answer as a queued call does, minding its own
// context, rather than sending a batch whose deadline may be another's.
// A window that drew no company counts towards lonelyWindows.
func (b *batcher) gather(ctx context.Context, window time.Duration) {
	b.windowTimer.Reset(window)
	select {
	case <-b.windowTimer.C:
	case <-b.full:
		b.windowTimer.Stop()
	case <-ctx.Done():
		b.windowTimer.Stop()
	}
	b.mu.Lock()
	b.gathering = false
	if b.joined == 0 {
		b.lonely++
	} else {
		b.lonely = 0
	}
	b.mu.Unlock()
	// The other round trip, ending meanwhile, may have taken the queue:
	// then next frees this one.
	b.next()
}

// batchFull reports whether the queued calls fill a batch: maxRequests of
// them, or as many arguments as one call takes. b.mu must be held.
func (b *batcher) batchFull() bool {
	if len(b.queue) >= b.maxRequests {
		return true
	}
	args := 0
	for _, c := range b.queue {
		args += len(c.args)
	}
	return args >= maxBatchArgs
}

// abandoned returns the error of a call whose context ended before Redis
// answered it.
func (b *batcher) abandoned(c *call) error {
	return fmt.Errorf("redislimit: evaluate %d hits: %w: %w", len(c.decisions), ErrStore, c.ctx.Err())
}

// finish returns an answered call's verdict and error. A probe dropped
// before it was sent told nothing about Redis: the breaker lets the next
// call probe.
func (b *batcher) finish(c *call) (blocked bool, err error) {
	if c.probe && !c.sent {
		b.l.nodes.home.breaker.done(true, callUnknown)
	}
	return c.blocked, c.err
}

// next starts a batch of the queued calls, if any, in the round trip that
// just ended, or frees it. The batch goes to a sender goroutine waiting for
// one, or to a new one.
func (b *batcher) next() {
	if batch := b.take(); batch != nil {
		select {
		case b.senders <- batch:
		default:
			go b.sender(batch)
		}
	}
}

// sender sends batch and the batches after it, then waits up to senderIdle
// for another from next. Reusing the goroutine saves more than its start:
// a new one grows its stack to go-redis's depth on each round trip
// (copystack was 3 % of the server's CPU under load).
func (b *batcher) sender(batch []*call) {
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		b.loop(batch)
		idle.Reset(senderIdle)
		select {
		case batch = <-b.senders:
		case <-idle.C:
			return
		}
	}
}

// loop sends batches until the queue is empty.
func (b *batcher) loop(batch []*call) {
	for batch != nil {
		b.flush(batch)
		batch = b.take()
	}
}

// take removes from the queue the calls of the next batch and returns
// them, marked sent; it answers the calls whose context already ended. With
// nothing left to send it frees the round trip and returns nil.
func (b *batcher) take() []*call {
	b.mu.Lock()
	defer b.mu.Unlock()
	var batch []*call
	args, i := 0, 0
	for ; i < len(b.queue) && len(batch) < b.maxRequests; i++ {
		c := b.queue[i]
		if c.ctx.Err() != nil {
			if c.state.CompareAndSwap(callQueued, callDone) {
				c.err = b.abandoned(c)
				close(c.done)
			}
			continue
		}
		if len(batch) > 0 && args+len(c.args) > maxBatchArgs {
			break
		}
		if !c.state.CompareAndSwap(callQueued, callSent) {
			continue // abandoned
		}
		c.sent = true
		args += len(c.args)
		batch = append(batch, c)
	}
	n := copy(b.queue, b.queue[i:])
	clear(b.queue[n:])
	b.queue = b.queue[:n]
	if batch == nil {
		b.inFlight--
	}
	return batch
}

// flush sends one batch and answers its calls.
func (b *batcher) flush(batch []*call) {
	deadline := time.Now().Add(b.l.opts.Timeout)
	var latest time.Time
	nKeys, nArgs := 0, 0
	probe := false
	for _, c := range batch {
		if c.deadline.After(latest) {
			latest = c.deadline
		}
		nKeys += len(c.keys)
		nArgs += len(c.args)
		probe = probe || c.probe
		// The caller's store span, if it records, says how many calls
		// shared this round trip.
		tracing.RecordBatch(c.ctx, len(batch))
	}
	if latest.Before(deadline) {
		deadline = latest
	}
	var keys []string
	var args []any
	if len(batch) == 1 {
		keys, args = batch[0].keys, batch[0].args
	} else {
		keys, args = make([]string, 0, nKeys), make([]any, 0, nArgs)
		for _, c := range batch {
			keys = append(keys, c.keys...)
			args = append(args, c.args...)
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	replies, err := b.l.send(ctx, keys, args, len(batch))
	outcome := outcomeOf(ctx, err)
	b.l.noteFailure(ctx, b.l.nodes.home, err)
	cancel()
	for i, c := range batch {
		if !c.state.CompareAndSwap(callSent, callDone) {
			continue // the caller left
		}
		if err != nil {
			c.err = fmt.Errorf("redislimit: evaluate %d hits: %w", len(c.decisions), err)
		} else {
			c.blocked, c.err = decode(replies[i], c.decisions)
			if outcomeOf(context.Background(), c.err) == callFailed {
				outcome = callFailed
			}
		}
		close(c.done)
	}
	// One round trip, one outcome, however many calls it carried.
	b.l.nodes.home.breaker.done(probe, outcome)
}
