package redislimit

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
)

// ErrCircuitOpen reports that Evaluate did not try Redis because its
// circuit breaker is open: recent calls failed, and Redis is left alone
// until a probe succeeds. It wraps ErrStore, so a caller's failure policy
// applies to it as to any store failure; and limit.ErrCircuitOpen, so that
// the service names the cause without knowing the store.
var ErrCircuitOpen = fmt.Errorf("%w after repeated failures: %w", limit.ErrCircuitOpen, ErrStore)

// Defaults of BreakerOptions.
const (
	DefaultBreakerFailures   = 5
	DefaultBreakerMinBackoff = 100 * time.Millisecond
	DefaultBreakerMaxBackoff = time.Second
)

// BreakerOptions configures a Limiter's circuit breaker, which makes calls
// fail fast while Redis is down instead of each waiting for its deadline.
// After Failures consecutive failed calls it opens: Evaluate then returns
// an error wrapping ErrCircuitOpen at once, without touching Redis. After a
// backoff, one call is let through as a probe; if it succeeds the breaker
// closes, otherwise it stays open for twice the backoff, up to MaxBackoff.
// The zero value enables it with the defaults.
//
// Failures are errors of Redis or of the connection to it, timeouts
// included, also when the deadline is the caller's context's; a call whose
// context was canceled, an error the script reports about its input, and
// a request finding a key of another type (WRONGTYPE) are not. With
// batching (BatchOptions) the breaker counts round trips: a batch that
// fails is one failure, however many calls it carried. On Cluster each
// master has a breaker of its own, which counts the calls on its slots
// (one per request and slot): a master that fails opens its breaker only,
// and the calls on the other masters' slots go on (see Limiter.Nodes).
type BreakerOptions struct {
	// Failures is the number of consecutive failed calls that open the
	// breaker; 0 means DefaultBreakerFailures, and a negative number
	// disables the breaker.
	Failures int
	// MinBackoff is how long the breaker stays open before its first probe;
	// 0 means DefaultBreakerMinBackoff.
	MinBackoff time.Duration
	// MaxBackoff bounds the doubling of the backoff after failed probes; 0
	// means DefaultBreakerMaxBackoff.
	MaxBackoff time.Duration
	// Now is the clock that times the backoff; nil means time.Now. It is
	// not the clock of the limits (Redis keeps that one): tests move it to
	// reach a probe without waiting for the backoff.
	Now func() time.Time
}

// BreakerState is the state of a Limiter's circuit breaker.
type BreakerState int32

const (
	// BreakerClosed: calls go to Redis (also when the breaker is disabled).
	BreakerClosed BreakerState = iota
	// BreakerOpen: calls fail at once with ErrCircuitOpen.
	BreakerOpen
	// BreakerProbing: one call is testing Redis; the others fail at once.
	BreakerProbing
)

// String returns "closed", "open" or "probing".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerProbing:
		return "probing"
	}
	return fmt.Sprintf("BreakerState(%d)", int32(s))
}

// breaker is a circuit breaker; a nil *breaker is disabled. Calls ask
// admit before going to Redis and report the outcome with done.
type breaker struct {
	threshold           int
	minBackoff, maxBack time.Duration
	now                 func() time.Time

	state atomic.Int32 // a BreakerState; read without mu on the fast path

	// failures counts consecutive failed calls while closed; written
	// under mu, read without it by calls that succeed (most of them),
	// which then need not take mu.
	failures atomic.Int32

	mu      sync.Mutex
	backoff time.Duration // of the current opening
	retryAt time.Time     // when open: the first instant a probe may go
}

