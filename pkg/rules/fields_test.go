package rules

import (
	"reflect"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// parseOne parses a single file and fails the test on error.
func parseOne(t testing.TB, src string) *Set {
	t.Helper()
	set, err := Parse(map[string][]byte{"f.yaml": []byte(src)}, Options{})
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return set
}

func mustLoadLocation(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// TestRateLimitFields checks what each rate_limit field compiles to.
func TestRateLimitFields(t *testing.T) {
	newYork := mustLoadLocation(t, "America/New_York")
	type want struct {
		unit      Unit
		mult      uint32
		rpu       uint32
		unlimited bool
		name      string
		replaces  []string
		spec      limit.Spec
	}
	tests := []struct {
		name string
		body string // the rate_limit mapping, in flow style
		want want
	}{
		{"reference fields", "{unit: second, requests_per_unit: 10}",
			want{unit: second, mult: 1, rpu: 10, spec: limit.Spec{Limit: 10, Window: time.Second}}},
		{"unit is case-insensitive", "{unit: MINUTE, requests_per_unit: 1}",
			want{unit: minute, mult: 1, rpu: 1, spec: limit.Spec{Limit: 1, Window: time.Minute}}},
		{"hour", "{unit: Hour, requests_per_unit: 1}",
			want{unit: hour, mult: 1, rpu: 1, spec: limit.Spec{Limit: 1, Window: time.Hour}}},
		{"day", "{unit: day, requests_per_unit: 1}",
			want{unit: day, mult: 1, rpu: 1, spec: limit.Spec{Limit: 1, Window: 24 * time.Hour}}},
		{"week is 7 days", "{unit: week, requests_per_unit: 1}",
			want{unit: week, mult: 1, rpu: 1, spec: limit.Spec{Limit: 1, Window: 7 * 24 * time.Hour}}},
		{"month is 30 days", "{unit: month, requests_per_unit: 1}",
			want{unit: month, mult: 1, rpu: 1, spec: limit.Spec{Limit: 1, Window: 30 * 24 * time.Hour}}},
		{"year is 365 days", "{unit: year, requests_per_unit: 1}",
			want{unit: year, mult: 1, rpu: 1, spec: limit.Spec{Limit: 1, Window: 365 * 24 * time.Hour}}},
		{"zero blocks all", "{unit: second, requests_per_unit: 0}",
			want{unit: second, mult: 1, spec: limit.Spec{Window: time.Second}}},
		{"largest requests_per_unit", "{unit: second, requests_per_unit: 4294967295}",
			want{unit: second, mult: 1, rpu: 4294967295, spec: limit.Spec{Limit: 4294967295, Window: time.Second}}},
		{"number forms", "{unit: second, requests_per_unit: 1_000}",
			want{unit: second, mult: 1, rpu: 1000, spec: limit.Spec{Limit: 1000, Window: time.Second}}},
		{"hexadecimal", "{unit: second, requests_per_unit: 0x10}",
			want{unit: second, mult: 1, rpu: 16, spec: limit.Spec{Limit: 16, Window: time.Second}}},
		{"leading zero, not octal", "{unit: second, requests_per_unit: 09}",
			want{unit: second, mult: 1, rpu: 9, spec: limit.Spec{Limit: 9, Window: time.Second}}},
		{"unlimited", "{unlimited: true}",
			want{mult: 1, unlimited: true}},
		{"name and replaces", "{unit: second, requests_per_unit: 1, name: a, replaces: [{name: b}, {name: c}]}",
			want{unit: second, mult: 1, rpu: 1, name: "a", replaces: []string{"b", "c"}, spec: limit.Spec{Limit: 1, Window: time.Second}}},
		{"unit_multiplier", "{unit: second, unit_multiplier: 30, requests_per_unit: 5}",
			want{unit: second, mult: 30, rpu: 5, spec: limit.Spec{Limit: 5, Window: 30 * time.Second}}},
		{"explicit fixed_window", "{unit: second, requests_per_unit: 5, algorithm: fixed_window}",
			want{unit: second, mult: 1, rpu: 5, spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 5, Window: time.Second}}},
		{"sliding_window defaults to precision 1", "{unit: minute, requests_per_unit: 5, algorithm: sliding_window}",
			want{unit: minute, mult: 1, rpu: 5, spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Minute, Precision: 1}}},
		{"sliding_window precision", "{unit: minute, requests_per_unit: 5, algorithm: sliding_window, precision: 60}",
			want{unit: minute, mult: 1, rpu: 5, spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Minute, Precision: 60}}},
		{"precision at the millisecond bound", "{unit: second, requests_per_unit: 5, algorithm: sliding_window, precision: 1000}",
			want{unit: second, mult: 1, rpu: 5, spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Second, Precision: 1000}}},
		{"sliding_log", "{unit: second, requests_per_unit: 5, algorithm: sliding_log}",
			want{unit: second, mult: 1, rpu: 5, spec: limit.Spec{Algorithm: limit.SlidingLog, Limit: 5, Window: time.Second}}},
		{"token_bucket burst defaults to 0 (= limit)", "{unit: second, requests_per_unit: 10, algorithm: token_bucket}",
			want{unit: second, mult: 1, rpu: 10, spec: limit.Spec{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second}}},
		{"token_bucket burst", "{unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}",
			want{unit: second, mult: 1, rpu: 10, spec: limit.Spec{Algorithm: limit.TokenBucket, Limit: 10, Window: time.Second, Burst: 20}}},
		{"leaky_bucket burst", "{unit: minute, requests_per_unit: 60, algorithm: leaky_bucket, burst: 5}",
			want{unit: minute, mult: 1, rpu: 60, spec: limit.Spec{Algorithm: limit.LeakyBucket, Limit: 60, Window: time.Minute, Burst: 5}}},
		{"gcra burst", "{unit: second, requests_per_unit: 2, algorithm: gcra, burst: 1}",
			want{unit: second, mult: 1, rpu: 2, spec: limit.Spec{Algorithm: limit.GCRA, Limit: 2, Window: time.Second, Burst: 1}}},
		{"calendar month in a zone", "{unit: month, requests_per_unit: 100, calendar: true, timezone: America/New_York}",
			want{unit: month, mult: 1, rpu: 100, spec: limit.Spec{Limit: 100, Window: 30 * 24 * time.Hour,
				Calendar: newYork}}},
		{"calendar day defaults to UTC", "{unit: day, requests_per_unit: 100, calendar: true}",
			want{unit: day, mult: 1, rpu: 100, spec: limit.Spec{Limit: 100, Window: 24 * time.Hour,
				Calendar: time.UTC}}},
		{"calendar week", "{unit: week, requests_per_unit: 100, calendar: true, timezone: UTC}",
			want{unit: week, mult: 1, rpu: 100, spec: limit.Spec{Limit: 100, Window: 7 * 24 * time.Hour,
				Calendar: time.UTC}}},
		{"calendar year with an explicit multiplier of 1", "{unit: year, unit_multiplier: 1, requests_per_unit: 100, calendar: true}",
			want{unit: year, mult: 1, rpu: 100, spec: limit.Spec{Limit: 100, Window: 365 * 24 * time.Hour,
				Calendar: time.UTC}}},
		{"calendar false is no calendar", "{unit: day, requests_per_unit: 100, calendar: false}",
			want{unit: day, mult: 1, rpu: 100, spec: limit.Spec{Limit: 100, Window: 24 * time.Hour}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := parseOne(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: "+tt.body+"\n")
			r := set.Match("d", []Entry{{"k", "v"}})
			if r == nil || len(r.Limits) != 1 {
				t.Fatalf("Match = %+v, want one limit", r)
			}
			l := r.Limits[0]
			got := want{l.Unit, l.UnitMultiplier, l.RequestsPerUnit, l.Unlimited, l.Name, l.Replaces, l.Spec}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if l.Pos != (Position{File: "f.yaml", Line: 4, Column: 17}) {
				t.Errorf("Pos = %v, want f.yaml:4:17", l.Pos)
			}
			if !l.Unlimited {
				if err := l.Spec.Validate(); err != nil {
					t.Errorf("compiled spec is invalid: %v", err)
				}
			}
		})
	}
}

