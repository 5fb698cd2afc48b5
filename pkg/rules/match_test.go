package rules

import (
	"strings"
	"testing"
)

// entries builds a descriptor from "key=value" strings.
func entries(kv ...string) []Entry {
	out := make([]Entry, len(kv))
	for i, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		out[i] = Entry{k, v}
	}
	return out
}

// summary describes a match for comparison: "-" for no rule, else the
// rule's path and its limits.
func summary(r *Rule) string {
	if r == nil {
		return "-"
	}
	parts := []string{r.Path}
	for _, l := range r.Limits {
		parts = append(parts, l.Describe())
	}
	if r.ShadowMode {
		parts = append(parts, "shadow")
	}
	return strings.Join(parts, " | ")
}

// TestReferenceFilesLoadUnchanged loads files written in the reference
// server's documented format and checks that each request matches what the
// reference server would apply.
func TestReferenceFilesLoadUnchanged(t *testing.T) {
	set, err := Load("testdata/reference", Options{})
	if err != nil {
		t.Fatalf("reference files refused: %v", err)
	}
	if w := set.Warnings(); len(w) != 0 {
		t.Errorf("warnings on reference files: %v", w)
	}
	tests := []struct {
		domain  string
		entries []Entry
		want    string
	}{
		// Exact values.
		{"mongo_cps", entries("database=users"), "mongo_cps.database_users | 500 per second (fixed_window)"},
		{"mongo_cps", entries("database=default"), "mongo_cps.database_default | 500 per second (fixed_window)"},
		{"mongo_cps", entries("database=other"), "-"},
		{"mongo_cps", entries("table=users"), "-"},
		// Nested placeholder with a key-only child; key-only at the top.
		{"messaging", entries("message_type=marketing", "to_number=2061111111"), "messaging.message_type_marketing.to_number | 5 per day (fixed_window)"},
		{"messaging", entries("to_number=2061111111"), "messaging.to_number | 100 per day (fixed_window)"},
		{"messaging", entries("message_type=marketing"), "messaging.message_type_marketing"},
		{"messaging", entries("message_type=transactional", "to_number=1"), "-"},
		// Exact value first, then key-only.
		{"edge_proxy_per_ip", entries("remote_address=50.0.0.1"), "edge_proxy_per_ip.remote_address | 10 per second (fixed_window)"},
		{"edge_proxy_per_ip", entries("remote_address=50.0.0.5"), "edge_proxy_per_ip.remote_address_50.0.0.5 | 0 per second (fixed_window)"},
		// Depth must equal the request's entry count.
		{"example4", entries("key=value", "subkey=subvalue"), "example4.key_value.subkey | 300 per second (fixed_window)"},
		{"example4", entries("key=value"), "example4.key_value"},
		{"example4", entries("key=value", "subkey=s", "third=x"), "-"},
		// Unlimited.
		{"internal", entries("ldap=x"), "internal.ldap | unlimited"},
		{"internal", entries("azure=x"), "internal.azure | 100 per minute (fixed_window)"},
		// Shadow mode.
		{"example6", entries("service=auth-service", "user=user-a"), "example6.service.user_user-a | 10 per second (fixed_window) | shadow"},
		{"example6", entries("service=auth-service", "user=user-b"), "example6.service.user_user-b | 20 per second (fixed_window)"},
		{"example6", entries("service=auth-service", "user=user-c"), "-"},
		// The reference server's example configuration.
		{"rl", entries("source_cluster=proxy", "destination_cluster=mock"), "rl.source_cluster_proxy.destination_cluster_mock | 1 per minute (fixed_window)"},
		{"rl", entries("source_cluster=proxy"), "rl.source_cluster_proxy"},
		{"rl", entries("foo=x"), "rl.foo | 2 per minute (fixed_window)"},
		{"rl", entries("foo=x", "bar=y"), "rl.foo.bar | 3 per minute (fixed_window)"},
		{"rl", entries("foo=x", "bar=banned"), "rl.foo.bar_banned | 0 per minute (fixed_window)"},
		{"rl", entries("foo=x", "baz=y"), "rl.foo.baz | 1 per second (fixed_window)"},
		{"rl", entries("foo=x", "baz=shady"), "rl.foo.baz_shady | 1 per minute (fixed_window) | shadow"},
		{"rl", entries("foo=x", "bay=y"), "rl.foo.bay | unlimited"},
		{"rl", entries("foo=x", "other=y"), "-"},
		{"rl", entries("qux=1"), "rl.qux | unlimited"},
		// Quota mode.
		{"quota", entries("service=service_2"), "quota.service_service_2 | 2 per minute (fixed_window)"},
		// Wildcards.
		{"wildcard", entries("path=/api/v1/users"), "wildcard.path_/api/v1/* | 20 per minute (fixed_window)"},
		{"wildcard", entries("path=/api/v1/"), "wildcard.path_/api/v1/* | 20 per minute (fixed_window)"},
		{"wildcard", entries("path=/api/v2/users"), "-"},
		{"wildcard", entries("path=/files/a.txt"), "wildcard.path_/files/* | 100 per hour (fixed_window)"},
		{"wildcard", entries("user=u", "action=upload-photo"), "wildcard.user.action_upload* | 10 per day (fixed_window)"},
		{"wildcard", entries("user=u", "action=download"), "-"},
		// Unknown domain, empty descriptor.
		{"nope", entries("database=users"), "-"},
		{"mongo_cps", nil, "-"},
	}
	for _, tt := range tests {
		if got := summary(set.Match(tt.domain, tt.entries)); got != tt.want {
			t.Errorf("Match(%s, %v)\n got  %s\n want %s", tt.domain, tt.entries, got, tt.want)
		}
	}
	if q := set.Match("quota", entries("service=service_1")); q == nil || !q.QuotaMode {
		t.Errorf("quota_mode lost: %+v", q)
	}
	if w := set.Match("wildcard", entries("path=/api/v1/x")); w == nil || !w.ValueToMetric {
		t.Errorf("value_to_metric lost: %+v", w)
	}
	if w := set.Match("wildcard", entries("path=/files/x")); w == nil || !w.DetailedMetric {
		t.Errorf("detailed_metric lost: %+v", w)
	}
}

