package limit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// A program limits each client to 5 requests a minute with the in-memory
// limiter. The clock is fixed so that the output does not change; leave
// MemoryOptions.Now nil to use time.Now.
func Example() {
	now := time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)
	m := limit.NewMemory(limit.MemoryOptions{Now: func() time.Time { return now }})
	perMinute := limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Minute}

	hits := []limit.Hit{{Key: "client-42", Spec: perMinute, Cost: 2}}
	decisions := make([]limit.Decision, len(hits))
	for range 3 {
		blocked, err := m.Evaluate(context.Background(), hits, decisions)
		if err != nil {
			fmt.Println(err)
			return
		}
		d := decisions[0]
		fmt.Printf("blocked %v, allowed %v, remaining %d, reset after %v, retry after %v\n",
			blocked, d.Allowed, d.Remaining, d.ResetAfter, d.RetryAfter)
	}
	// Output:
	// blocked false, allowed true, remaining 3, reset after 50s, retry after 0s
	// blocked false, allowed true, remaining 1, reset after 50s, retry after 0s
	// blocked true, allowed false, remaining 1, reset after 50s, retry after 50s
}
