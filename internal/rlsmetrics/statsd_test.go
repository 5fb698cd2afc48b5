package rlsmetrics

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// statsdRules have a rule of each kind whose statsd name the reference
// server derives differently.
const statsdRules = `
domain: shop
descriptors:
  - key: user                       # key-only: shop.user
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: plan
    value: free                     # exact value: shop.plan_free
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: client
    detailed_metric: true           # the request's value: shop.client_web:1
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: remote_address
    detailed_metric: true           # IPv4 dots become '_'
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /api/*                   # wildcard, nested: shop.path_/api/*.method_GET
    descriptors:
      - key: method
        value: GET
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: app                        # value_to_metric below a key-only level: shop.app.tier_gold
    descriptors:
      - key: tier
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: region
    value: eu*                      # value_to_metric below a wildcard: shop.region_eu*.zone_z1
    descriptors:
      - key: zone
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 10}
  - key: file
    value: img/*                    # a shared wildcard, detailed: one name, shop.file_img/*
    share_threshold: true
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: token
    detailed_metric: true           # an empty value keeps its '_': shop.token_
    rate_limit: {unit: minute, requests_per_unit: 10}
`

// statsdLine is one expected line: a name, its value and its type.
type statsdLine struct {
	name  string
	value int
	typ   string
}