// TestReplaces follows the reference server's documented replaces example.
func TestReplaces(t *testing.T) {
	set, err := Load("testdata/reference/example7.yaml", Options{})
	if err != nil {
		t.Fatal(err)
	}
	specific := set.Match("example7", entries("key_1=value_1", "user=bkthomps"))
	general := set.Match("example7", entries("key_2=value_2", "user=bkthomps"))
	if specific == nil || general == nil {
		t.Fatalf("rules not matched: %v %v", specific, general)
	}
	// resolved is what Resolve found for descriptors matching these rules
	// without an override.
	resolved := func(rs ...*Rule) []Resolved {
		out := make([]Resolved, len(rs))
		for i, r := range rs {
			out[i].Rule = r
		}
		return out
	}
	tests := []struct {
		name    string
		l       *Limit
		matched []Resolved
		want    bool
	}{
		{"both match: the named limit is dropped", specific.Limits[0], resolved(specific, general), true},
		{"order does not matter", specific.Limits[0], resolved(general, nil, specific), true},
		{"the replacing limit stays", general.Limits[0], resolved(specific, general), false},
		{"alone it applies", specific.Limits[0], resolved(specific), false},
		{"nothing matched", specific.Limits[0], nil, false},
		{"an override does not replace", specific.Limits[0], []Resolved{{Rule: specific}, {Rule: general, Override: true}}, false},
	}
	for _, tt := range tests {
		if got := replaced(tt.l, tt.matched); got != tt.want {
			t.Errorf("%s: replaced = %v, want %v", tt.name, got, tt.want)
		}
	}
	unnamed := &Limit{}
	if replaced(unnamed, resolved(&Rule{Limits: []*Limit{{Replaces: []string{""}}}})) {
		t.Errorf("an unnamed limit was replaced")
	}
}

