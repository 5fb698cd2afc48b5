package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestFleetSmoke runs the fleet mode at a small size, both protocols, so
// that it keeps working: RLS holds every limit exactly and refuses nothing
// under it, RLQS holds a stream per Envoy and the buckets they hold, and
// every part's figures are read. It asserts no performance figure.
func TestFleetSmoke(t *testing.T) {
	harness.Require(t, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	// 6 s measured: a simulated Envoy reports its buckets every 5 s
	// (quotaReportEvery), so every stream reports inside it.
	args := []string{"fleet", "-envoys", "4", "-buckets", "40", "-rls-rate", "200", "-rlqs-rate", "2000", "-limit", "20",
		"-window", "1s", "-warmup", "1s", "-duration", "6s", "-rls-timeout", "2s", "-json"}
	if code := run(ctx, args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var rep fleetReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not a report: %v\n%s", err, stdout.String())
	}
	if len(rep.Parts) != 2 || rep.Parts[0].Protocol != protoRLS || rep.Parts[1].Protocol != protoRLQS {
		t.Fatalf("parts %+v, want rls then rlqs", rep.Parts)
	}
	checkFleetPart(t, rep.Parts[0])
	checkFleetPart(t, rep.Parts[1])
	rls, q := rep.Parts[0], rep.Parts[1]
	if w := rls.Windows; w.OverBuckets == 0 || w.Admitted.Min != 1 || w.Admitted.Max != 1 || w.UnderRefused != 0 {
		t.Errorf("RLS windows %+v: want every bucket over the limit admitted exactly the limit, nothing refused under it", w)
	}
	if rls.Failed != 0 || rls.Latency == nil || rls.Latency.P50 <= 0 {
		t.Errorf("RLS: %d failed calls, latency %+v: want none failed, a latency", rls.Failed, rls.Latency)
	}
	qf := q.Quota
	if qf == nil || qf.Streams != 4 || qf.BucketsHeld <= 4 || qf.ReportsPerSec <= 0 || qf.ActionsPerSec <= 0 || (qf.HeapPerBucket == 0 && qf.HeapPerStream == 0) {
		// The heap's figures are read, not judged: at 160 buckets a
		// collection between two reads can make either negative.
		t.Errorf("RLQS figures %+v: want 4 streams holding buckets, reports, assignments, the heap read", qf)
	}
	if qf != nil && (qf.StreamErrors != 0 || qf.StoreErrors != 0 || qf.Refused != 0) {
		t.Errorf("RLQS: %d stream errors, %v store errors, %v refused: want none", qf.StreamErrors, qf.StoreErrors, qf.Refused)
	}
}

// checkFleetPart checks what every part must have: requests decided, the
// CPU of floodgate and Redis, Redis's commands, the shift's figures.
func checkFleetPart(t *testing.T, p fleetPart) {
	t.Helper()
	if p.Requests <= 0 || p.Admitted <= 0 || p.Admitted+p.Denied+p.Failed != p.Requests {
		t.Errorf("%s: %d requests, %d admitted, %d denied, %d failed: want requests, some admitted, the sum", p.Protocol, p.Requests, p.Admitted, p.Denied, p.Failed)
	}
	if p.FloodgateCPU <= 0 || p.RedisCommands <= 0 || len(p.Floodgates) != 1 || len(p.Nodes) != 1 || !p.Nodes[0].Up {
		t.Errorf("%s: floodgate CPU %v µs, %v Redis commands per request, %d floodgates, nodes %+v: want each measured", p.Protocol, p.FloodgateCPU, p.RedisCommands, len(p.Floodgates), p.Nodes)
	}
	if p.Windows.Windows < 2 || p.Shift == nil || p.Shift.Target != 0.75 {
		t.Errorf("%s: %d whole windows, shift %+v: want at least 2, the shift's figures", p.Protocol, p.Windows.Windows, p.Shift)
	}
}

func TestFleetFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for valid
	}{
		{nil, ""},
		{[]string{"-protocols", "rls,grpc"}, `-protocols: "grpc"`},
		{[]string{"-window", "1500ms"}, "-window 1.5s: want whole seconds"},
		{[]string{"-redis", "memcached"}, `-redis "memcached"`},
		{[]string{"-replicas", "1"}, "-replicas 1"},
		{[]string{"-redis", "cluster", "-kill-master", "5s"}, "needs a replica"},
		{[]string{"-redis", "cluster", "-replicas", "1", "-kill-master", "40s"}, "within the measured run"},
		{[]string{"-redis", "cluster", "-replicas", "1", "-kill-master", "5s"}, "one protocol at a time"},
		{[]string{"-redis", "cluster", "-replicas", "1", "-kill-master", "5s", "-protocols", "rlqs"}, ""},
		{[]string{"-envoys", "0"}, "at least 1"},
		{[]string{"-rlqs-rate", "-1"}, "positive rate"},
	} {
		_, err := parseFleetFlags(tc.args, &bytes.Buffer{})
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want valid", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.want)
		}
	}
}