// TestStatsdReferenceNames sends a known sequence of requests through
// services that share one Metrics with statsd on, flushes to a real UDP
// socket, and checks every line: the reference server's names, the counts,
// and EXTRA_TAGS as lyft/gostats writes them into plain statsd names or as
// DogStatsD tags. A last request is sent at Close.
func TestStatsdReferenceNames(t *testing.T) {
	tags := []statsd.Tag{{Key: "zone", Value: "eu.1"}, {Key: "env", Value: "prod"}}
	for _, tc := range []struct {
		name string
		opts statsd.Options
		line func(statsdLine) string
	}{
		{"plain statsd", statsd.Options{}, func(l statsdLine) string {
			return fmt.Sprintf("%s:%d|%s", l.name, l.value, l.typ)
		}},
		{"plain statsd with EXTRA_TAGS", statsd.Options{Tags: tags}, func(l statsdLine) string {
			return fmt.Sprintf("%s.__env=prod.__zone=eu_1:%d|%s", l.name, l.value, l.typ)
		}},
		{"DogStatsD with EXTRA_TAGS", statsd.Options{Tags: tags, DogStatsD: true}, func(l statsdLine) string {
			return fmt.Sprintf("%s:%d|%s|#env:prod,zone:eu_1", l.name, l.value, l.typ)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := statsdtest.Listen(t)
			tc.opts.Addr, tc.opts.FlushInterval = srv.Addr(), time.Hour
			client, err := statsd.New(tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			m, err := New(prometheus.NewRegistry(), Options{Store: "memory", Statsd: client})
			if err != nil {
				t.Fatal(err)
			}
			set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(statsdRules)}, rules.Options{})
			if err != nil {
				t.Fatal(err)
			}
			now := func() time.Time { return t0 }
			store := limit.NewMemory(limit.MemoryOptions{Now: now})
			svc := newService(t, set, store, envoy.Options{Metrics: m, Now: now})
			down := newService(t, set, failingStore{errors.New("connection refused")}, envoy.Options{Metrics: m, Now: now})
			shadow := newService(t, set, store, envoy.Options{Metrics: m, Now: now, ShadowMode: true})

			calls := 0
			ask := func(s *envoy.Service, r *pb.RateLimitRequest) *pb.RateLimitResponse {
				t.Helper()
				calls++
				resp, _ := s.ShouldRateLimit(context.Background(), r)
				return resp
			}
			for range 6 { // 5 within, the 4th and 5th near (80 %), 1 over
				ask(svc, request("shop", desc("user", "alice")))
			}
			ask(svc, request("shop", desc("plan", "free"))) // within, and near: 1 of 1
			ask(svc, request("shop", desc("plan", "pro")))  // no rule
			for range 2 {                                   // shadow mode: within (near), then over yet OK
				if resp := ask(svc, request("shop", desc("trial", "t"))); resp.OverallCode != pb.RateLimitResponse_OK {
					t.Fatalf("shadow mode rule answered %v", resp.OverallCode)
				}
			}
			ask(svc, request("shop", desc("client", "web:1"), desc("client", "web:1"), desc("client", "ios")))
			ask(svc, request("shop", desc("remote_address", "10.0.0.1")))
			ask(svc, request("shop", desc("path", "/api/orders", "method", "GET")))
			ask(svc, request("shop", desc("app", "a1", "tier", "gold")))
			ask(svc, request("shop", desc("region", "eu-west", "zone", "z1")))
			ask(svc, request("shop", desc("file", "img/a"), desc("file", "img/b")))
			ask(svc, request("shop", desc("token", "")))
			// An override is named by the request's values, whatever rule it meets.
			ask(svc, request("shop", withOverride(desc("user", "bob"), 1, typev3.RateLimitUnit_HOUR)))
			ask(svc, request("nowhere", desc("user", "alice"), desc("user", "bob"))) // unknown domain: each descriptor counts
			ask(svc, request("", desc("user", "alice")))                             // invalid: a service error
			ask(down, request("shop", desc("user", "carol")))                        // the store fails: a Redis error
			ask(shadow, request("shop", desc("plan", "free")))                       // over, OK by the global shadow mode

			flush := func() []string {
				t.Helper()
				if err := client.Flush(); err != nil {
					t.Fatal(err)
				}
				return srv.Lines(t)
			}
			rl := "ratelimit.service.rate_limit."
			want := []statsdLine{
				{rl + "shop.user.total_hits", 6, "c"},
				{rl + "shop.user.within_limit", 5, "c"},
				{rl + "shop.user.near_limit", 2, "c"},
				{rl + "shop.user.over_limit", 1, "c"},
				{rl + "shop.plan_free.total_hits", 2, "c"},
				{rl + "shop.plan_free.within_limit", 1, "c"},
				{rl + "shop.plan_free.near_limit", 1, "c"},
				{rl + "shop.plan_free.over_limit", 1, "c"},
				{rl + "shop.trial.total_hits", 2, "c"},
				{rl + "shop.trial.within_limit", 1, "c"},
				{rl + "shop.trial.near_limit", 1, "c"},
				{rl + "shop.trial.over_limit", 1, "c"},
				{rl + "shop.trial.shadow_mode", 1, "c"},
				{rl + "shop.client_web_1.total_hits", 2, "c"},
				{rl + "shop.client_web_1.within_limit", 2, "c"},
				{rl + "shop.client_ios.total_hits", 1, "c"},
				{rl + "shop.client_ios.within_limit", 1, "c"},
				{rl + "shop.remote_address_10_0_0_1.total_hits", 1, "c"},
				{rl + "shop.remote_address_10_0_0_1.within_limit", 1, "c"},
				{rl + "shop.path_/api/*.method_GET.total_hits", 1, "c"},
				{rl + "shop.path_/api/*.method_GET.within_limit", 1, "c"},
				{rl + "shop.user_bob.total_hits", 1, "c"},
				{rl + "shop.user_bob.within_limit", 1, "c"},
				{rl + "shop.user_bob.near_limit", 1, "c"},
				{rl + "shop.app.tier_gold.total_hits", 1, "c"},
				{rl + "shop.app.tier_gold.within_limit", 1, "c"},
				{rl + "shop.region_eu*.zone_z1.total_hits", 1, "c"},
				{rl + "shop.region_eu*.zone_z1.within_limit", 1, "c"},
				{rl + "shop.file_img/*.total_hits", 2, "c"},
				{rl + "shop.file_img/*.within_limit", 2, "c"},
				{rl + "shop.token_.total_hits", 1, "c"},
				{rl + "shop.token_.within_limit", 1, "c"},
				{rl + "nowhere.domain_not_found", 2, "c"},
				{"ratelimit.service.call.should_rate_limit.service_error", 1, "c"},
				{"ratelimit.service.call.should_rate_limit.redis_error", 1, "c"},
				{"ratelimit.service.global_shadow_mode", 1, "c"},
				{"ratelimit_server.ShouldRateLimit.total_requests", calls, "c"},
			}
			checkStatsdLines(t, flush(), want, calls, tc.line)

			// Nothing new, nothing sent but the timer's; then Close sends
			// what came since the last flush.
			if got := flush(); len(got) != 0 {
				t.Errorf("a flush with nothing new sent %q", got)
			}
			ask(svc, request("shop", desc("user", "dave")))
			if err := client.Close(); err != nil {
				t.Fatal(err)
			}
			checkStatsdLines(t, srv.Lines(t), []statsdLine{
				{rl + "shop.user.total_hits", 1, "c"},
				{rl + "shop.user.within_limit", 1, "c"},
				{"ratelimit_server.ShouldRateLimit.total_requests", 1, "c"},
			}, 1, tc.line)
		})
	}
}

// checkStatsdLines compares the counter lines of got with want, in any
// order, and checks that the response-time lines stand for requests
// answers.
func checkStatsdLines(t *testing.T, got []string, want []statsdLine, requests int, line func(statsdLine) string) {
	t.Helper()
	var wantLines, counters []string
	for _, l := range want {
		wantLines = append(wantLines, line(l))
	}
	timed := 0
	timer := line(statsdLine{name: statResponseTime, typ: "ms"})
	timerPrefix, _, _ := strings.Cut(timer, ":")
	for _, l := range got {
		name, rest, _ := strings.Cut(l, ":")
		if name != timerPrefix {
			counters = append(counters, l)
			continue
		}
		// Answers here take under a millisecond, or a few on a loaded
		// machine; each line counts 1/rate of them.
		var ms int
		var rate float64 = 1
		fields := strings.Split(rest, "|")
		if _, err := fmt.Sscan(fields[0], &ms); err != nil || fields[1] != "ms" {
			t.Errorf("timer line %q", l)
		}
		if len(fields) > 2 && strings.HasPrefix(fields[2], "@") {
			fmt.Sscan(fields[2][1:], &rate)
		}
		timed += int(1 / rate)
	}
	slices.Sort(counters)
	slices.Sort(wantLines)
	if !slices.Equal(counters, wantLines) {
		t.Errorf("counter lines:\n got %s\nwant %s", strings.Join(counters, "\n     "), strings.Join(wantLines, "\n     "))
	}
	if timed != requests {
		t.Errorf("response-time lines count %d answers, want %d: %q", timed, requests, got)
	}
}

