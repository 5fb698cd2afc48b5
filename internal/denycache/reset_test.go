package denycache

import (
	"context"
	"errors"
	"testing"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Reset resets the counter in the store and forgets its cached denial, so
// the next call goes to the store and passes; other keys keep theirs.
func TestReset(t *testing.T) {
	clk := &clock{t: t0}
	mem := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
	c := New(mem, Options{Now: clk.now})
	hit := limit.Hit{Key: "k", Spec: perSecond, Cost: 1}
	other := limit.Hit{Key: "other", Spec: perSecond, Cost: 1}
	for _, h := range []limit.Hit{hit, other} { // each exhausts its window
		eval(t, c, h)
	}
	if d := eval(t, c, hit)[0]; d.Allowed || c.Stats().Answered != 1 {
		t.Fatalf("a repeated denial was not answered from the cache (%+v, %+v): the test proves nothing", d, c.Stats())
	}
	if err := c.Reset(context.Background(), "k", perSecond); err != nil {
		t.Fatal(err)
	}
	if d := eval(t, c, hit)[0]; !d.Allowed {
		t.Errorf("the first call after the reset: %+v, want allowed", d)
	}
	if d := eval(t, c, other)[0]; d.Allowed {
		t.Errorf("the reset freed another key: %+v", d)
	}
}

// gated is a limit.Memory whose Evaluate, once decided, waits for the
// test: a call in flight across a reset.
type gated struct {
	*limit.Memory
	decided, release chan struct{}
}

func (g *gated) Evaluate(ctx context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	blocked, err := g.Memory.Evaluate(ctx, hits, ds)
	g.decided <- struct{}{}
	<-g.release
	return blocked, err
}

// A denial that a call in flight learnt from the state before a reset is
// not cached after it: it would deny the client the reset let through.
func TestResetDropsDenialsInFlight(t *testing.T) {
	clk := &clock{t: t0}
	g := &gated{Memory: limit.NewMemory(limit.MemoryOptions{Now: clk.now}), decided: make(chan struct{}, 1), release: make(chan struct{})}
	c := New(g, Options{Now: clk.now})
	hit := limit.Hit{Key: "k", Spec: perSecond, Cost: 1}
	close(g.release)
	eval(t, c, hit) // uses the one hit of the second
	<-g.decided
	// The exhausted window is cached: forget it, so that the next call
	// reaches the store and is denied there.
	c.Flush()
	g.release = make(chan struct{})
	done := make(chan limit.Decision)
	go func() {
		ds := make([]limit.Decision, 1)
		c.Evaluate(context.Background(), []limit.Hit{hit}, ds)
		done <- ds[0]
	}()
	<-g.decided // denied by the store, not yet learnt
	if err := c.Reset(context.Background(), "k", perSecond); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if d := <-done; d.Allowed {
		t.Fatalf("the call in flight was allowed: %+v, the test proves nothing", d)
	}
	if n := c.Len(); n != 0 {
		t.Errorf("%d denials cached after the reset, want 0", n)
	}
	if d := eval(t, c, hit)[0]; !d.Allowed {
		t.Errorf("the first call after the reset: %+v, want allowed", d)
	}
}

// A wrapped Limiter without Reset is an error wrapping ErrNoReset.
func TestResetWithoutInnerReset(t *testing.T) {
	c, _, _ := newCache(t, Options{})
	if err := c.Reset(context.Background(), "k", perSecond); !errors.Is(err, ErrNoReset) {
		t.Errorf("Reset = %v, want ErrNoReset", err)
	}
}
