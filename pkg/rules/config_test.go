package rules

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/pkg/limit"
)

const exampleConfig = "../../config"

// TestExampleConfig: the example rule set passes -check without warnings
// and uses every feature of the format.
func TestExampleConfig(t *testing.T) {
	set, err := Load(exampleConfig, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if w := set.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	if got := set.Domains(); len(got) != 1 || got[0] != "demo" {
		t.Errorf("Domains = %v, want [demo]", got)
	}
	used := map[string]bool{}
	for _, r := range set.Rules() {
		lv := r.levels[len(r.levels)-1]
		used["depth "+string(rune('0'+len(r.levels)))] = true
		used["match "+lv.kind.String()] = true
		if lv.kind == matchWildcard && !lv.dynamic {
			used["share_threshold"] = true
		}
		if strings.Count(lv.value, "*") > 1 {
			used["several stars"] = true
		}
		if len(r.Limits) == 0 {
			used["no limit"] = true
		}
		if len(r.Limits) > 1 {
			used["rate_limits"] = true
		}
		flags := map[string]bool{"shadow_mode": r.ShadowMode, "detailed_metric": r.DetailedMetric,
			"quota_mode": r.QuotaMode, "value_to_metric": r.ValueToMetric, "metadata": r.Metadata != nil,
			"failure_mode allow": r.FailureMode == FailureAllow, "failure_mode deny": r.FailureMode == FailureDeny}
		for name, on := range flags {
			used[name] = used[name] || on
		}
		for _, l := range r.Limits {
			if l.Unlimited {
				used["unlimited"] = true
				continue
			}
			used[l.Spec.Algorithm.String()] = true
			used["unit "+l.Unit.String()] = true
			flags := map[string]bool{"blocked": l.RequestsPerUnit == 0, "burst": l.Spec.Burst > 0,
				"precision": l.Spec.Precision > 1, "unit_multiplier": l.UnitMultiplier > 1,
				"calendar": l.Spec.Calendar != nil, "name": l.Name != "", "replaces": len(l.Replaces) > 0,
				"timezone": l.Spec.Calendar != nil && l.Spec.Calendar.String() != "UTC"}
			for name, on := range flags {
				used[name] = used[name] || on
			}
		}
	}
	want := []string{"depth 1", "depth 2", "match exact", "match wildcard", "match key-only", "share_threshold",
		"several stars", "no limit", "rate_limits", "shadow_mode", "detailed_metric", "quota_mode", "value_to_metric",
		"metadata", "failure_mode allow", "failure_mode deny", "unlimited", "blocked", "burst", "precision",
		"unit_multiplier", "calendar", "timezone", "name", "replaces", "unit second", "unit minute", "unit day", "unit month"}
	for _, a := range limit.Algorithms() {
		want = append(want, a.String())
	}
	for _, w := range want {
		if !used[w] {
			t.Errorf("the example config does not use %s", w)
		}
	}
}

// TestExampleConfigMatches: the descriptors an Envoy demo sends get the
// documented limits.
func TestExampleConfigMatches(t *testing.T) {
	set, err := Load(exampleConfig, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		entries []Entry
		want    string
	}{
		{entries("remote_address=203.0.113.7"), "demo.remote_address | 10 per second (token_bucket, burst 20)"},
		{entries("remote_address=10.0.0.10"), "demo.remote_address_10.0.0.10 | unlimited"},
		{entries("remote_address=192.0.2.66"), "demo.remote_address_192.0.2.66 | 0 per second (fixed_window)"},
		{entries("api_key=k1"), "demo.api_key | 5 per second (sliding_window) | api_key_daily: 10000 per day (sliding_window, precision 24)"},
		{entries("api_key=k1", "path=/export/all.csv"), "demo.api_key.path_/export/* | 3 per 5 minutes (leaky_bucket, burst 2)"},
		{entries("api_key=k1", "path=/other"), "-"},
		{entries("generic_key=writes"), "demo.generic_key_writes | 600 per minute (gcra, burst 50)"},
		{entries("path=/static/app.js"), "demo.path_/static/* | 1000 per second (fixed_window)"},
		{entries("path=/api/v2/search"), "demo.path_/api/*/search* | 100 per minute (sliding_log)"},
		{entries("path=/health"), "demo.path_/health"},
		{entries("path=/unknown"), "-"},
		{entries("user_agent=Googlebot/2.1"), "demo.user_agent_*bot* | 30 per minute (fixed_window) | shadow"},
		{entries("tenant=acme", "plan=free"), "demo.tenant.plan_free | 100000 per calendar month in America/New_York (fixed_window)"},
		{entries("tenant=acme", "plan=pro"), "demo.tenant.plan_pro | pro_daily: 1000000 per calendar day in Europe/Berlin (fixed_window), replaces api_key_daily"},
	}
	for _, tt := range tests {
		if got := summary(set.Match("demo", tt.entries)); got != tt.want {
			t.Errorf("Match(%v)\n got  %s\n want %s", tt.entries, got, tt.want)
		}
	}
}

func TestExplain(t *testing.T) {
	set, err := Load(exampleConfig, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		domain  string
		entries []Entry
		hows    []string
		reason  string
		text    []string
	}{
		{"demo", entries("remote_address=1.2.3.4"), []string{"key-only"}, "rule demo.remote_address applies: 10 per second (token_bucket, burst 20)",
			[]string{"1. remote_address=1.2.3.4: key-only demo.remote_address (../../config/demo.yaml:17:5): key-only rule: no exact value or wildcard matched; each distinct value has its own counter",
				"limit 10 per second (token_bucket, burst 20) (../../config/demo.yaml:19:7) id 4:demo/14:remote_address=0:|a=token_bucket|w=1s"}},
		{"demo", entries("remote_address=10.0.0.10"), []string{"exact"}, "rule demo.remote_address_10.0.0.10 applies: unlimited",
			[]string{`exact "10.0.0.10"`}},
		{"demo", entries("path=/static/x"), []string{"wildcard"}, "applies: 1000 per second",
			[]string{"wildcard with share_threshold; all matching values share one counter"}},
		{"demo", entries("path=/api/v1/search"), []string{"wildcard"}, "applies: 100 per minute (sliding_log)",
			[]string{"wildcard; each distinct value has its own counter"}},
		{"demo", entries("user_agent=somebot"), []string{"wildcard"}, "(shadow mode: counted, never denied)", nil},
		{"demo", entries("path=/health"), []string{"exact"}, "rule demo.path_/health matches but holds no limit", nil},
		{"demo", entries("tenant=t", "plan=gold"), []string{"key-only", "none"}, "entry 2 (plan=gold) matches no rule",
			[]string{`key "plan" has no rule for value "gold" (exact values "free", "pro"; no key-only rule)`}},
		{"demo", entries("remote_address=1.2.3.4", "path=/x"), []string{"key-only", "none"}, "entry 2 (path) matches no rule",
			[]string{"rule demo.remote_address has no nested descriptors"}},
		{"demo", entries("colour=red"), []string{"none"}, "entry 1 (colour) matches no rule",
			[]string{`no rule for key "colour" at level 1 (keys there: "api_key", "generic_key", "llm_org", "llm_reserved", "llm_tokens", "llm_user", "path", "remote_address", "tenant", "user_agent")`}},
		{"other", entries("a=b"), nil, `no rule file declares domain "other"`, nil},
		{"demo", nil, nil, "the descriptor has no entries", nil},
	}
	for _, tt := range tests {
		var steps strings.Builder
		rule, _ := set.explain(&steps, tt.domain, tt.entries)
		// A step's line names how the entry matched after "N. key=value: ".
		var hows []string
		for _, line := range strings.Split(strings.TrimSuffix(steps.String(), "\n"), "\n") {
			if _, step, ok := strings.Cut(line, ": "); ok {
				how, _, _ := strings.Cut(step, " ")
				if how == "no" { // "no match: ..."
					how = "none"
				}
				hows = append(hows, how)
			}
		}
		if strings.Join(hows, ",") != strings.Join(tt.hows, ",") {
			t.Errorf("Explain(%v) steps %v, want %v", tt.entries, hows, tt.hows)
		}
		if rule != set.Match(tt.domain, tt.entries) {
			t.Errorf("Explain(%v).Rule differs from Match", tt.entries)
		}
		s, reason := set.Explain(tt.domain, tt.entries)
		if !strings.Contains(reason, tt.reason) {
			t.Errorf("Explain(%v).Reason = %q, want %q", tt.entries, reason, tt.reason)
		}
		for _, want := range tt.text {
			if !strings.Contains(s, want) {
				t.Errorf("Explain(%v) report lacks %q:\n%s", tt.entries, want, s)
			}
		}
	}
}
