package redislimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// TestBreaker kills a real redis-server under a Limiter: the breaker opens
// after exactly Failures failed calls, calls then fail at once with
// ErrCircuitOpen without touching Redis, a probe goes out when the backoff
// has passed, and not a microsecond before, a failed probe doubles the
// backoff, and once Redis is back a probe closes the breaker and calls
// decide again. The breaker's clock is a fake one the test moves.
func TestBreaker(t *testing.T) {
	n := startNode(t)
	const (
		failures   = 3
		minBackoff = 300 * time.Millisecond
		maxBackoff = 600 * time.Millisecond
	)
	clk := newClock(time.Unix(1_700_000_000, 0))
	l, err := redislimit.New(n.client, redislimit.WithBreaker(redislimit.Options{
		KeyPrefix: "breaker:",
		Timeout:   100 * time.Millisecond,
	}, redislimit.BreakerOptions{Failures: failures, MinBackoff: minBackoff, MaxBackoff: maxBackoff, Now: clk.now}))
	if err != nil {
		t.Fatal(err)
	}
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Hour}, Cost: 1}
	call := func() error {
		_, err := l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
		return err
	}
	if err := call(); err != nil || !l.Healthy() {
		t.Fatalf("Redis up: err %v, healthy %v", err, l.Healthy())
	}

	n.srv.Stop()
	for i := 1; i <= failures; i++ {
		err := call()
		if !errors.Is(err, redislimit.ErrStore) || errors.Is(err, redislimit.ErrCircuitOpen) {
			t.Fatalf("failed call %d: err = %v, want a store error, not the breaker's", i, err)
		}
		if open := !l.Healthy(); open != (i == failures) {
			t.Fatalf("after %d failed calls: open %v (state %v)", i, open, l.BreakerState())
		}
	}
	opened := clk.now()
	before := n.commands.Load()
	start := time.Now()
	const fast = 200
	for i := range fast {
		if err := call(); !errors.Is(err, redislimit.ErrCircuitOpen) || !errors.Is(err, redislimit.ErrStore) {
			t.Fatalf("call %d with the breaker open: err = %v, want ErrCircuitOpen wrapping ErrStore", i, err)
		}
	}
	took := time.Since(start)
	// The breaker's clock stands still: no probe may have gone out.
	if sent := n.commands.Load() - before; sent != 0 {
		t.Errorf("%d calls with the breaker open sent %d commands in %v", fast, sent, took)
	}
	if took > 100*time.Millisecond {
		t.Errorf("%d calls with the breaker open took %v: want them to fail at once", fast, took)
	}
	t.Logf("%d calls with the breaker open: %v each", fast, took/fast)

	// A failed probe keeps it open, for a doubled backoff.
	clk.set(opened.Add(minBackoff - time.Microsecond))
	if err := call(); !errors.Is(err, redislimit.ErrCircuitOpen) {
		t.Fatalf("1µs before the backoff ends: err = %v, want ErrCircuitOpen", err)
	}
	clk.set(opened.Add(minBackoff))
	if err := call(); errors.Is(err, redislimit.ErrCircuitOpen) || !errors.Is(err, redislimit.ErrStore) {
		t.Fatalf("probe: err = %v, want a store error from Redis itself", err)
	}
	if got := l.BreakerState(); got != redislimit.BreakerOpen {
		t.Fatalf("after a failed probe: %v, want open", got)
	}
	probed := clk.now()
	clk.add(350 * time.Millisecond) // less than the doubled 600ms
	if err := call(); !errors.Is(err, redislimit.ErrCircuitOpen) {
		t.Fatalf("350ms into a 600ms backoff: err = %v, want ErrCircuitOpen", err)
	}
	clk.set(probed.Add(2*minBackoff - time.Microsecond))
	if err := call(); !errors.Is(err, redislimit.ErrCircuitOpen) {
		t.Fatalf("1µs before the doubled backoff ends: err = %v, want ErrCircuitOpen", err)
	}

	n.srv.Restart()
	clk.set(probed.Add(2 * minBackoff))
	// The client may need a moment to dial the new server; each failed
	// probe backs off for at most maxBackoff, which the clock skips.
	deadline := time.Now().Add(3 * time.Second)
	for call() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("3s after Redis came back the breaker is %v", l.BreakerState())
		}
		clk.add(maxBackoff)
		time.Sleep(5 * time.Millisecond)
	}
	if !l.Healthy() {
		t.Fatalf("a call passed but the breaker is %v", l.BreakerState())
	}
	for i := range 5 {
		if err := call(); err != nil {
			t.Fatalf("call %d after recovery: %v", i, err)
		}
	}
}

// TestBreakerDisabled: with a negative Failures every call tries Redis.
func TestBreakerDisabled(t *testing.T) {
	n := startNode(t)
	l, err := redislimit.New(n.client, redislimit.WithBreaker(redislimit.Options{Timeout: 50 * time.Millisecond}, redislimit.BreakerOptions{Failures: -1}))
	if err != nil {
		t.Fatal(err)
	}
	n.srv.Stop()
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 1, Window: time.Second}, Cost: 1}
	for i := range 10 {
		_, err := l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
		if !errors.Is(err, redislimit.ErrStore) || errors.Is(err, redislimit.ErrCircuitOpen) {
			t.Fatalf("call %d: err = %v, want a store error, not the breaker's", i, err)
		}
	}
	if !l.Healthy() {
		t.Fatal("a disabled breaker reports unhealthy")
	}
}

// TestBreakerCallerDeadline: a Redis that misses the caller's own deadline
// (the gRPC layer passes the store deadline in the context) counts as a
// failure; a canceled caller does not.
func TestBreakerCallerDeadline(t *testing.T) {
	n := startNode(t)
	l, err := redislimit.New(n.client, redislimit.WithBreaker(redislimit.Options{Timeout: time.Second}, redislimit.BreakerOptions{Failures: 2, MinBackoff: time.Minute, MaxBackoff: time.Minute}))
	if err != nil {
		t.Fatal(err)
	}
	hit := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 1000, Window: time.Hour}, Cost: 1}
	stop := make(chan struct{})
	go func() { // keep Redis busy: every call misses its deadline
		defer close(stop)
		_, _ = n.srv.Do("EVAL", "local t = redis.call('TIME')[1] + 2 while tonumber(redis.call('TIME')[1]) < t do end return 1", "0")
	}()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for range 3 {
		_, _ = l.Evaluate(canceled, []limit.Hit{hit}, make([]limit.Decision, 1))
	}
	if !l.Healthy() {
		t.Fatal("canceled calls opened the breaker")
	}
	for i := 0; l.Healthy(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		_, err := l.Evaluate(ctx, []limit.Hit{hit}, make([]limit.Decision, 1))
		cancel()
		if err == nil {
			// The busy script has not started yet.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if i > 20 {
			t.Fatalf("breaker still closed after %d calls missing their deadline (last err %v)", i, err)
		}
	}
	<-stop
}
