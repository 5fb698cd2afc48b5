package rlsmetrics

import (
	"context"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
)

// TestRefusedRequestsAreCounted: each request the service refuses counts
// once in floodgate_requests_refused_total under its reason, with the
// label's values bounded whatever reason a caller reports.
func TestRefusedRequestsAreCounted(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(reg, Options{Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	set := parse(t, testRules)
	svc := newService(t, set, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{Metrics: m, Bounds: envoy.RequestBounds{MaxDescriptors: 2}})
	refused := func() map[string]float64 {
		out := map[string]float64{}
		for _, r := range RefusalReasons {
			out[r] = metricValue(t, reg, "floodgate_requests_refused_total", map[string]string{"reason": r})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		req    *pb.RateLimitRequest
		want   string // in the InvalidArgument message; "" for OK
		reason string
	}{
		{"valid", request("test", desc("user", "a")), "", ""},
		{"empty domain", request("", desc("user", "a")), "domain: must not be empty", "malformed"},
		{"no descriptor", request("test"), "descriptors: must not be empty", "malformed"},
		{"value not UTF-8", request("test", desc("user", "\xff")), "not valid UTF-8", "malformed"},
		{"beyond the bounds", request("test", desc("user", "a"), desc("user", "b"), desc("user", "c")), "more than the bound of 2 (max descriptors)", "bounds"},
		{"bad override", request("test", withOverride(desc("user", "a"), 5, typev3.RateLimitUnit_UNKNOWN)), "descriptors[0].limit", "invalid"},
		{"zero multiplier", request("test", func() *rlv3.RateLimitDescriptor {
			d := withOverride(desc("user", "a"), 5, typev3.RateLimitUnit_MINUTE)
			d.Limit.UnitMultiplier = wrapperspb.UInt32(0)
			return d
		}()), "unit_multiplier: must be at least 1", "invalid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := refused()
			_, err := svc.ShouldRateLimit(context.Background(), tc.req)
			if tc.want == "" && err != nil || tc.want != "" && (status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want)) {
				t.Fatalf("got %v, want InvalidArgument containing %q", err, tc.want)
			}
			after := refused()
			for r, n := range after {
				want := before[r]
				if r == tc.reason {
					want++
				}
				if n != want {
					t.Errorf("reason %q: %v, want %v", r, n, want)
				}
			}
		})
	}

	// A reason the metric does not know counts as "other": the label
	// stays bounded.
	m.Refused("made_up")
	if n := metricValue(t, reg, "floodgate_requests_refused_total", map[string]string{"reason": RefusedOther}); n != 1 {
		t.Errorf(`reason "other": %v, want 1`, n)
	}
	if n := metricValue(t, reg, "floodgate_requests_refused_total", map[string]string{"reason": "made_up"}); n > 0 {
		t.Errorf(`reason "made_up" exists: %v`, n)
	}
}
