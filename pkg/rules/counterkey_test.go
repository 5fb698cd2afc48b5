package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// keyTestRules has one rule whose counter depends on the request's value.
const keyTestRules = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`

func TestCounterKeysAreDistinct(t *testing.T) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(keyTestRules)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	user := []Entry{{Key: "user", Value: "alice"}}
	r := set.Match("test", user)
	if r == nil {
		t.Fatal("no rule for user")
	}
	minute := limit.Spec{Limit: 1, Window: time.Minute}
	hour := limit.Spec{Limit: 1, Window: time.Hour}
	gcra := limit.Spec{Algorithm: limit.GCRA, Limit: 1, Window: time.Minute}
	long := strings.Repeat("x", 100)
	keys := map[string]string{
		"rule":                        string(appendCounterKey(nil, "test", &Resolved{Rule: r, Entries: user}, r.Limits[0])),
		"rule other value":            string(appendCounterKey(nil, "test", &Resolved{Rule: r, Entries: []Entry{{Key: "user", Value: "bob"}}}, r.Limits[0])),
		"override of the rule":        string(appendOverrideKey(nil, "test", r, user, minute)),
		"override, other window":      string(appendOverrideKey(nil, "test", r, user, hour)),
		"override, other algorithm":   string(appendOverrideKey(nil, "test", r, user, gcra)),
		"override without rule":       string(appendOverrideKey(nil, "test", nil, user, minute)),
		"domain/key boundary":         string(appendOverrideKey(nil, "testuser", nil, []Entry{{Key: "", Value: "alice"}}, minute)),
		"key/value boundary":          string(appendOverrideKey(nil, "test", nil, []Entry{{Key: "usera", Value: "lice"}}, minute)),
		"entries split":               string(appendOverrideKey(nil, "test", nil, []Entry{{Key: "user", Value: ""}, {Key: "alice", Value: ""}}, minute)),
		"value mimics the suffix":     string(appendOverrideKey(nil, "test", nil, []Entry{{Key: "user", Value: "alice|w60000000|a0"}}, minute)),
		"long value":                  string(appendOverrideKey(nil, "test", nil, []Entry{{Key: "user", Value: long}}, minute)),
		"long value, one byte longer": string(appendOverrideKey(nil, "test", nil, []Entry{{Key: "user", Value: long + "x"}}, minute)),
	}
	seen := map[string]string{}
	for name, k := range keys {
		if other, dup := seen[k]; dup {
			t.Errorf("%q and %q share the key %q", name, other, k)
		}
		seen[k] = name
	}
	if k := keys["long value"]; strings.Contains(k, long) {
		t.Errorf("a long value is written verbatim: %q", k)
	}
}

// FuzzOverrideKey checks that two different override counters never share
// a key, and that no override key is a configured limit's key
// (appendOverrideKey is disjoint from Rule.AppendCounterKey).
func FuzzOverrideKey(f *testing.F) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(keyTestRules)}, Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("d", "k", "v", int64(60), false, "d", "k", "v", int64(3600), false)
	f.Add("ab", "", "c", int64(1), false, "a", "b", "c", int64(1), false)
	f.Add("a", "b|w1|a0", "", int64(1), false, "a", "b", "", int64(1), false)
	f.Add("test", "user", "alice", int64(60000), true, "test", "user", "alice", int64(60000), false)
	f.Fuzz(func(t *testing.T, d1, k1, v1 string, w1 int64, rule1 bool, d2, k2, v2 string, w2 int64, rule2 bool) {
		key := func(d, k, v string, w int64, withRule bool) (override, counter string, r *Rule, micros int64) {
			entries := []Entry{{Key: k, Value: v}}
			if withRule {
				r = set.Match(d, entries)
			}
			spec := limit.Spec{Limit: 1, Window: time.Duration(w) * time.Millisecond}
			override = string(appendOverrideKey(nil, d, r, entries, spec))
			if r != nil && len(r.Limits) > 0 {
				counter = string(r.appendIdentity(nil, r.Limits[0], entries))
				if override == counter || override == string(appendCounterKey(nil, "test", &Resolved{Rule: r, Entries: entries}, r.Limits[0])) {
					t.Fatalf("override key %q is also a counter key", override)
				}
			}
			return override, counter, r, spec.WindowMicros()
		}
		a, ca, r1, m1 := key(d1, k1, v1, w1, rule1)
		b, cb, r2, m2 := key(d2, k2, v2, w2, rule2)
		if a == cb || b == ca {
			t.Fatalf("an override key is another descriptor's counter key: %q %q %q %q", a, b, ca, cb)
		}
		hasRule := func(r *Rule) bool { return r != nil && len(r.Limits) > 0 }
		var same bool
		switch {
		case hasRule(r1) != hasRule(r2):
			same = false
		case hasRule(r1):
			// The rule's counter decides which values matter.
			same = ca == cb && m1 == m2
		default:
			same = d1 == d2 && k1 == k2 && v1 == v2 && m1 == m2
		}
		if (a == b) != same {
			t.Fatalf("keys %q and %q: equal=%v, inputs equal=%v", a, b, a == b, same)
		}
	})
}

// TestDemandKey checks DemandKey against the key an override of one hit
// per window gets from Resolve in the empty domain, which is how the
// demand counter's key was first built: the two must agree byte for byte.
func TestDemandKey(t *testing.T) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(keyTestRules)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	viaResolve := func(counterKey string, window time.Duration) string {
		secs := uint32((window + time.Second - 1) / time.Second)
		o := Override{RequestsPerUnit: 1, Unit: second, UnitMultiplier: secs}
		var res Resolution
		if err := set.Resolve(&res, "", []Descriptor{{Entries: []Entry{{Value: counterKey}}, Override: o}}); err != nil {
			return ""
		}
		return res.Descriptors[0].Limits[0].Key
	}
	var res Resolution
	if err := set.Resolve(&res, "test", []Descriptor{{Entries: []Entry{{Key: "user", Value: "alice"}}}}); err != nil {
		t.Fatal(err)
	}
	ruleKey := res.Descriptors[0].Limits[0].Key
	keys := []string{ruleKey, "", "k", "a|w1000000|a0", strings.Repeat("x", 64), strings.Repeat("y", 65)}
	windows := []time.Duration{
		time.Second, 7 * time.Second, time.Minute, 1500 * time.Millisecond,
		time.Millisecond, 59*time.Second + time.Nanosecond, 0, time.Hour,
	}
	for _, k := range keys {
		for _, w := range windows {
			want, got := viaResolve(k, w), (&ResolvedLimit{Key: k}).DemandKey(w)
			if got != want {
				t.Errorf("DemandKey(%q, %v) = %q, want %q", k, w, got, want)
			}
			if w > 0 && got == "" {
				t.Errorf("DemandKey(%q, %v) is empty", k, w)
			}
		}
	}
	if got, want := (&ResolvedLimit{Key: "k"}).DemandKey(1500*time.Millisecond), "dv0:v0:v1:k|w2000000|a0"; got != want {
		t.Errorf("DemandKey rounds 1.5 s to %q, want %q", got, want)
	}
}
