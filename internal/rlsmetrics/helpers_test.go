package rlsmetrics

import (
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/harness/rlstest"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// testRules have a rule of each kind whose hits the metrics count
// differently; each test uses the keys it needs.
const testRules = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 5, name: burst}
      - {unit: day, requests_per_unit: 2, name: daily}
  - key: strict
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// t0 is 10 s into a minute, so minute windows reset in 50 s.
var t0 = time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)

// fixedRules serves one Set, through its Current method.
type fixedRules struct{ set *rules.Set }

func (f fixedRules) Current() *rules.Set { return f.set }

// switchingRules serves, through its Current method, a Set a test replaces, as a reload does.
type switchingRules struct{ set *rules.Set }

func (s *switchingRules) Current() *rules.Set { return s.set }

// harness is the service on testRules and the in-memory store at t0,
// counting in m, registered on reg.
type harness struct {
	svc *envoy.Service
	m   *Metrics
	reg *prometheus.Registry
}

// newHarness is a harness with the service's options opts and the
// metrics' mo.
func newHarness(t *testing.T, opts envoy.Options, mo Options) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry()}
	var err error
	if h.m, err = New(h.reg, mo); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0 }
	opts.Metrics, opts.Now = h.m, now
	h.svc = newService(t, parse(t, testRules), limit.NewMemory(limit.MemoryOptions{Now: now}), opts)
	return h
}

// ask sends req, failing the test on an error.
func (h *harness) ask(t *testing.T, req *pb.RateLimitRequest) *pb.RateLimitResponse {
	t.Helper()
	resp, err := h.svc.ShouldRateLimit(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// parse parses one rule file.
func parse(t *testing.T, file string) *rules.Set {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(file)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func newService(t *testing.T, set *rules.Set, l limit.Limiter, opts envoy.Options) *envoy.Service {
	t.Helper()
	svc, err := envoy.New(fixedRules{set}.Current, l, opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

var (
	desc    = rlstest.Desc
	request = rlstest.Request
)

func withAddend(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func withOverride(d *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
	d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// metricValue sums the series of a metric whose labels include labels: a
// counter's value, a histogram's observation count.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.Metric {
			have := map[string]string{}
			for _, lp := range m.Label {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, want := range labels {
				if have[k] != want {
					continue series
				}
			}
			v += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return v
}

func seriesCount(t *testing.T, g prometheus.Gatherer, name string) int {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.Metric)
		}
	}
	return 0
}