// TestDescriptorFields checks what each descriptor field compiles to.
func TestDescriptorFields(t *testing.T) {
	src := `domain: shop
descriptors:
  - key: a
    value: "1"
    shadow_mode: true
    detailed_metric: yes
    quota_mode: True
    value_to_metric: on
    failure_mode: allow
    metadata: {team: payments, tier: 2, owners: [ann, {name: bo, on_call: true}], limits: {burst: 1.5, note: null}}
  - key: b
    failure_mode: deny
    shadow_mode: false
  - key: c
    failure_mode: unavailable
    rate_limit:
  - key: d
    value: 200
    descriptors:
      - key: e
        value: x*y
        share_threshold: true
        rate_limits:
          - {unit: second, requests_per_unit: 10}
          - {unit: day, requests_per_unit: 1000, name: daily}
`
	set := parseOne(t, src)
	tests := []struct {
		entries []Entry
		check   func(t *testing.T, r *Rule)
	}{
		{[]Entry{{"a", "1"}}, func(t *testing.T, r *Rule) {
			if !r.ShadowMode || !r.DetailedMetric || !r.QuotaMode || !r.ValueToMetric {
				t.Errorf("flags: %+v", r)
			}
			if r.FailureMode != FailureAllow {
				t.Errorf("FailureMode = %v", r.FailureMode)
			}
			if !reflect.DeepEqual(r.Metadata, map[string]any{"team": "payments", "tier": 2.0,
				"owners": []any{"ann", map[string]any{"name": "bo", "on_call": true}},
				"limits": map[string]any{"burst": 1.5, "note": nil}}) {
				t.Errorf("Metadata = %v", r.Metadata)
			}
			if r.Path != "shop.a_1" || r.Domain != "shop" {
				t.Errorf("Path = %q, Domain = %q", r.Path, r.Domain)
			}
			if r.Pos != (Position{File: "f.yaml", Line: 3, Column: 5}) {
				t.Errorf("Pos = %v", r.Pos)
			}
			if len(r.Limits) != 0 {
				t.Errorf("a rule without rate_limit has limits: %v", r.Limits)
			}
		}},
		{[]Entry{{"b", "anything"}}, func(t *testing.T, r *Rule) {
			if r.ShadowMode || r.DetailedMetric || r.QuotaMode || r.ValueToMetric || r.Metadata != nil {
				t.Errorf("defaults: %+v", r)
			}
			if r.FailureMode != FailureDeny || r.Path != "shop.b" {
				t.Errorf("FailureMode = %v, Path = %q", r.FailureMode, r.Path)
			}
		}},
		{[]Entry{{"c", "x"}}, func(t *testing.T, r *Rule) {
			if r.FailureMode != FailureUnavailable || len(r.Limits) != 0 {
				t.Errorf("FailureMode = %v, Limits = %v (a null rate_limit is none)", r.FailureMode, r.Limits)
			}
		}},
		{[]Entry{{"d", "200"}, {"e", "x-and-y"}}, func(t *testing.T, r *Rule) {
			if r.Path != "shop.d_200.e_x*y" {
				t.Errorf("Path = %q", r.Path)
			}
			if len(r.Limits) != 2 || r.Limits[0].Spec.Window != time.Second || r.Limits[1].Name != "daily" ||
				r.Limits[1].Spec.Window != 24*time.Hour {
				t.Errorf("rate_limits compiled to %+v", r.Limits)
			}
		}},
	}
	for _, tt := range tests {
		r := set.Match("shop", tt.entries)
		if r == nil {
			t.Errorf("Match(%v) = nil", tt.entries)
			continue
		}
		tt.check(t, r)
	}
	if got := FailureDefault.String() + FailureAllow.String() + FailureDeny.String() + FailureUnavailable.String(); got != "allowdenyunavailable" {
		t.Errorf("FailureMode names: %q", got)
	}
}