// TestStatsdNamesAreBounded: whatever values and domains clients send, a
// detailed_metric rule makes at most MaxValueSeries statsd names, an
// override at most as many under its rule, and unknown domains as many;
// the rest count under "_other_", so every hit is still sent.
func TestStatsdNamesAreBounded(t *testing.T) {
	const max, n = 3, 50
	srv := statsdtest.Listen(t)
	client := newStatsdClient(t, srv.Addr())
	m, err := New(prometheus.NewRegistry(), Options{MaxValueSeries: max, Statsd: client})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(statsdRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := newService(t, set, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{Metrics: m})
	for i := range n {
		v := fmt.Sprint(i)
		for _, r := range []*pb.RateLimitRequest{
			request("shop", desc("client", v)),
			request("shop", withOverride(desc("user", v), 1000, typev3.RateLimitUnit_HOUR)),
			request("shop", withOverride(desc("nomatch", v), 1000, typev3.RateLimitUnit_HOUR)),
			request("nowhere"+v, desc("user", v)),
		} {
			if _, err := svc.ShouldRateLimit(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{} // total_hits and domain_not_found lines by name
	for _, l := range srv.Lines(t) {
		name, rest, _ := strings.Cut(l, ":")
		if strings.HasSuffix(name, ".total_hits") || strings.HasSuffix(name, ".domain_not_found") {
			var v int
			fmt.Sscan(strings.TrimSuffix(rest, "|c"), &v)
			counts[name] = v
		}
	}
	rl := "ratelimit.service.rate_limit."
	for _, tc := range []struct {
		prefix, other string
	}{
		{rl + "shop.client_", rl + "shop.client._other_.total_hits"},
		{rl + "shop.user_", rl + "shop.user._other_.total_hits"},
		{rl + "shop.nomatch_", rl + "shop._other_.total_hits"},
		{rl + "nowhere", rl + "_other_.domain_not_found"},
	} {
		names, total := 0, 0
		for name, v := range counts {
			if strings.HasPrefix(name, tc.prefix) {
				names++
				total += v
			}
		}
		if names != max || counts[tc.other] != n-max || total+counts[tc.other] != n {
			t.Errorf("%s*: %d names counting %d, %s = %d; want %d names and %d under _other_",
				tc.prefix, names, total, tc.other, counts[tc.other], max, n-max)
		}
	}
}

// TestDetailedMetricTurnedOff: a reload that turns detailed_metric off on a
// rule keeps its path, whose series was made for values only; the rule's
// own counters are made then, in Prometheus and statsd.
func TestDetailedMetricTurnedOff(t *testing.T) {
	parse := func(detailed bool) *rules.Set {
		t.Helper()
		set, err := rules.Parse(map[string][]byte{"d.yaml": fmt.Appendf(nil,
			"domain: d\ndescriptors:\n  - key: k\n    detailed_metric: %v\n    rate_limit: {unit: minute, requests_per_unit: 5}\n", detailed)}, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	srv := statsdtest.Listen(t)
	client := newStatsdClient(t, srv.Addr())
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{Statsd: client})
	if err != nil {
		t.Fatal(err)
	}
	src := &switchingRules{parse(true)}
	svc, err := envoy.New(src.Current, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	for _, detailed := range []bool{true, false} {
		src.set = parse(detailed)
		if _, err := svc.ShouldRateLimit(context.Background(), request("d", desc("k", "v"))); err != nil {
			t.Fatalf("detailed_metric %v: %v", detailed, err)
		}
	}
	if err := client.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := srv.Lines(t)
	for _, want := range []string{"ratelimit.service.rate_limit.d.k_v.total_hits:1|c", "ratelimit.service.rate_limit.d.k.total_hits:1|c"} {
		if !slices.Contains(lines, want) {
			t.Errorf("no %q in %q", want, lines)
		}
	}
	for _, rule := range []string{"d.k_v", "d.k"} {
		if got := metricValue(t, reg, "floodgate_hits_total", map[string]string{"rule": rule}); got != 1 {
			t.Errorf("floodgate_hits_total{rule=%q} = %v, want 1", rule, got)
		}
	}
}

// newStatsdClient returns a statsd client sending to addr, flushed only when
// the test asks, closed when the test ends.
func newStatsdClient(t *testing.T, addr string) *statsd.Client {
	t.Helper()
	client, err := statsd.New(statsd.Options{Addr: addr, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}
