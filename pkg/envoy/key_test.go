package envoy

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

func TestCounterKeysAreDistinct(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	user := []rules.Entry{{Key: "user", Value: "alice"}}
	r := set.Match("test", user)
	if r == nil {
		t.Fatal("no rule for user")
	}
	minute := limit.Spec{Limit: 1, Window: time.Minute}
	hour := limit.Spec{Limit: 1, Window: time.Hour}
	gcra := limit.Spec{Algorithm: limit.GCRA, Limit: 1, Window: time.Minute}
	long := strings.Repeat("x", 100)
	keys := map[string]string{
		"rule":                        string(appendRuleKey(nil, r, r.Limits[0], user)),
		"rule other value":            string(appendRuleKey(nil, r, r.Limits[0], []rules.Entry{{Key: "user", Value: "bob"}})),
		"override of the rule":        string(appendOverrideKey(nil, "test", r, user, minute)),
		"override, other window":      string(appendOverrideKey(nil, "test", r, user, hour)),
		"override, other algorithm":   string(appendOverrideKey(nil, "test", r, user, gcra)),
		"override without rule":       string(appendOverrideKey(nil, "test", nil, user, minute)),
		"domain/key boundary":         string(appendOverrideKey(nil, "testuser", nil, []rules.Entry{{Key: "", Value: "alice"}}, minute)),
		"key/value boundary":          string(appendOverrideKey(nil, "test", nil, []rules.Entry{{Key: "usera", Value: "lice"}}, minute)),
		"entries split":               string(appendOverrideKey(nil, "test", nil, []rules.Entry{{Key: "user", Value: ""}, {Key: "alice", Value: ""}}, minute)),
		"value mimics the suffix":     string(appendOverrideKey(nil, "test", nil, []rules.Entry{{Key: "user", Value: "alice|w60000000|a0"}}, minute)),
		"long value":                  string(appendOverrideKey(nil, "test", nil, []rules.Entry{{Key: "user", Value: long}}, minute)),
		"long value, one byte longer": string(appendOverrideKey(nil, "test", nil, []rules.Entry{{Key: "user", Value: long + "x"}}, minute)),
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

// FuzzOverrideKey checks that two different domain-override counters never
// share a key.
func FuzzOverrideKey(f *testing.F) {
	f.Add("d", "k", "v", int64(60), "d", "k", "v", int64(3600))
	f.Add("ab", "", "c", int64(1), "a", "b", "c", int64(1))
	f.Add("a", "b|w1|a0", "", int64(1), "a", "b", "", int64(1))
	f.Fuzz(func(t *testing.T, d1, k1, v1 string, w1 int64, d2, k2, v2 string, w2 int64) {
		s1 := limit.Spec{Limit: 1, Window: time.Duration(w1) * time.Millisecond}
		s2 := limit.Spec{Limit: 1, Window: time.Duration(w2) * time.Millisecond}
		a := appendOverrideKey(nil, d1, nil, []rules.Entry{{Key: k1, Value: v1}}, s1)
		b := appendOverrideKey(nil, d2, nil, []rules.Entry{{Key: k2, Value: v2}}, s2)
		same := d1 == d2 && k1 == k2 && v1 == v2 && s1.WindowMicros() == s2.WindowMicros()
		if (string(a) == string(b)) != same {
			t.Fatalf("keys %q and %q: equal=%v, inputs equal=%v", a, b, string(a) == string(b), same)
		}
	})
}
