package envoy

import (
	"context"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// quotaModeRules are the rules the reference server's quota modes were
// observed on: s1 and s2 plain limits, u unlimited, sh in shadow mode; q1
// and q2 quotas, qs a quota in shadow mode, e a plain limit.
const quotaModeRules = `
domain: q
descriptors:
  - {key: s, value: s1, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: s, value: s2, rate_limit: {unit: day, requests_per_unit: 5}}
  - {key: u, rate_limit: {unlimited: true}}
  - {key: sh, shadow_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: q1, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: day, requests_per_unit: 5}}
  - {key: qs, quota_mode: true, shadow_mode: true, rate_limit: {unit: day, requests_per_unit: 1}}
  - {key: e, rate_limit: {unit: day, requests_per_unit: 5}}
`

// TestQuotaModes: the overall code of the reference server
// (envoyproxy/ratelimit f2fb157) in per-rule quota mode and with
// QUOTA_MODE=true, case by case as it was observed; "over" descriptors
// were exhausted by a first call. Each descriptor's own status says
// OVER_LIMIT when it is over, whatever the overall code.
func TestQuotaModes(t *testing.T) {
	over := map[string]bool{"s1": true, "sh": true, "q1": true, "qs": true}
	tests := []struct {
		name          string
		descs         []string
		perRule, glob string // overall code and statuses
	}{
		{"G1 over and under", []string{"s1", "s2"}, "OVER OVER OK", "OK OVER OK"},
		{"G2 over alone", []string{"s1"}, "OVER OVER", "OVER OVER"},
		{"G3 over and a descriptor matching no rule", []string{"s1", "nomatch"}, "OVER OVER OK", "OK OVER OK"},
		{"G4 over and unlimited, which is no quota", []string{"s1", "u"}, "OVER OVER OK", "OVER OVER OK"},
		{"G5 over and shadow over", []string{"s1", "sh"}, "OVER OVER OK", "OK OVER OK"},
		{"G6 both over", []string{"s1", "s1"}, "OVER OVER OVER", "OVER OVER OVER"},
		{"P1 quota over and quota under", []string{"q1", "q2"}, "OK OVER OK", "OK OVER OK"},
		{"P2 quota over and no match", []string{"q1", "nomatch"}, "OVER OVER OK", "OK OVER OK"},
		{"P3 quota over and quota in shadow mode over", []string{"q1", "qs"}, "OK OVER OK", "OK OVER OK"},
		{"P4 quota over and a plain limit under", []string{"q1", "e"}, "OVER OVER OK", "OK OVER OK"},
		{"P5 quota over alone", []string{"q1"}, "OVER OVER", "OVER OVER"},
	}
	for _, tc := range tests {
		for _, global := range []bool{false, true} {
			want := tc.perRule
			if global {
				want = tc.glob
			}
			t.Run(tc.name, func(t *testing.T) {
				svc := quotaService(t, global)
				for _, d := range tc.descs {
					if over[d] {
						svc.ShouldRateLimit(context.Background(), quotaRequest(d))
					}
				}
				resp, err := svc.ShouldRateLimit(context.Background(), quotaRequest(tc.descs...))
				if err != nil {
					t.Fatal(err)
				}
				got := strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT")
				for _, st := range resp.Statuses {
					got += " " + strings.TrimSuffix(st.Code.String(), "_LIMIT")
				}
				if got != want {
					t.Errorf("QUOTA_MODE=%v: %s, want %s", global, got, want)
				}
			})
		}
	}
}

// quotaService is a service on quotaModeRules, in global quota mode or
// not, on a stopped clock.
func quotaService(t *testing.T, global bool) *Service {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"q.yaml": []byte(quotaModeRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return t0 }
	svc, err := New(fixedRules{set}.Current, limit.NewMemory(limit.MemoryOptions{Now: now}), Options{QuotaMode: global, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// quotaRequest is a request of domain q with one descriptor per key: "s1"
// and "s2" are values of key s, the others keys of their own.
func quotaRequest(keys ...string) *pb.RateLimitRequest {
	req := &pb.RateLimitRequest{Domain: "q"}
	for _, k := range keys {
		if k == "s1" || k == "s2" {
			req.Descriptors = append(req.Descriptors, desc("s", k))
		} else {
			req.Descriptors = append(req.Descriptors, desc(k, ""))
		}
	}
	return req
}
