package rules

import "testing"

// TestStatName: the statistics name of a matched descriptor, as the
// reference server derives it (config_impl.go GetLimit): the rule's path,
// with the request's value at levels with value_to_metric, every level's
// key_value with detailed_metric, and a share_threshold wildcard's pattern
// in both.
func TestStatName(t *testing.T) {
	set := parseOne(t, `domain: d
descriptors:
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: app
    value_to_metric: true
    descriptors:
      - key: tier
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: region
    value: eu*
    descriptors:
      - key: zone
        value_to_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: site
    value: s*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: fixed
    value: f
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: file
    value: img/*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: shared
    value: x*
    share_threshold: true
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 1}
  - key: token
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	for _, tc := range []struct {
		entries  []string // key, value, ...
		want     string
		byValues bool
	}{
		{[]string{"plain", "p"}, "d.plain", false},
		{[]string{"app", "a1", "tier", "gold"}, "d.app_a1.tier", true},
		{[]string{"region", "eu-west", "zone", "z1"}, "d.region_eu*.zone_z1", true},
		{[]string{"site", "s9"}, "d.site_s9", true},
		{[]string{"fixed", "f"}, "d.fixed_f", false},
		{[]string{"file", "img/a"}, "d.file_img/*", false},
		{[]string{"shared", "x1", "user", "u"}, "d.shared_x*.user_u", true},
		{[]string{"shared", "x1", "user", ""}, "d.shared_x*.user", true},
		{[]string{"token", ""}, "d.token_", true},
		{[]string{"token", "t"}, "d.token_t", true},
	} {
		var es []Entry
		for i := 0; i < len(tc.entries); i += 2 {
			es = append(es, Entry{Key: tc.entries[i], Value: tc.entries[i+1]})
		}
		r := set.Match("d", es)
		if r == nil {
			t.Fatalf("%v: no rule", tc.entries)
		}
		if got := string(r.AppendStatName(nil, es)); got != tc.want || r.NamedByValues() != tc.byValues {
			t.Errorf("%v: %q, named by values %v; want %q, %v", tc.entries, got, r.NamedByValues(), tc.want, tc.byValues)
		}
	}
}
