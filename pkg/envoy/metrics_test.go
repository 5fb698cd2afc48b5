package envoy

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// hitCounts are a rule's six hit counters, in the order of hitCounterNames.
type hitCounts [6]float64

var hitCounterNames = [...]string{"hits", "within_limit", "near_limit", "over_limit", "shadow_mode", "not_charged"}

func ruleCounts(t *testing.T, g prometheus.Gatherer, rule string) hitCounts {
	t.Helper()
	var c hitCounts
	for i, n := range hitCounterNames {
		c[i] = metricValue(t, g, "floodgate_"+n+"_total", map[string]string{"domain": "test", "rule": rule})
	}
	return c
}

// TestMetricsCountWhatHappened: the hit counters say what was done to each
// descriptor's hits. One request counts at most one more hit than its
// descriptor's largest limit, whatever hits_addend says; a refused request
// adds nothing to within_limit (all or nothing: its admitted descriptors
// were not charged, and count as not_charged); hits = within + over +
// not_charged.
func TestMetricsCountWhatHappened(t *testing.T) {
	type want map[string]hitCounts // rule -> increase: hits, within, near, over, shadow, not charged
	tests := []struct {
		name    string
		opts    Options
		before  []*pb.RateLimitRequest // sent first, not measured
		req     *pb.RateLimitRequest
		overall pb.RateLimitResponse_Code
		want    want
	}{
		{
			name:    "a usage report (a descriptor's hits_addend) of 2^64-1 is charged, counted up to limit.MaxCount",
			req:     request("test", withAddend(desc("user", "a"), math.MaxUint64)),
			overall: pb.RateLimitResponse_OVER_LIMIT,
			want:    want{"test.user": {float64(limit.MaxCount), 0, 0, float64(limit.MaxCount), 0, 0}},
		},
		{
			name:    "the request's hits_addend of 2^32-1 too",
			req:     &pb.RateLimitRequest{Domain: "test", HitsAddend: math.MaxUint32, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a")}},
			overall: pb.RateLimitResponse_OVER_LIMIT,
			want:    want{"test.user": {4, 0, 0, 4, 0, 0}},
		},
		{
			name:    "several limits: one more than the largest",
			req:     &pb.RateLimitRequest{Domain: "test", HitsAddend: 1000, Descriptors: []*rlv3.RateLimitDescriptor{desc("tenant", "t")}},
			overall: pb.RateLimitResponse_OVER_LIMIT,
			want:    want{"test.tenant": {6, 0, 0, 6, 0, 0}},
		},
		{
			name:    "a limit of 0: one",
			req:     request("test", withAddend(desc("zero", "z"), math.MaxUint64)),
			overall: pb.RateLimitResponse_OVER_LIMIT,
			want:    want{"test.zero": {1, 0, 0, 1, 0, 0}},
		},
		{
			// Near the limit: only the third hit reached 80 % of 3, as
			// the reference counts a request of several hits.
			name:    "admitted hits are counted whole",
			req:     request("test", withAddend(desc("user", "a"), 3)),
			overall: pb.RateLimitResponse_OK,
			want:    want{"test.user": {3, 3, 1, 0, 0, 0}},
		},
		{
			name:    "another descriptor over: nothing within, the admitted one not charged",
			before:  []*pb.RateLimitRequest{request("test", desc("ip", "x"))},
			req:     request("test", desc("user", "a"), desc("ip", "x")),
			overall: pb.RateLimitResponse_OVER_LIMIT,
			want:    want{"test.user": {1, 0, 0, 0, 0, 1}, "test.ip": {1, 0, 0, 1, 0, 0}},
		},
		{
			name:    "the same under the global shadow mode, answered OK",
			opts:    Options{ShadowMode: true},
			before:  []*pb.RateLimitRequest{request("test", desc("ip", "x"))},
			req:     request("test", desc("user", "a"), desc("ip", "x")),
			overall: pb.RateLimitResponse_OK,
			want:    want{"test.user": {1, 0, 0, 0, 0, 1}, "test.ip": {1, 0, 0, 1, 0, 0}},
		},
		{
			name:    "a shadow-mode rule over blocks nothing: the others are charged",
			before:  []*pb.RateLimitRequest{request("test", desc("shadow", "s"))},
			req:     request("test", desc("shadow", "s"), desc("user", "a")),
			overall: pb.RateLimitResponse_OK,
			want:    want{"test.shadow": {1, 0, 0, 1, 1, 0}, "test.user": {1, 1, 0, 0, 0, 0}},
		},
		{
			name:    "one quota over: the other is charged, in the same store call, and within",
			before:  []*pb.RateLimitRequest{request("test", desc("quota_a", "x"))},
			req:     request("test", desc("quota_a", "x"), desc("quota_b", "y")),
			overall: pb.RateLimitResponse_OK,
			want:    want{"test.quota_a": {1, 0, 0, 1, 0, 0}, "test.quota_b": {1, 1, 1, 0, 0, 0}},
		},
		{
			name:    "every quota over: refused, the admitted descriptor not charged",
			before:  []*pb.RateLimitRequest{request("test", desc("quota_a", "x")), request("test", desc("quota_b", "y"))},
			req:     request("test", desc("quota_a", "x"), desc("quota_b", "y"), desc("user", "a")),
			overall: pb.RateLimitResponse_OVER_LIMIT,
			want:    want{"test.quota_a": {1, 0, 0, 1, 0, 0}, "test.quota_b": {1, 0, 0, 1, 0, 0}, "test.user": {1, 0, 0, 0, 0, 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			for _, r := range tc.before {
				if _, err := h.svc.ShouldRateLimit(context.Background(), r); err != nil {
					t.Fatal(err)
				}
			}
			base := map[string]hitCounts{}
			for rule := range tc.want {
				base[rule] = ruleCounts(t, h.reg, rule)
			}
			resp, err := h.svc.ShouldRateLimit(context.Background(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode != tc.overall {
				t.Fatalf("overall %v, want %v", resp.OverallCode, tc.overall)
			}
			for rule, w := range tc.want {
				got := ruleCounts(t, h.reg, rule)
				for i := range got {
					got[i] -= base[rule][i]
				}
				if got != w {
					t.Errorf("%s increased by %v, want %v (%v)", rule, got, w, hitCounterNames)
				}
				if got[0] != got[1]+got[3]+got[5] {
					t.Errorf("%s: hits %v != within + over + not charged", rule, got)
				}
			}
		})
	}
}

// TestUsageMetrics: a usage report counts its units in
// floodgate_usage_charged_total and itself in floodgate_usage_reports_total,
// within its limit or past it, and in a request another descriptor
// refuses; a look (hits_addend 0) and a request's own hits_addend count in
// neither.
func TestUsageMetrics(t *testing.T) {
	h := newHarness(t, Options{})
	for _, r := range []*pb.RateLimitRequest{
		request("test", withAddend(desc("user", "u"), 2)),
		request("test", withAddend(desc("user", "u"), 5)), // past the limit of 3
		request("test", withAddend(desc("user", "u"), 0)),
		{Domain: "test", HitsAddend: 2, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "v")}},
		request("test", withAddend(desc("user", "w"), 1), desc("zero", "z")), // refused by the other
	} {
		if _, err := h.svc.ShouldRateLimit(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"domain": "test", "rule": "test.user"}
	if got := metricValue(t, h.reg, "floodgate_usage_charged_total", labels); got != 8 {
		t.Errorf("floodgate_usage_charged_total %v, want 8 (2 + 5 + 1)", got)
	}
	if got := metricValue(t, h.reg, "floodgate_usage_reports_total", labels); got != 3 {
		t.Errorf("floodgate_usage_reports_total %v, want 3", got)
	}
}

// TestStatsdCountsWhatHappened: statsd counts the same hits as Prometheus:
// bounded per request, and nothing within_limit for a refused request.
func TestStatsdCountsWhatHappened(t *testing.T) {
	srv := statsdtest.Listen(t)
	client := newStatsdClient(t, srv.Addr())
	m, err := NewMetrics(prometheus.NewRegistry(), MetricsOptions{Store: "memory", Statsd: client})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(statsdRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0 }
	svc := newTestService(t, set, limit.NewMemory(limit.MemoryOptions{Now: now}), Options{Metrics: m, Now: now})
	reqs := []struct {
		req  *pb.RateLimitRequest
		want pb.RateLimitResponse_Code
	}{
		{&pb.RateLimitRequest{Domain: "shop", HitsAddend: math.MaxUint32, Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "a")}},
			pb.RateLimitResponse_OVER_LIMIT}, // 6 of 5, over
		{request("shop", desc("plan", "free")), pb.RateLimitResponse_OK},                            // within, near
		{request("shop", desc("user", "b"), desc("plan", "free")), pb.RateLimitResponse_OVER_LIMIT}, // user not charged
	}
	for i, r := range reqs {
		resp, err := svc.ShouldRateLimit(context.Background(), r.req)
		if err != nil || resp.OverallCode != r.want {
			t.Fatalf("request %d: %v, %v; want %v", i, resp, err, r.want)
		}
	}
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	rl := "ratelimit.service.rate_limit."
	checkStatsdLines(t, srv.Lines(t), []statsdLine{
		{rl + "shop.user.total_hits", 7, "c"},
		{rl + "shop.user.over_limit", 6, "c"},
		{rl + "shop.user.not_charged", 1, "c"},
		{rl + "shop.plan_free.total_hits", 2, "c"},
		{rl + "shop.plan_free.within_limit", 1, "c"},
		{rl + "shop.plan_free.near_limit", 1, "c"},
		{rl + "shop.plan_free.over_limit", 1, "c"},
		{"ratelimit_server.ShouldRateLimit.total_requests", len(reqs), "c"},
	}, len(reqs), func(l statsdLine) string { return fmt.Sprintf("%s:%d|%s", l.name, l.value, l.typ) })
}

// TestMetricsReleaseReplacedRules: once a reload has replaced the rule set,
// the metrics do not keep the old set alive until the next request, so that
// an idle server does not hold two large rule sets after a reload.
func TestMetricsReleaseReplacedRules(t *testing.T) {
	parse := func() *rules.Set {
		t.Helper()
		set, err := rules.Parse(map[string][]byte{"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")}, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	m, err := NewMetrics(prometheus.NewRegistry(), MetricsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	src := &switchingRules{set: parse()}
	svc, err := New(src, limit.NewMemory(limit.MemoryOptions{}), Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}}
	if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	collected := make(chan struct{})
	runtime.AddCleanup(src.set, func(ch chan struct{}) { close(ch) }, collected)
	src.set = parse() // the reload; no request follows
	for deadline := time.Now().Add(5 * time.Second); ; {
		runtime.GC()
		select {
		case <-collected:
		case <-time.After(10 * time.Millisecond):
			if time.Now().Before(deadline) {
				continue
			}
			t.Error("the replaced rule set is still alive 5 s after the reload")
		}
		break
	}
	runtime.KeepAlive(svc) // the service, and its metrics, serve on
}