// TestMatchingOrder covers the order of exact, wildcard and key-only rules,
// wildcard patterns, and depth.
func TestMatchingOrder(t *testing.T) {
	src := `domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, name: key-only}
  - key: k
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 2, name: a-star}
  - key: k
    value: "*z"
    rate_limit: {unit: second, requests_per_unit: 3, name: star-z}
  - key: k
    value: "abc"
    rate_limit: {unit: second, requests_per_unit: 4, name: exact}
  - key: k
    value: "/api/*/users/*"
    rate_limit: {unit: second, requests_per_unit: 5, name: two-stars}
  - key: k
    value: "*mid*"
    rate_limit: {unit: second, requests_per_unit: 6, name: mid}
  - key: k
    value: "x*y*x"
    rate_limit: {unit: second, requests_per_unit: 7, name: overlap}
  - key: k
    value: "p**q"
    rate_limit: {unit: second, requests_per_unit: 8, name: double-star}
  - key: n
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 9, name: star}
  - key: n
    rate_limit: {unit: second, requests_per_unit: 10, name: n-key-only}
  - key: w
    value: "v*"
    descriptors:
      - key: inner
        rate_limit: {unit: second, requests_per_unit: 11, name: under-wildcard}
  - key: leaf
    value: only
`
	set := parseOne(t, src)
	tests := []struct {
		entries []Entry
		want    string // limit name, "" for a rule without limits, "-" for no rule
	}{
		{entries("k=abc"), "exact"},  // exact beats the a* wildcard
		{entries("k=abz"), "a-star"}, // both a* and *z match: file order
		{entries("k=xyz"), "star-z"}, // only *z
		{entries("k=a"), "a-star"},   // * matches the empty run
		{entries("k=zz"), "star-z"},  //
		{entries("k=/api/v1/users/42"), "two-stars"},
		{entries("k=/api/v1/users/"), "two-stars"},
		{entries("k=/api/v1/groups/42"), "key-only"}, // no pattern fits
		{entries("k=amid"), "a-star"},                // a* precedes *mid*
		{entries("k=premidpost"), "mid"},             //
		{entries("k=xyx"), "overlap"},                // x*y*x needs three pieces in order
		{entries("k=xx"), "key-only"},                // too short for x*y*x
		{entries("k=xyyx"), "overlap"},               //
		{entries("k=pq"), "double-star"},             // ** is *
		{entries("k=p-q"), "double-star"},            //
		{entries("k=other"), "key-only"},             // no value matched
		{entries("k="), "key-only"},                  // an empty request value
		{entries("n=anything"), "star"},              // * beats key-only
		{entries("n="), "star"},                      //
		{entries("w=v1", "inner=x"), "under-wildcard"},
		{entries("w=u1", "inner=x"), "-"},     // wildcard did not match, no key-only
		{entries("w=v1"), ""},                 // matched a rule with only children
		{entries("leaf=only"), ""},            // a whitelist: matched, no limits
		{entries("leaf=only", "more=x"), "-"}, // deeper than any rule
		{entries("k=abc", "more=x"), "-"},     //
		{entries("K=abc"), "-"},               // keys are case-sensitive
		{entries("k=ABC"), "key-only"},        // so are values
	}
	for _, tt := range tests {
		r := set.Match("d", tt.entries)
		got := "-"
		if r != nil {
			got = ""
			if len(r.Limits) > 0 {
				got = r.Limits[0].Name
			}
		}
		if got != tt.want {
			t.Errorf("Match(%v) = %q, want %q", tt.entries, got, tt.want)
		}
	}
}

func TestGlobMatch(t *testing.T) {
	tests := []struct {
		pattern, value string
		want           bool
	}{
		{"*", "", true},
		{"*", "anything", true},
		{"a*", "a", true},
		{"a*", "ba", false},
		{"*a", "ba", true},
		{"*a", "ab", false},
		{"a*b", "ab", true},
		{"a*b", "a", false},
		{"a*b", "acb", true},
		{"a*b", "acbc", false},
		{"a*a", "a", false},
		{"a*a", "aa", true},
		{"*ab*", "xaby", true},
		{"*ab*", "xa by", false},
		{"a*b*c", "abc", true},
		{"a*b*c", "acb", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*bb*b", "abbb", true},
		{"a*bb*b", "abb", false},
		{"**", "x", true},
		{"x**", "x", true},
		{"*.*.*", "1.2.3", true},
		{"*.*.*", "1.2", false},
	}
	for _, tt := range tests {
		if got := globMatch(strings.Split(tt.pattern, "*"), tt.value); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.pattern, tt.value, got, tt.want)
		}
	}
}
