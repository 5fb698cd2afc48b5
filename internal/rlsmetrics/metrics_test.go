package rlsmetrics

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/pkg/envoy"
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
		opts    envoy.Options
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
			opts:    envoy.Options{ShadowMode: true},
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
			h := newHarness(t, tc.opts, Options{Store: "memory"})
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
	h := newHarness(t, envoy.Options{}, Options{})
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
	m, err := New(prometheus.NewRegistry(), Options{Store: "memory", Statsd: client})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(statsdRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0 }
	svc := newService(t, set, limit.NewMemory(limit.MemoryOptions{Now: now}), envoy.Options{Metrics: m, Now: now})
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
	m, err := New(prometheus.NewRegistry(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	src := &switchingRules{set: parse()}
	svc, err := envoy.New(src.Current, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{Metrics: m})
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

func TestMetrics(t *testing.T) {
	h := newHarness(t, envoy.Options{NearLimitRatio: 0.6}, Options{Store: "memory"})
	for range 4 {
		h.ask(t, request("test", desc("user", "alice")))
	}
	h.ask(t, request("test", desc("shadow", "s")))
	h.ask(t, request("test", desc("shadow", "s")))
	h.ask(t, request("test", desc("detailed", "v1")))
	h.ask(t, request("nowhere", desc("user", "a")))

	tests := []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
	}{
		{"hits", "floodgate_hits_total", map[string]string{"domain": "test", "rule": "test.user"}, 4},
		{"within", "floodgate_within_limit_total", map[string]string{"domain": "test", "rule": "test.user"}, 3},
		{"near (used >= 60% of 3: the 2nd and 3rd hits)", "floodgate_near_limit_total", map[string]string{"domain": "test", "rule": "test.user"}, 2},
		{"over", "floodgate_over_limit_total", map[string]string{"domain": "test", "rule": "test.user"}, 1},
		{"shadow over counts as over", "floodgate_over_limit_total", map[string]string{"domain": "test", "rule": "test.shadow"}, 1},
		{"shadow", "floodgate_shadow_mode_total", map[string]string{"domain": "test", "rule": "test.shadow"}, 1},
		{"detailed_metric labels with the values", "floodgate_hits_total", map[string]string{"domain": "test", "rule": "test.detailed_v1"}, 1},
		{"unknown domain", "floodgate_domain_not_found_total", nil, 1},
		{"decisions observed", "floodgate_decision_duration_seconds", nil, 8},
		{"all hits", "floodgate_hits_total", nil, 7},
	}
	for _, tc := range tests {
		if got := metricValue(t, h.reg, tc.metric, tc.labels); got != tc.want {
			t.Errorf("%s: %s%v = %v, want %v", tc.name, tc.metric, tc.labels, got, tc.want)
		}
	}
	if n := seriesCount(t, h.reg, "floodgate_hits_total"); n != 3 {
		t.Errorf("floodgate_hits_total has %d series, want 3 (user, shadow, detailed)", n)
	}
}

// TestBlockedIsTheLimiters: whether a call charged its hits is the
// Limiter's verdict, which the service does not decide again. A Limiter
// that admits every hit and yet says the call was blocked gets the
// admitted hits counted as not charged, never as within their limit (a
// service that applied limit.Blocked itself would count them within); the
// answer is still the decisions'.
func TestBlockedIsTheLimiters(t *testing.T) {
	for _, tc := range []struct {
		blocked                bool
		wantWithin, wantNotChg float64
	}{
		{false, 1, 0},
		{true, 0, 1},
	} {
		t.Run(fmt.Sprint("blocked=", tc.blocked), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(reg, Options{})
			if err != nil {
				t.Fatal(err)
			}
			svc := newService(t, parse(t, testRules), verdictLimiter{blocked: tc.blocked}, envoy.Options{Metrics: m})
			resp, err := svc.ShouldRateLimit(context.Background(), request("test", desc("user", "a")))
			if err != nil {
				t.Fatal(err)
			}
			if st := resp.Statuses[0]; st.Code != pb.RateLimitResponse_OK || st.LimitRemaining != 3 {
				t.Errorf("status %v, want OK with 3 remaining", st)
			}
			labels := map[string]string{"domain": "test", "rule": "test.user"}
			if got := metricValue(t, reg, "floodgate_within_limit_total", labels); got != tc.wantWithin {
				t.Errorf("within_limit_total = %v, want %v", got, tc.wantWithin)
			}
			if got := metricValue(t, reg, "floodgate_not_charged_total", labels); got != tc.wantNotChg {
				t.Errorf("not_charged_total = %v, want %v", got, tc.wantNotChg)
			}
		})
	}
}

// verdictLimiter admits every hit with 3 remaining and returns blocked.
type verdictLimiter struct{ blocked bool }

func (v verdictLimiter) Evaluate(_ context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	for i := range hits {
		ds[i] = limit.Decision{Allowed: true, Remaining: 3}
	}
	return v.blocked, nil
}

// Clients choose the values of detailed_metric descriptors; whatever they
// send, a rule makes at most MaxValueSeries value series, then counts the
// rest under "<rule>._other_", and every hit is still counted.
func TestValueSeriesAreCapped(t *testing.T) {
	const max, values = 50, 10_000
	h := newHarness(t, envoy.Options{}, Options{MaxValueSeries: max})
	for i := range values {
		h.ask(t, request("test", desc("detailed", fmt.Sprintf("v%d", i))))
	}
	for _, name := range []string{"floodgate_hits_total", "floodgate_within_limit_total"} {
		if n := seriesCount(t, h.reg, name); n != max+1 {
			t.Errorf("%s has %d series after %d distinct values, want %d", name, n, values, max+1)
		}
	}
	if got := metricValue(t, h.reg, "floodgate_hits_total", nil); got != values {
		t.Errorf("hits counted = %v, want %d", got, values)
	}
	if got := metricValue(t, h.reg, "floodgate_hits_total", map[string]string{"rule": "test.detailed._other_"}); got != values-max {
		t.Errorf("hits under _other_ = %v, want %d", got, values-max)
	}
}

