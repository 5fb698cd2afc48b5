package rlqs

import (
	"context"
	"fmt"
	"testing"
	"time"
	"unique"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestShareIndependentOfPhase: two streams on two instances sharing a
// store, reporting every interval with a steady demand each, get shares
// of the fleet's demand equal to their part of it, whatever the delay
// between their reports and wherever the reports fall in the interval.
// (Shares read from a sliding window over two intervals came out between
// 0.35 and 0.67 for equal demands, depending on the phases.)
func TestShareIndependentOfPhase(t *testing.T) {
	const interval = 5 * time.Second
	for _, demand := range [][2]int64{{100, 100}, {150, 50}, {10, 1000}} {
		for _, offset := range []time.Duration{0, 100 * time.Millisecond, 2500 * time.Millisecond, 4900 * time.Millisecond} {
			for _, gap := range []time.Duration{time.Millisecond, 1 * time.Second, 2500 * time.Millisecond, 4999 * time.Millisecond} {
				t.Run(fmt.Sprintf("demand %v, first at +%v, second %v later", demand, offset, gap), func(t *testing.T) {
					clk := &clock{t: epoch.Add(offset)}
					mem := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
					var ls [2]*Service
					var bs [2]*bucket
					for i := range ls {
						var err error
						if ls[i], err = New(func() *rules.Set { return nil }, mem, Options{ReportInterval: interval}); err != nil {
							t.Fatal(err)
						}
						bs[i] = &bucket{demandKey: unique.Make("demand")}
					}
					at := [2]time.Duration{0, gap}
					for round := 0; round < 6; round++ {
						for i := range ls {
							if i == 1 {
								clk.Add(at[1])
							}
							now := clk.Now()
							bs[i].note(now, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
								BucketId: &rlqspb.BucketId{}, NumRequestsDenied: uint64(demand[i])})
							if _, err := ls[i].charge(context.Background(), now, bs[i:i+1]); err != nil {
								t.Fatal(err)
							}
							bs[i].record(now, interval)
							if round < 2 {
								continue
							}
							own, fleet := bs[i].demand(now, interval)
							want := float64(demand[i]+1) / float64(demand[0]+demand[1]+1)
							if got := share(own, fleet); got < want-0.01 || got > want+0.01 {
								t.Errorf("round %d, stream %d: share %.3f (own %d, fleet %d), want %.3f", round, i, got, own, fleet, want)
							}
						}
						clk.Add(interval - at[1])
					}
				})
			}
		}
	}
}
