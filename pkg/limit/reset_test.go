package limit_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// resetSpecs are a limit of 4 per minute in every algorithm (a burst of
// 4, Burst 0 meaning Limit, for the buckets).
func resetSpecs() []limit.Spec {
	var specs []limit.Spec
	for _, a := range limit.Algorithms() {
		specs = append(specs, limit.Spec{Algorithm: a, Limit: 4, Window: time.Minute})
	}
	return specs
}

// Reset forgets a counter in every algorithm: after it, a peek sees a new
// counter and the whole capacity passes again at the same instant; other
// counters are untouched, and resetting a counter that does not exist is
// no error.
func TestMemoryReset(t *testing.T) {
	for _, spec := range resetSpecs() {
		t.Run(spec.Algorithm.String(), func(t *testing.T) {
			clk := newClock(base.Add(10 * time.Second))
			m := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
			hit := limit.Hit{Key: "k", Spec: spec, Cost: 1}
			other := limit.Hit{Key: "other", Spec: spec, Cost: 1}
			for range 4 {
				eval(t, m, hit, other)
			}
			if d := eval(t, m, hit)[0]; d.Allowed {
				t.Fatalf("the 5th hit passed: %+v", d)
			}
			if err := m.Reset(context.Background(), "k", spec); err != nil {
				t.Fatal(err)
			}
			peek := eval(t, m, limit.Hit{Key: "k", Spec: spec})[0]
			if !peek.Allowed || peek.Remaining != 4 {
				t.Errorf("a peek after the reset: %+v, want the state of a new counter (remaining 4)", peek)
			}
			for i := range 4 {
				if d := eval(t, m, hit)[0]; !d.Allowed {
					t.Fatalf("hit %d after the reset denied: %+v", i+1, d)
				}
			}
			if d := eval(t, m, other)[0]; d.Allowed {
				t.Errorf("the reset freed another counter: %+v", d)
			}
			if err := m.Reset(context.Background(), "never-seen", spec); err != nil {
				t.Errorf("reset of an absent counter: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := m.Reset(ctx, "k", spec); err == nil {
				t.Error("reset under a done context succeeded")
			}
		})
	}
}