func TestUnit(t *testing.T) {
	tests := []struct {
		u    Unit
		name string
		d    time.Duration
	}{
		{0, "", 0},
		{second, "second", time.Second},
		{minute, "minute", time.Minute},
		{hour, "hour", time.Hour},
		{day, "day", 24 * time.Hour},
		{week, "week", 7 * 24 * time.Hour},
		{month, "month", 30 * 24 * time.Hour},
		{year, "year", 365 * 24 * time.Hour},
		{99, "Unit(99)", 0},
	}
	for _, tt := range tests {
		if tt.u.String() != tt.name || tt.u.Duration() != tt.d {
			t.Errorf("Unit %d: %q %v, want %q %v", tt.u, tt.u.String(), tt.u.Duration(), tt.name, tt.d)
		}
	}
}

func TestSetAccessors(t *testing.T) {
	set, err := Parse(map[string][]byte{
		"b.yaml": []byte("domain: beta\ndescriptors:\n  - key: x\n    rate_limit: {unit: minute, requests_per_unit: 0}\n"),
		"a.yaml": []byte("domain: alpha\ndescriptors:\n  - key: y\n    descriptors:\n      - key: z\n"),
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Domains(); !reflect.DeepEqual(got, []string{"alpha", "beta"}) {
		t.Errorf("Domains = %v", got)
	}
	if !set.HasDomain("alpha") || set.HasDomain("gamma") {
		t.Errorf("HasDomain wrong")
	}
	var paths []string
	for _, r := range set.Rules() {
		paths = append(paths, r.Path)
	}
	if !reflect.DeepEqual(paths, []string{"alpha.y", "alpha.y.z", "beta.x"}) {
		t.Errorf("Rules = %v", paths)
	}
	if set.Version() != 0 {
		t.Errorf("Version of a parsed set = %d, want 0", set.Version())
	}
	if time.Since(set.LoadedAt()) > time.Minute {
		t.Errorf("LoadedAt = %v", set.LoadedAt())
	}
}

// TestAnchorsAndMergeKeys: YAML anchors, aliases and merge keys work as in
// the reference server's parser; explicit fields win over merged ones.
func TestAnchorsAndMergeKeys(t *testing.T) {
	src := `domain: d
descriptors:
  - key: a
    rate_limit: &base {unit: minute, requests_per_unit: 10, algorithm: gcra}
  - key: b
    rate_limit:
      <<: *base
      requests_per_unit: 20
  - key: c
    rate_limit: *base
  - key: e
    rate_limit:
      <<: [{unit: hour}, *base]
`
	set := parseOne(t, src)
	tests := []struct {
		key  string
		want string
	}{
		{"a", "10 per minute (gcra, burst 10)"},
		{"b", "20 per minute (gcra, burst 20)"},
		{"c", "10 per minute (gcra, burst 10)"},
		{"e", "10 per hour (gcra, burst 10)"},
	}
	for _, tt := range tests {
		r := set.Match("d", []Entry{{tt.key, "x"}})
		if r == nil || len(r.Limits) != 1 || r.Limits[0].Describe() != tt.want {
			t.Errorf("%s: %s, want %s", tt.key, summary(r), tt.want)
		}
	}
	if a, c := set.Match("d", []Entry{{"a", "x"}}), set.Match("d", []Entry{{"c", "x"}}); a.Limits[0].ID == c.Limits[0].ID {
		t.Errorf("aliased limits of different descriptors share an ID")
	}
}
