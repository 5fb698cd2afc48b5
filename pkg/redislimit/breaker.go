package redislimit

import (
	"cmp"
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

// errCircuitOpen is the error of a call not sent because its node's
// circuit breaker is open. It wraps limit.ErrCircuitOpen, which the
// service names, and ErrStore, so that the failure policy applies.
var errCircuitOpen = fmt.Errorf("%w after repeated failures: %w", limit.ErrCircuitOpen, ErrStore)

// Defaults of breakerOptions.
const (
	defaultBreakerFailures   = 5
	defaultBreakerMinBackoff = 100 * time.Millisecond
	defaultBreakerMaxBackoff = time.Second
)

// breakerOptions tunes a circuit breaker, which fails calls at once while
// Redis is down instead of each waiting for its deadline. After Failures
// consecutive failed calls (outcomeOf) it opens; after a backoff one call
// goes through as a probe, which closes it if it succeeds and otherwise
// doubles the backoff, up to MaxBackoff. A failed batch is one failure.
// The zero value is the defaults.
type breakerOptions struct {
	// Failures opens the breaker; 0 means the default, negative disables
	// it.
	Failures int
	// MinBackoff is the wait before the first probe, MaxBackoff bounds its
	// doubling; 0 means the defaults.
	MinBackoff, MaxBackoff time.Duration
	// Now times the backoff; nil means time.Now.
	Now func() time.Time
}

// breakerState is the state of a circuit breaker.
type breakerState int32

const (
	breakerClosed  breakerState = iota // calls go to Redis (also when disabled)
	breakerOpen                        // calls fail at once
	breakerProbing                     // one call tests Redis, the others fail at once
)

// String returns "closed", "open" or "probing".
func (s breakerState) String() string { return [...]string{"closed", "open", "probing"}[s] }

// breaker is a circuit breaker; a nil *breaker is disabled. Calls ask
// admit before going to Redis and report the outcome with done.
type breaker struct {
	threshold           int
	minBackoff, maxBack time.Duration
	now                 func() time.Time

	state atomic.Int32 // a breakerState; read without mu on the fast path
	// failures counts consecutive failed calls while closed; written under
	// mu.
	failures atomic.Int32

	mu      sync.Mutex
	backoff time.Duration // of the current opening
	retryAt time.Time     // when open: the first instant a probe may go
}

func newBreaker(o breakerOptions) (*breaker, error) {
	if o.Failures < 0 {
		return nil, nil
	}
	switch {
	case o.MinBackoff < 0:
		return nil, refused("Breaker.MinBackoff", o.MinBackoff, "must not be negative")
	case o.MaxBackoff < 0:
		return nil, refused("Breaker.MaxBackoff", o.MaxBackoff, "must not be negative")
	}
	b := &breaker{threshold: cmp.Or(o.Failures, defaultBreakerFailures), now: o.Now,
		minBackoff: cmp.Or(o.MinBackoff, defaultBreakerMinBackoff), maxBack: cmp.Or(o.MaxBackoff, defaultBreakerMaxBackoff)}
	if b.now == nil {
		b.now = time.Now
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
	if b == nil || breakerState(b.state.Load()) == breakerClosed {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch breakerState(b.state.Load()) {
	case breakerClosed:
		return true, false
	case breakerOpen:
		if !b.now().Before(b.retryAt) {
			b.state.Store(int32(breakerProbing))
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
	if outcome == callOK && !probe && breakerState(b.state.Load()) == breakerClosed {
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
		// Any answer, the probe's or an earlier call's, shows Redis is back.
		b.close()
	case probe && outcome == callFailed:
		b.open(min(2*b.backoff, b.maxBack))
	case probe:
		// The probe told nothing: let the next call probe.
		b.state.Store(int32(breakerOpen))
	case breakerState(b.state.Load()) == breakerClosed && outcome == callFailed:
		if b.failures.Add(1) >= int32(b.threshold) {
			b.open(b.minBackoff)
		}
	}
}

// force opens the breaker (failed) or closes it, whatever the count of
// failures: a probe's verdict. An open breaker keeps its backoff.
func (b *breaker) force(failed bool) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case !failed:
		b.close()
	case breakerState(b.state.Load()) == breakerClosed:
		b.open(b.minBackoff)
	}
}

// open and close change the state; b.mu must be held.
func (b *breaker) open(backoff time.Duration) {
	b.backoff = backoff
	b.retryAt = b.now().Add(backoff)
	b.state.Store(int32(breakerOpen))
}

func (b *breaker) close() {
	b.state.Store(int32(breakerClosed))
	b.failures.Store(0)
	b.backoff = 0
}

// stateOf returns the breaker's state; breakerClosed when disabled.
func (b *breaker) stateOf() breakerState {
	if b == nil {
		return breakerClosed
	}
	return breakerState(b.state.Load())
}

// outcomeOf classifies the result of a call made under ctx: errors of
// Redis or the connection, timeouts included, are failures.
func outcomeOf(ctx context.Context, err error) int {
	switch {
	case err == nil:
		return callOK
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller went away. A deadline, by contrast, is often the
		// store's own: Redis missing it is a failure.
		return callUnknown
	case scriptError(err):
		// Redis answered; the request was at fault.
		return callOK
	}
	return callFailed
}

// scriptError reports whether err is the script's refusal of its input
// ("floodgate:...") or WRONGTYPE: Redis answered, about one request.
func scriptError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && (strings.Contains(re.Error(), "floodgate:") || strings.HasPrefix(re.Error(), "WRONGTYPE"))
}
