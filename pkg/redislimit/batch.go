package redislimit

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Defaults of BatchOptions.
const (
	defaultBatchRequests   = 64
	defaultBatchInFlight   = 2
	defaultBatchBusyWindow = 150 * time.Microsecond
)

// maxBatchArgs bounds the arguments of one batched script call (about 130
// hits), so that it keeps Redis, which runs one script at a time, busy
// well under a millisecond. A bigger single call is still sent, alone.
const maxBatchArgs = 400

// BatchOptions configures how a Limiter shares Redis round trips among
// concurrent Evaluate calls on a single node or Sentinel (Cluster calls are
// not batched). The zero value enables batching with the defaults.
//
// A call is sent at once, alone, while no round trip is outstanding. One
// that finds a round trip free while another is outstanding waits up to
// BusyWindow for company; calls that find every round trip taken wait for
// one to end. Then up to MaxRequests waiting calls leave in one script
// call, each decided on its own as if sent alone. Once a few busy windows
// in a row draw no company, calls stop waiting until one finds every round
// trip taken, so that a lightly loaded server adds no latency.
//
// Every call ends within Options.Timeout of its start, or its context's
// sooner deadline. The callers' context values do not reach go-redis hooks
// for a batch of several calls.
type BatchOptions struct {
	// Disabled sends every call in a round trip of its own, at once.
	Disabled bool
	// MaxRequests bounds the calls in one round trip; 0 means 64.
	MaxRequests int
	// MaxInFlight bounds the round trips outstanding at once; 0 means 2.
	MaxInFlight int
	// Window is how long a call that finds a round trip free waits for
	// company, whatever is outstanding (REDIS_PIPELINE_WINDOW); 0 leaves it
	// to BusyWindow.
	Window time.Duration
	// BusyWindow is that wait while another round trip is outstanding,
	// when Window is 0; 0 means 150µs, negative sends at once.
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
// are built before it queues: a batch never reads the caller's hits.
type call struct {
	ctx       context.Context
	keys      []string
	args      []any
	decisions []limit.Decision
	probe     bool      // the breaker's probe
	deadline  time.Time // its start plus Options.Timeout, or its context's sooner deadline
	state     atomic.Int32
	// Set before done is closed.
	sent    bool // it went to Redis
	blocked bool
	err     error
	done    chan struct{}
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
	// gathering: a call waits out the window in a round trip it holds (see
	// gather); joined counts the calls that came meanwhile.
	gathering   bool
	joined      int
	lonely      int           // windows in a row that ended without company
	full        chan struct{} // wakes the gathering call once a batch is full
	windowTimer *time.Timer   // the gathering call's

	senders chan []*call // to a sender goroutine waiting for a batch

	// watched are the calls queued since the last expiry whose context
	// will not end by their deadline, in order; expiry fires at the first
	// undecided one's: one timer for the queue, not one per call.
	watched []*call
	expiry  *time.Timer
	armed   bool // expiry is set
}

// senderIdle is how long a sender goroutine waits for another batch before
// it ends.
const senderIdle = time.Second

// lonelyWindows is how many busy windows in a row must end without company
// before calls stop waiting for it; one would send calls off alone under
// load.
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
	b := &batcher{l: l, window: o.Window, busyWindow: max(cmp.Or(o.BusyWindow, defaultBatchBusyWindow), 0),
		maxRequests: cmp.Or(o.MaxRequests, defaultBatchRequests), maxInFlight: cmp.Or(o.MaxInFlight, defaultBatchInFlight),
		senders: make(chan []*call), full: make(chan struct{}, 1), windowTimer: time.NewTimer(time.Hour)}
	b.windowTimer.Stop()
	b.expiry = time.AfterFunc(time.Hour, b.expire)
	b.expiry.Stop()
	return b, nil
}

// evaluate decides hits alone if a round trip is free and not worth
// waiting in, else in a batch.
func (b *batcher) evaluate(ctx context.Context, clock time.Time, probe bool, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	b.mu.Lock()
	if b.inFlight < b.maxInFlight && b.windowNow() == 0 {
		b.inFlight++
		b.mu.Unlock()
		blocked, err = b.l.run(ctx, clock, hits, decisions)
		return b.sentAlone(ctx, probe, blocked, err)
	}
	// Only a call that may wait reads the clock.
	c := &call{ctx: ctx, decisions: decisions, probe: probe, done: make(chan struct{}),
		deadline: time.Now().Add(b.l.opts.Timeout)}
	if dl, ok := ctx.Deadline(); ok && dl.Before(c.deadline) {
		c.deadline = dl
	}
	b.mu.Unlock()
	c.keys, c.args = b.l.appendRequest(make([]string, 0, len(hits)), make([]any, 0, argsFor(hits)), clock, hits)
	if b.place(c) {
		blocked, err = b.l.runArgs(ctx, c.keys, c.args, decisions)
		return b.sentAlone(ctx, probe, blocked, err)
	}
	return b.wait(c)
}

