package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// failure is a failure of Redis and when it happened.
type failure struct {
	err error
	at  time.Time
}

// Healthy reports whether the circuit breaker is closed: calls go to Redis.
// It is false while the breaker is open or probing (calls fail at once
// with ErrCircuitOpen), for health checks and metrics. A Probe that fails
// opens the breaker, so a Redis that cannot be reached at start is
// reported before any request meets it.
func (l *Limiter) Healthy() bool { return l.breaker.stateOf() == BreakerClosed }

// BreakerState returns the circuit breaker's state; BreakerClosed when it
// is disabled.
func (l *Limiter) BreakerState() BreakerState { return l.breaker.stateOf() }

// LastFailure returns the latest failure of Redis seen by a call or a
// Probe, and when it happened; nil if none ever did. It stays after Redis
// recovers (Healthy says whether it is current), so that a report can say
// why Redis was last unhealthy: "x509: certificate signed by unknown
// authority" rather than only "unhealthy". Failures that are the caller's
// (a canceled context) or a request's own (a script error) are not
// recorded.
func (l *Limiter) LastFailure() (at time.Time, err error) {
	f := l.lastFailure.Load()
	if f == nil {
		return time.Time{}, nil
	}
	return f.at, f.err
}

// Probe checks that Redis can run the Lua code: it loads it on every node
// (every master of a Cluster) as a function library (FUNCTION LOAD), or as
// a script (SCRIPT LOAD) if Redis runs no functions for floodgate, which
// needs the connection, TLS, credentials and the permission to run scripts
// to be right. It decides how calls run the code if no call has yet (see
// Options.Logger), and loads the library on Cluster nodes added since. The outcome goes to the
// circuit breaker as a call's would, except that a failure opens the
// breaker at once, however few failures came before, and a success closes
// it. A failure is an error wrapping ErrStore. Callers probe at start, and
// while the breaker is open, so that health follows Redis without waiting
// for requests.
func (l *Limiter) Probe(ctx context.Context) error {
	var err error
	if l.fn.mode.Load() != modeScript {
		err = l.decide(ctx)
	}
	if err == nil && l.fn.mode.Load() == modeScript {
		err = evaluateScript.Load(ctx, l.client).Err()
	}
	if err != nil {
		l.noteFailure(ctx, err)
	}
	switch outcomeOf(ctx, err) {
	case callOK:
		l.breaker.force(false)
	case callFailed:
		l.breaker.force(true)
	}
	if err != nil {
		return fmt.Errorf("redislimit: probe: %w: %w", ErrStore, err)
	}
	return nil
}

// noteFailure records err, met by a call under ctx, as the latest failure
// of Redis if it is one.
func (l *Limiter) noteFailure(ctx context.Context, err error) {
	if outcomeOf(ctx, err) == callFailed && !errors.Is(err, ErrCircuitOpen) {
		l.lastFailure.Store(&failure{err: err, at: time.Now()})
	}
}
