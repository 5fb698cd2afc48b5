package rlqs

import (
	"context"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestReloadUncountedBucket: what a bucket went through while no limit
// counted it is not held against the limit a reload gives it later, nor
// does a store failure from before the reload outlive its limit.
func TestReloadUncountedBucket(t *testing.T) {
	const (
		unlimited = `
domain: quota
descriptors:
  - key: tenant
`
		limited = `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 600}
`
	)
	acme := tenant("acme")
	for _, c := range []struct {
		name string
		// before and after are the rules before and after the reload.
		before, after string
		// full: the store has room for no counter (every round fails).
		full bool
		// fail is the server's failure mode.
		fail rules.FailureMode
		// busy is what Envoy admits before the reload.
		busy uint64
		// first is the assignment before the reload, then the one after.
		first, then string
	}{
		// The 1,000 requests admitted while unlimited are not charged to
		// the new limit: 600 - 10 left over the window's last 55 s.
		{name: "a limit added to a busy bucket", before: unlimited, after: limited, busy: 1000, first: "allow", then: "tb 11/1s max 3"},
		// The store failed while the limit stood: deny-all, the failure
		// mode. The limit removed, the bucket is allowed at once.
		{name: "a limit removed while the store fails", before: limited, after: unlimited, full: true, fail: rules.FailureDeny, busy: 1, first: "deny", then: "allow"},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &clock{t: epoch}
			mem := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
			if c.full {
				// Smaller than a bucket's counter and its demand's.
				mem = limit.NewMemory(limit.MemoryOptions{MaxEntries: 1, Now: clk.Now})
			}
			src := &swapRules{}
			src.Store(parseRules(t, c.before))
			h := serveRules(t, src.Current, mem, Options{Now: clk.Now, FailureMode: c.fail})
			q := h.open(t, "envoy-1")
			q.report("quota", use{bucket: acme, allowed: c.busy})
			if got := answers(q.next(wait)); len(got) != 1 || got[0].what != c.first {
				t.Fatalf("before the reload: %+v, want %s", got, c.first)
			}
			clk.Add(5 * time.Second)
			src.Store(parseRules(t, c.after))
			q.report("quota", use{bucket: acme, allowed: 10})
			if got := answers(q.next(wait)); len(got) != 1 || got[0].what != c.then {
				t.Fatalf("after the reload: %+v, want %s", got, c.then)
			}
		})
	}
}

// TestUnavailableDoesNotSpin: a bucket whose rule's failure mode is
// unavailable, while the store fails past its assignment's time to live,
// gets nothing, and its stream does not wake again and again for it
// with the clock standing still: each wake would be one more store call.
func TestUnavailableDoesNotSpin(t *testing.T) {
	set := parseRules(t, `
domain: quota
descriptors:
  - key: gone
    failure_mode: unavailable
    rate_limit: {unit: minute, requests_per_unit: 10}
`)
	clk := &clock{t: epoch}
	svc, err := New(func() *rules.Set { return set }, limit.NewMemory(limit.MemoryOptions{Now: clk.Now}), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	st := svc.newStream(nil, "envoy-1")
	st.timer = time.NewTimer(time.Hour)
	defer st.timer.Stop()
	ctx := context.Background()
	gone := &rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqspb.BucketId{Bucket: map[string]string{"gone": "x"}}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1,
	}}}
	if err := st.report(ctx, gone); err != nil || len(st.actions) != 1 {
		t.Fatalf("first round: %d actions, %v; want one assignment", len(st.actions), err)
	}
	st.schedule(false)
	// From now on every store call fails, as one to a Redis that does
	// not answer does: its context is done.
	failing, cancel := context.WithCancel(ctx)
	cancel()
	// Past the time the assignment is kept through a failure.
	clk.Add(DefaultAssignmentTTL - DefaultReportInterval + time.Second)
	if err := st.report(failing, gone); err != nil || len(st.actions) != 0 {
		t.Fatalf("failed round: %d actions, %v; want none (unavailable)", len(st.actions), err)
	}
	st.schedule(false)
	// As run does: wake whenever the timer is due, the clock standing.
	wakes := 0
	for ; !st.nextWake.After(clk.Now()) && wakes < 10; wakes++ {
		if err := st.wake(failing); err != nil {
			t.Fatal(err)
		}
		st.schedule(true)
	}
	// One early wake is allowed (schedule(false) keeps the earlier time).
	if wakes > 1 {
		t.Fatalf("the stream woke %d times at the same instant (next wake %v, now %v): a store call each, a busy loop while the store fails",
			wakes, st.nextWake.Sub(clk.Now()), clk.Now().Sub(epoch))
	}
	// The store back, Envoy's next report brings the assignment again.
	clk.Add(DefaultReportInterval)
	if err := st.report(ctx, gone); err != nil || len(st.actions) != 1 {
		t.Fatalf("the store back: %d actions, %v; want the assignment", len(st.actions), err)
	}
}

// TestReconnectKeepsShare: a lone Envoy that reconnects (a network
// blip, or a floodgate shut down: Shutdown sends every Envoy to another
// instance) keeps its pace. Its new stream has no demand of its own in
// the slot before, which holds the old stream's: its share there is
// 1/(fleet+1), and its first assignment after the reconnect a fiftieth
// of the one before (tb 2/10s against 10/s), for a report interval.
func TestReconnectKeepsShare(t *testing.T) {
	set := parseRules(t, tenantRules)
	h := serve(t, set, nil, Options{})
	steady := use{bucket: tenant("acme"), allowed: 40, denied: 10}
	q := h.open(t, "envoy-1")
	for i := range 4 {
		q.report("quota", steady)
		// The round has read the clock once the report is counted.
		h.waitMetric(t, float64(i+1), "reports")
		h.clock.Add(DefaultReportInterval)
	}
	q.cancel()
	again := h.open(t, "envoy-1")
	again.report("quota", steady)
	// 200 of 600 charged, 40 s left: 10 a second, all of it the
	// stream's, as the old stream would have had.
	want := []answer{{bucket: tenant("acme"), what: "tb 10/1s max 3", ttl: DefaultAssignmentTTL}}
	if got := answers(again.next(wait)); !sameAnswers(got, want) {
		t.Fatalf("after reconnecting: %+v, want the pace before, %+v", got, want)
	}
}
