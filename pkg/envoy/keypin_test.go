package envoy

import (
	"context"
	"slices"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// pinRules cover every part of a counter key: nested levels, a wildcard,
// a key-only level, several limits, an algorithm with a precision.
const pinRules = `
domain: pin
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /api/*
    rate_limit: {unit: second, requests_per_unit: 2, unit_multiplier: 30}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limits:
          - {unit: second, requests_per_unit: 5, name: burst}
          - {unit: day, requests_per_unit: 2, name: daily, algorithm: gcra}
  - key: slide
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window, precision: 6}
`

// keyRecorder is a Limiter that records the keys of the hits it is given
// and allows every one.
type keyRecorder struct{ keys []string }

func (k *keyRecorder) Evaluate(_ context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	for i, h := range hits {
		k.keys = append(k.keys, h.Key)
		ds[i] = limit.Decision{Allowed: true, Remaining: 1}
	}
	return false, nil
}

// TestCounterKeysArePinned holds the counter keys of a few descriptors
// byte for byte: counters live in Redis across upgrades, and a key that
// changes silently resets every limit.
func TestCounterKeysArePinned(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"pin.yaml": []byte(pinRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 65)
	tests := []struct {
		name string
		desc *rlv3.RateLimitDescriptor
		want []string
	}{
		{"key-only", desc("user", "alice"), []string{"r3:pin/4:user=0:|a=fixed_window|w=1m0s|v5:alice"}},
		{"wildcard", desc("path", "/api/v1"), []string{"r3:pin/4:path=6:/api/*|a=fixed_window|w=30s|v7:/api/v1"}},
		{"nested, two limits", desc("tenant", "acme", "user", "bob"), []string{
			"r3:pin/6:tenant=4:acme/4:user=0:|a=fixed_window|w=1s|v3:bob",
			"r3:pin/6:tenant=4:acme/4:user=0:|a=gcra|w=24h0m0s|v3:bob",
		}},
		{"long value", desc("user", long), []string{"r3:pin/4:user=0:|a=fixed_window|w=1m0s|h9537c5fdf120482f7d58d25e9ed583f52c02b4e304ea814db1633ad565aed7e9"}},
		{"sliding window", desc("slide", "s"), []string{"r3:pin/5:slide=0:|a=sliding_window|w=1m0s|p=6|v1:s"}},
		{"override of a rule", withOverride(desc("slide", "s"), 7, typev3.RateLimitUnit_HOUR, 2), []string{"o3:pin/5:slide=0:|a=sliding_window|w=1m0s|p=6|v1:s|w7200000000|a1"}},
		{"override without a rule", withOverride(desc("nobody", "n", "k", ""), 7, typev3.RateLimitUnit_SECOND, 0), []string{"dv3:pinv6:nobodyv1:nv1:kv0:|w1000000|a0"}},
	}
	for _, tt := range tests {
		rec := &keyRecorder{}
		svc, err := New(fixedRules{set}.Current, rec, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.ShouldRateLimit(context.Background(), request("pin", tt.desc)); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !slices.Equal(rec.keys, tt.want) {
			t.Errorf("%s: keys %q, want %q", tt.name, rec.keys, tt.want)
		}
	}
}
