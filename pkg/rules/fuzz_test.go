package rules

import (
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/pkg/limit"
)

// FuzzParse feeds arbitrary bytes to the parser. It must never panic or
// hang, errors must be LoadErrors that name the file, a set that loads
// must be consistent: unique limit IDs, valid specs, and every all-exact
// rule reachable by Match, and parsing in slices must give exactly what
// parsing whole gives.
func FuzzParse(f *testing.F) {
	f.Add([]byte(limitFile("unit: second", "requests_per_unit: 10", "algorithm: token_bucket", "burst: 20")))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    value: a*b*\n    share_threshold: true\n    rate_limits: [{unit: day, requests_per_unit: 1, calendar: true, timezone: Asia/Tokyo}, {unit: second}]\n"))
	f.Add([]byte("a: &a [x]\nb: [*a, *a]\n<<: {domain: d}\n"))
	f.Add([]byte("domain: d\n---\n"))
	f.Add([]byte("\x00\xff"))
	f.Add([]byte("domain: d\ndescriptors:\n- key: a\n  rate_limit: &r {unit: second}\n# c\n- key: b\n  rate_limit: *r\n  descriptors:\n  - {key: c}\n"))
	f.Add([]byte("descriptors:\r\n  - key: \"a\r\n  - b\"\r\n  - key: c\r\n    value: |\r\n      - x\r\ndomain: d\r\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		checkSlicedIsWhole(t, map[string]string{"f.yaml": string(data)}, Options{})
		set, err := Parse(map[string][]byte{"f.yaml": data}, Options{})
		if err != nil {
			var le *LoadError
			if !errors.As(err, &le) || len(le.Errors) == 0 {
				t.Fatalf("error %T %v is not a LoadError with errors", err, err)
			}
			for _, fe := range le.Errors {
				if fe.Pos.File != "f.yaml" || fe.Msg == "" || fe.Pos.Line < 0 || fe.Pos.Column < 0 {
					t.Fatalf("malformed error %+v", fe)
				}
			}
			return
		}
		ids := map[string]bool{}
		for _, r := range set.Rules() {
			for _, l := range r.Limits {
				if ids[l.ID] {
					t.Fatalf("duplicate limit ID %q", l.ID)
				}
				ids[l.ID] = true
				if !l.Unlimited {
					if err := l.Spec.Validate(); err != nil {
						t.Fatalf("invalid spec compiled for %s: %v", r.Path, err)
					}
				}
			}
			exact := true
			e := make([]Entry, len(r.levels))
			for i, lv := range r.levels {
				exact = exact && lv.kind == matchExact
				e[i] = Entry{lv.key, lv.value}
			}
			if exact && set.Match(r.Domain, e) != r {
				t.Fatalf("rule %s is not reached by its own descriptor", r.Path)
			}
			_ = r.appendIdentity(nil, firstLimit(r), e)
		}
	})
}

func firstLimit(r *Rule) *Limit {
	if len(r.Limits) > 0 {
		return r.Limits[0]
	}
	return &Limit{}
}

// fuzzRules is the rule set FuzzMatch matches against: every kind of level,
// overlapping wildcards, and nesting.
const fuzzRules = `domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: b
        value: x*
        rate_limit: {unit: second, requests_per_unit: 2}
      - key: b
        value: "*y"
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 3}
      - key: b
        value: xy
        rate_limit: {unit: second, requests_per_unit: 4}
      - key: b
        rate_limit: {unit: second, requests_per_unit: 5}
  - key: a
    value: k*e*y
    rate_limit: {unit: second, requests_per_unit: 6}
    descriptors:
      - key: b
        value: "**z"
        rate_limit: {unit: second, requests_per_unit: 7}
  - key: c
    value: "*"
    descriptors:
      - key: c
        value: "*.*"
      - key: c
  - key: b
    value: ""
    descriptors:
      - key: b
        descriptors:
          - key: b
            value: q
            rate_limit: {unit: second, requests_per_unit: 8}
`

var fuzzSet = sync.OnceValues(func() (*Set, []*descDoc) {
	set, err := Parse(map[string][]byte{"f.yaml": []byte(fuzzRules)}, Options{})
	if err != nil {
		panic(err)
	}
	var doc parsed
	parseFile("f.yaml", []byte(fuzzRules), &problems{}, &doc, 0)
	return set, doc.descs
})

// oracleMatch is the matching rule written plainly, with regular
// expressions for wildcards, over the parsed (uncompiled) descriptors. It
// returns the matched rule's path, or "" for none.
func oracleMatch(descs []*descDoc, domain string, e []Entry) string {
	if len(e) == 0 {
		return ""
	}
	path := domain
	for i, ent := range e {
		var exact, wild, keyOnly *descDoc
		for _, d := range descs {
			if d.key != ent.Key {
				continue
			}
			switch {
			case d.value == "":
				keyOnly = d
			case strings.Contains(d.value, "*"):
				parts := strings.Split(d.value, "*")
				for j := range parts {
					parts[j] = regexp.QuoteMeta(parts[j])
				}
				if wild == nil && regexp.MustCompile(`(?s)^`+strings.Join(parts, ".*")+`$`).MatchString(ent.Value) {
					wild = d
				}
			case d.value == ent.Value:
				exact = d
			}
		}
		next := exact
		if next == nil {
			next = wild
		}
		if next == nil {
			next = keyOnly
		}
		if next == nil {
			return ""
		}
		path += "." + next.key
		if next.value != "" {
			path += "_" + next.value
		}
		if i < len(e)-1 {
			descs = next.children
		}
	}
	return path
}

// FuzzMatch compares Match with the plain oracle on arbitrary descriptors of
// up to three entries, and checks Explain and counter keys agree with it.
func FuzzMatch(f *testing.F) {
	f.Add("a", "xy", "b", "xy", "", "", uint8(2))
	f.Add("a", "key", "b", "zz", "", "", uint8(2))
	f.Add("b", "", "b", "v", "b", "q", uint8(3))
	f.Add("c", "anything", "c", "a.b", "", "", uint8(2))
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2, k3, v3 string, n uint8) {
		set, descs := fuzzSet()
		e := []Entry{{k1, v1}, {k2, v2}, {k3, v3}}[:n%4]
		r := set.Match("d", e)
		want := oracleMatch(descs, "d", e)
		got := ""
		if r != nil {
			got = r.Path
		}
		if got != want {
			t.Fatalf("Match(%q) = %q, oracle says %q", e, got, want)
		}
		if ex, _ := set.explain(&strings.Builder{}, "d", e); ex != r {
			t.Fatalf("Explain(%q) found %v, Match %v", e, ex, r)
		}
		if r == nil {
			return
		}
		for _, l := range r.Limits {
			k := r.appendIdentity(nil, l, e)
			if !strings.HasPrefix(string(k), l.ID) {
				t.Fatalf("counter key %q does not start with the ID %q", k, l.ID)
			}
			if l.Spec.Algorithm != limit.FixedWindow {
				t.Fatalf("unexpected algorithm")
			}
		}
	})
}