// TestDecisionsByAnswer: floodgate_decision_duration_seconds observes
// every answer under its code: ok, over_limit, or the gRPC error's name in
// lower case (invalidargument, unavailable, and internal for a Limiter
// that panicked).
func TestDecisionsByAnswer(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	set := parse(t, testRules)
	svc := newService(t, set, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{Metrics: m})
	down := newService(t, set, failingStore{errors.New("connection refused")}, envoy.Options{Metrics: m, FailureMode: rules.FailureUnavailable})
	buggy := newService(t, set, panicking{}, envoy.Options{Metrics: m})
	for _, c := range []struct {
		svc *envoy.Service
		req *pb.RateLimitRequest
	}{
		{svc, request("test", desc("user", "a"))},
		{svc, request("test", desc("zero", "z"))},
		{svc, request("", desc("user", "a"))},
		{down, request("test", desc("user", "a"))},
		{buggy, request("test", desc("user", "a"))},
		{buggy, request("test", desc("user", "a"))}, // the pooled scratch survives the panic
	} {
		c.svc.ShouldRateLimit(context.Background(), c.req)
	}
	for code, want := range map[string]float64{"ok": 1, "over_limit": 1, "invalidargument": 1, "unavailable": 1, "internal": 2} {
		if got := metricValue(t, reg, "floodgate_decision_duration_seconds", map[string]string{"code": code}); got != want {
			t.Errorf("answers observed with code %s: %v, want %v", code, got, want)
		}
	}
}

// panicking is a Limiter that panics.
type panicking struct{}

func (panicking) Evaluate(context.Context, []limit.Hit, []limit.Decision) (bool, error) {
	panic("limiter bug")
}

// TestFailureMetrics: each request the failure policy answers counts once
// in floodgate_store_failure_answers_total, under the policy applied and
// the cause (the same words as the answer's metadata), and each failed
// store call in floodgate_store_errors_total; a request that needs no
// store call counts in neither.
func TestFailureMetrics(t *testing.T) {
	refused := failingStore{errors.New("connection refused")}
	for _, tc := range []struct {
		name        string
		store       limit.Limiter
		global      rules.FailureMode
		req         *pb.RateLimitRequest
		mode, cause string // "" for no answer of the failure policy
	}{
		{"error, allowed", refused, rules.FailureAllow, request("test", desc("user", "a")), "allow", "error"},
		{"a rule's deny wins over the global allow", refused, rules.FailureAllow, request("test", desc("user", "a"), desc("strict", "x")), "deny", "error"},
		{"unavailable", refused, rules.FailureUnavailable, request("test", desc("user", "a")), "unavailable", "error"},
		{"the deadline", blockingStore{}, rules.FailureAllow, request("test", desc("user", "a")), "allow", "deadline"},
		{"circuit open", failingStore{fmt.Errorf("store: %w after repeated failures", limit.ErrCircuitOpen)}, rules.FailureUnavailable, request("test", desc("user", "a")), "unavailable", "circuit_open"},
		{"memory store full", failingStore{fmt.Errorf("no room in shard 0: %w", limit.ErrFull)}, rules.FailureDeny, request("test", desc("user", "a")), "deny", "store_full"},
		{"no store call, no failure", refused, rules.FailureUnavailable, request("test", desc("nomatch", "y")), "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(reg, Options{Store: "redis"})
			if err != nil {
				t.Fatal(err)
			}
			svc := newService(t, parse(t, testRules), tc.store, envoy.Options{Metrics: m, FailureMode: tc.global})
			ctx := context.Background()
			if _, ok := tc.store.(blockingStore); ok {
				// The caller's deadline, as Envoy sends its filter's
				// timeout, ends the blocking store's call. The others get
				// none: on a busy machine the deadline could pass before
				// they fail, and the cause would be it.
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 5*time.Millisecond)
				defer cancel()
			}
			svc.ShouldRateLimit(ctx, tc.req)
			want := 0.0
			if tc.mode != "" {
				want = 1
			}
			if n := metricValue(t, reg, "floodgate_store_failure_answers_total", map[string]string{"mode": tc.mode, "cause": tc.cause}); tc.mode != "" && n != 1 {
				t.Errorf("store_failure_answers_total{mode=%q,cause=%q} = %v, want 1", tc.mode, tc.cause, n)
			}
			if n := metricValue(t, reg, "floodgate_store_failure_answers_total", nil); n != want {
				t.Errorf("store_failure_answers_total = %v in all, want %v", n, want)
			}
			if n := metricValue(t, reg, "floodgate_store_errors_total", map[string]string{"store": "redis"}); n != want {
				t.Errorf("store_errors_total = %v, want %v", n, want)
			}
		})
	}
}

// failingStore fails every call with err, as a store that is down does.
type failingStore struct{ err error }

func (f failingStore) Evaluate(context.Context, []limit.Hit, []limit.Decision) (bool, error) {
	return false, f.err
}

// blockingStore blocks until the call's deadline, then fails with it, as
// a store that does not answer does.
type blockingStore struct{}

func (blockingStore) Evaluate(ctx context.Context, _ []limit.Hit, _ []limit.Decision) (bool, error) {
	<-ctx.Done()
	return false, fmt.Errorf("store: %w", ctx.Err())
}
