package limit

import (
	"context"
	"testing"
)

// waitingLimiter is a Limiter that does not say it evaluates immediately.
type waitingLimiter struct{ Limiter }

// saysLimiter says what it is told.
type saysLimiter struct {
	Limiter
	immediate bool
}

func (s saysLimiter) EvaluatesImmediately() bool { return s.immediate }

func TestEvaluatesImmediately(t *testing.T) {
	mem := NewMemory(MemoryOptions{})
	for _, tc := range []struct {
		name string
		l    Limiter
		want bool
	}{
		{"Memory", mem, true},
		{"a wrapper that does not say", waitingLimiter{mem}, false},
		{"a wrapper that says no", saysLimiter{mem, false}, false},
		{"a wrapper that says yes", saysLimiter{mem, true}, true},
	} {
		if got := EvaluatesImmediately(tc.l); got != tc.want {
			t.Errorf("%s: EvaluatesImmediately = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestImmediateHonoursDoneContext: without a deadline of its own, Memory
// still decides nothing for a caller that has gone away.
func TestImmediateHonoursDoneContext(t *testing.T) {
	mem := NewMemory(MemoryOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hits := []Hit{{Key: "k", Spec: Spec{Algorithm: FixedWindow, Limit: 1, Window: 1e9}, Cost: 1}}
	if _, err := mem.Evaluate(ctx, hits, make([]Decision, 1)); err != context.Canceled {
		t.Fatalf("Evaluate on a cancelled context: %v, want context.Canceled", err)
	}
	if n := mem.Len(); n != 0 {
		t.Fatalf("%d counters after a cancelled call, want 0", n)
	}
}