// TestDemand draws from the demand and finds Zipf's weights, and the
// arrivals' mean rate.
func TestDemand(t *testing.T) {
	d := newDemand(100, 10, 1000, 1.1)
	r := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 100)
	const n = 200000
	for range n {
		counts[d.pick(r)]++
	}
	for _, k := range []int{0, 1, 9, 99} {
		want := math.Pow(float64(k+1), -1.1) / harmonic(100, 1.1)
		if got := float64(counts[k]) / n; math.Abs(got-want) > 0.1*want+0.001 {
			t.Errorf("bucket %d drawn %.4f of the time, want %.4f", k, got, want)
		}
	}
	var total int
	for range 1000 {
		total += arrivals(r, 130, 50*time.Millisecond)
	}
	if got := float64(total) / 50; math.Abs(got-130) > 3 {
		t.Errorf("arrivals at 130/s: %.1f/s over 50 s, want 130", got)
	}
	if got := trackedShareAfter(4); got != 0.75 {
		t.Errorf("group A's share after the shift with 4 Envoys: %v, want 0.75", got)
	}
}

func harmonic(n int, s float64) float64 {
	var h float64
	for k := 1; k <= n; k++ {
		h += math.Pow(float64(k), -s)
	}
	return h
}

// TestRLSWindow attributes answers to the window they were decided in,
// from a reset rounded up to whole seconds.
func TestRLSWindow(t *testing.T) {
	c := newFleetCounts(1, 10*time.Second)
	at := func(s float64) time.Time { return time.Unix(0, int64(s*1e9)) }
	for _, tc := range []struct {
		now, reset float64
		window     time.Duration
		want       int64
	}{
		{1000.3, 10, 10 * time.Second, 100},
		{1009.95, 1, 10 * time.Second, 100},
		{1010.0, 10, 10 * time.Second, 101},
		{1000.3, 1, time.Second, 1000},
		{1000.95, 1, time.Second, 1000},
		{1001.02, 1, time.Second, 1001},
	} {
		c.window = tc.window
		st := []*pb.RateLimitResponse_DescriptorStatus{{DurationUntilReset: durationpb.New(time.Duration(tc.reset * float64(time.Second)))}}
		if got := rlsWindow(c, at(tc.now), st); got != tc.want {
			t.Errorf("answer at %v, reset in %vs, windows of %v: window %d, want %d", tc.now, tc.reset, tc.window, got, tc.want)
		}
	}
}

// TestLocalBucket follows a simulated Envoy's bucket through
// assignments as Envoy 1.40 applies them.
func TestLocalBucket(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	tokens := func(max, per uint32, fill time.Duration) *rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction {
		return &rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{AssignmentTimeToLive: durationpb.New(15 * time.Second),
			RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
				MaxTokens: max, TokensPerFill: wrapperspb.UInt32(per), FillInterval: durationpb.New(fill)}}}}
	}
	var lb localBucket
	admitted := func(at time.Time, n int) int {
		k := 0
		for range n {
			if lb.admit(at) {
				k++
			}
		}
		return k
	}
	if got := admitted(t0, 10); got != 10 {
		t.Errorf("no assignment: %d of 10 admitted, want all", got)
	}
	lb.assign(tokens(2, 4, time.Second), t0)
	if got := admitted(t0, 5); got != 2 {
		t.Errorf("a new token bucket of 2: %d of 5 admitted, want 2 (it starts full)", got)
	}
	lb.assign(tokens(2, 4, time.Second), t0.Add(250*time.Millisecond))
	if got := admitted(t0.Add(500*time.Millisecond), 5); got != 2 {
		t.Errorf("the same bucket sent again, 0.5 s at 4/s later: %d admitted, want 2 (tokens kept, refilled)", got)
	}
	if got := admitted(t0.Add(16*time.Second), 10); got != expiredRate {
		t.Errorf("after the time to live: %d of 10 admitted, want the fallback's %d", got, expiredRate)
	}
	if got := admitted(t0.Add(47*time.Second), 10); got != 10 {
		t.Errorf("after the fallback: %d of 10 admitted, want all", got)
	}
}

// TestFleetFailover kills the Sentinel group's master under a small RLS
// fleet, a quarter into a window: decisions fall to the failure policy
// only until the replica serves, the window of the kill admits no more
// than a few requests beyond the limit (the writes the replica had not
// received: none measured on the loopback), and every window after holds
// the limit exactly. docs/reliability.md publishes the bound.
func TestFleetFailover(t *testing.T) {
	harness.Require(t, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	args := []string{"fleet", "-protocols", "rls", "-redis", "sentinel", "-replicas", "1", "-kill-master", "1s",
		"-envoys", "4", "-buckets", "20", "-rls-rate", "300", "-limit", "20", "-window", "1s",
		"-warmup", "1s", "-duration", "9s", "-rls-timeout", "1s", "-json"}
	if code := run(ctx, args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var rep fleetReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil || len(rep.Parts) != 1 || rep.Parts[0].Failover == nil {
		t.Fatalf("output is not a report with a failover (%v):\n%s", err, stdout.String())
	}
	f := rep.Parts[0].Failover
	t.Logf("failover: %+v", *f)
	switch {
	case f.Err != "" || f.PromotedMs <= 0 || f.PromotedMs > 10000:
		t.Errorf("the replica served %v ms after the kill (%s), want within 10 s", f.PromotedMs, f.Err)
	case f.FailedRequests == 0 || f.LastFailureMs > f.PromotedMs+3000:
		t.Errorf("%d failure-policy answers, the last %v ms after the kill: want some, none 3 s after the replica served (%v ms)", f.FailedRequests, f.LastFailureMs, f.PromotedMs)
	}
	if f.KillWindowWorst > 5 {
		t.Errorf("a bucket admitted %d beyond its limit in the window of the kill, want at most 5", f.KillWindowWorst)
	}
	if f.Recovered != 0 {
		t.Errorf("windows after the failure policy's last answer strayed by %d from the limit, want 0 (-1: no such window)", f.Recovered)
	}
}
