package memcachelimit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Only fixed windows pass; every other algorithm is named.
func TestSupports(t *testing.T) {
	for _, alg := range []limit.Algorithm{limit.FixedWindow, limit.SlidingWindow, limit.SlidingLog, limit.TokenBucket, limit.LeakyBucket, limit.GCRA} {
		err := memcachelimit.Supports(limit.Spec{Algorithm: alg, Limit: 5, Window: time.Minute})
		want := ""
		if alg != limit.FixedWindow {
			want = "algorithm " + alg.String() + " cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis"
		}
		if got := fmt.Sprint(err); err != nil && got != want || err == nil && want != "" {
			t.Errorf("Supports(%v) = %v, want %q", alg, err, want)
		}
	}
}

// As the rule loader's Supports, it refuses every limit but fixed
// windows, each at its position and naming its rule, in file order.
func TestSupportsAtLoad(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // the error; "" for none
	}{
		{"fixed windows, calendar windows, unlimited and blocking limits", `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: month, requests_per_unit: 5, calendar: true, timezone: Europe/Paris}
  - key: c
    rate_limit: {unlimited: true}
  - key: z
    rate_limit: {unit: second, requests_per_unit: 0}
`, ""},
		{"every other algorithm, named with its rule and position", `domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: api_key
    rate_limits:
      - {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
      - {unit: day, requests_per_unit: 10000}
    descriptors:
      - key: path
        value: /export/*
        rate_limit: {unit: minute, requests_per_unit: 3, algorithm: sliding_log}
`, "rules.yaml:7:9: rule d.api_key: algorithm token_bucket cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis\n" +
			"rules.yaml:12:21: rule d.api_key.path_/export/*: algorithm sliding_log cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(tt.yaml)}, rules.Options{Supports: memcachelimit.Supports})
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("Parse:\n%v\nwant\n%s", err, tt.want)
			}
			if _, ok := err.(*rules.LoadError); err != nil && !ok {
				t.Fatalf("Parse returned %T, want *rules.LoadError", err)
			}
		})
	}
}

// Its problems come with the load's own, in file order.
func TestSupportsWithOtherProblems(t *testing.T) {
	_, err := rules.Parse(map[string][]byte{"a.yaml": []byte(`domain: a
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: gcra}
`), "b.yaml": []byte(`domain: b
descriptors:
  - key: k
    rate_limit: {unit: fortnight, requests_per_unit: 5}
`)}, rules.Options{Supports: memcachelimit.Supports})
	var le *rules.LoadError
	if !errors.As(err, &le) || len(le.Errors) != 2 {
		t.Fatalf("Parse: %v, want two problems", err)
	}
	if !strings.HasPrefix(le.Errors[0].Error(), "a.yaml:4:17: rule a.k: algorithm gcra cannot be served by Memcached") ||
		!strings.HasPrefix(le.Errors[1].Error(), "b.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit") {
		t.Fatalf("Parse:\n%v", err)
	}
	if _, err := rules.Parse(map[string][]byte{"a.yaml": []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")}, rules.Options{Supports: memcachelimit.Supports}); err != nil {
		t.Fatalf("Parse of fixed windows: %v", err)
	}
}