func newBreaker(o BreakerOptions) (*breaker, error) {
	if o.Failures < 0 {
		return nil, nil
	}
	switch {
	case o.MinBackoff < 0:
		return nil, refused("Breaker.MinBackoff", o.MinBackoff, "must not be negative")
	case o.MaxBackoff < 0:
		return nil, refused("Breaker.MaxBackoff", o.MaxBackoff, "must not be negative")
	}
	b := &breaker{threshold: o.Failures, minBackoff: o.MinBackoff, maxBack: o.MaxBackoff, now: o.Now}
	if b.now == nil {
		b.now = time.Now
	}
	if b.threshold == 0 {
		b.threshold = DefaultBreakerFailures
	}
	if b.minBackoff == 0 {
		b.minBackoff = DefaultBreakerMinBackoff
	}
	if b.maxBack == 0 {
		b.maxBack = DefaultBreakerMaxBackoff
	}
	if b.maxBack < b.minBackoff {
		return nil, &option.Error{Options: "redislimit.Options", Field: "Breaker.MaxBackoff", Value: b.maxBack,
			Want: "want at least %s (" + b.minBackoff.String() + ")", With: []string{"Breaker.MinBackoff"}}
	}
	return b, nil
}

// admit reports whether a call may go to Redis, and whether it is the
// probe of an open breaker.
func (b *breaker) admit() (ok, probe bool) {
	if b == nil || BreakerState(b.state.Load()) == BreakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return true, false
	case BreakerOpen:
		if !b.now().Before(b.retryAt) {
			b.state.Store(int32(BreakerProbing))
			return true, true
		}
	}
	return false, false
}

// Outcomes of a call, for done.
const (
	callOK      = iota // Redis answered
	callFailed         // Redis failed
	callUnknown        // the caller gave up first: says nothing of Redis
)

// done records the outcome of an admitted call.
func (b *breaker) done(probe bool, outcome int) {
	if b == nil {
		return
	}
	if outcome == callOK && !probe && BreakerState(b.state.Load()) == BreakerClosed {
		if b.failures.Load() != 0 {
			b.mu.Lock()
			b.failures.Store(0)
			b.mu.Unlock()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case outcome == callOK:
		// Any answer, the probe's or a call's admitted before the breaker
		// opened, shows Redis is back.
		b.state.Store(int32(BreakerClosed))
		b.failures.Store(0)
		b.backoff = 0
	case probe && outcome == callFailed:
		b.open(min(2*b.backoff, b.maxBack))
	case probe:
		// The probe told nothing: let the next call probe.
		b.state.Store(int32(BreakerOpen))
	case BreakerState(b.state.Load()) == BreakerClosed && outcome == callFailed:
		if b.failures.Add(1) >= int32(b.threshold) {
			b.open(b.minBackoff)
		}
	}
}

// force opens the breaker (failed) or closes it, whatever the count of
// failures: a probe's verdict. An open breaker stays open with its backoff.
func (b *breaker) force(failed bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !failed:
		b.state.Store(int32(BreakerClosed))
		b.failures.Store(0)
		b.backoff = 0
	case BreakerState(b.state.Load()) == BreakerClosed:
		b.open(b.minBackoff)
	}
}

func (b *breaker) open(backoff time.Duration) {
	b.backoff = backoff
	b.retryAt = b.now().Add(backoff)
	b.state.Store(int32(BreakerOpen))
}

// stateOf returns the breaker's state; BreakerClosed when disabled.
func (b *breaker) stateOf() BreakerState {
	if b == nil {
		return BreakerClosed
	}
	return BreakerState(b.state.Load())
}

// outcomeOf classifies the result of a call made under ctx.
func outcomeOf(ctx context.Context, err error) int {
	switch {
	case err == nil:
		return callOK
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller went away. A caller's deadline, by contrast, is
		// often the store deadline itself (the gRPC layer sets one per
		// request): Redis missing it is a failure.
		return callUnknown
	case scriptError(err):
		// Redis answered; the request was at fault.
		return callOK
	}
	return callFailed
}

// scriptError reports whether err is an error the script raised about its
// input (they all start with "floodgate:") or a command of the script
// found a key holding another type: Redis answered, about one request.
func scriptError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.Contains(msg, "floodgate:") || strings.HasPrefix(msg, "WRONGTYPE")
}