// sentAlone reports how a call sent alone ended and frees its round trip.
func (b *batcher) sentAlone(ctx context.Context, probe, blocked bool, err error) (bool, error) {
	b.l.report(ctx, b.l.nodes.home, probe, err)
	b.next()
	return blocked, err
}

// place queues c, or gathers a batch around it in a free round trip worth
// waiting in. It reports true, the round trip taken, when c should be sent
// alone at once.
func (b *batcher) place(c *call) (alone bool) {
	b.mu.Lock()
	window := b.windowNow()
	switch {
	case b.inFlight < b.maxInFlight && window == 0:
		b.inFlight++
		b.mu.Unlock()
		return true
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
		b.gather(c.ctx, window)
	default:
		b.enqueue(c)
		b.mu.Unlock()
	}
	return false
}

// wait returns c's answer, or an error as soon as c's context ends.
func (b *batcher) wait(c *call) (blocked bool, err error) {
	select {
	case <-c.done:
	case <-c.ctx.Done():
		if c.state.CompareAndSwap(callQueued, callAbandoned) {
			if c.probe {
				// Never sent: let the next call probe.
				b.l.nodes.home.breaker.done(true, callUnknown)
			}
			return false, b.abandoned(c)
		}
		if c.state.CompareAndSwap(callSent, callAbandoned) {
			return false, b.abandoned(c) // its batch reports to the breaker
		}
		<-c.done
	}
	if c.probe && !c.sent {
		b.l.nodes.home.breaker.done(true, callUnknown) // as above
	}
	return c.blocked, c.err
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

// watch has expire end c at its deadline unless its context ends it first.
// b.mu must be held.
func (b *batcher) watch(c *call) {
	if dl, ok := c.ctx.Deadline(); ok && !dl.After(c.deadline) {
		return
	}
	// Calls mostly end in order: drop those ended at the front now.
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

// expire ends the watched calls past their deadline, queued or sent, with
// an error wrapping context.DeadlineExceeded, and sets the timer for the
// next. Deadlines come nearly in queue order: a call due a little before
// the one ahead of it ends with that one.
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

// gather holds the round trip, its own call queued, until the window
// ends, a batch is full or ctx ends, then hands what waits to a sender as
// a round trip's end does.
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
	b.next() // frees the round trip if another took the queue meanwhile
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

// abandoned is the error of a call whose context ended first.
func (b *batcher) abandoned(c *call) error {
	return fmt.Errorf("redislimit: evaluate %d hits: %w: %w", len(c.decisions), ErrStore, c.ctx.Err())
}

// next sends the queued calls in the round trip that just ended, on an
// idle sender goroutine or a new one; with nothing queued it frees the
// round trip.
func (b *batcher) next() {
	if batch := b.take(); batch != nil {
		select {
		case b.senders <- batch:
		default:
			go b.sender(batch)
		}
	}
}

// sender sends batch and those after it, then waits up to senderIdle for
// another: a reused goroutine spares growing a stack to go-redis's depth.
func (b *batcher) sender(batch []*call) {
	idle := time.NewTimer(senderIdle)
	defer idle.Stop()
	for {
		for ; batch != nil; batch = b.take() {
			b.flush(batch)
		}
		idle.Reset(senderIdle)
		select {
		case batch = <-b.senders:
		case <-idle.C:
			return
		}
	}
}

// take removes the next batch from the queue, answering the calls whose
// context ended; with none left it frees the round trip and returns nil.
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
	// Every call's deadline is within Options.Timeout of its start: the
	// batch's is the latest of them.
	deadline := batch[0].deadline
	nKeys, nArgs := 0, 0
	probe := false
	for _, c := range batch {
		if c.deadline.After(deadline) {
			deadline = c.deadline
		}
		nKeys += len(c.keys)
		nArgs += len(c.args)
		probe = probe || c.probe
		recordBatch(c.ctx, len(batch))
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

// recordBatch sets on the caller's span, if it records, how many calls
// shared the round trip.
func recordBatch(ctx context.Context, calls int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.Bool("ratelimit.store.batched", calls > 1),
			attribute.Int("ratelimit.store.batch_calls", calls))
	}
}
