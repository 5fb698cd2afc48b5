package xds

import (
	"fmt"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/xdstest"
	"github.com/floodgate/floodgate/pkg/rules"
)

func mustAny(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestFilesCompile converts each field of the proto and compiles the
// result: what the reference server reads from a resource, floodgate
// reads alike.
func TestFilesCompile(t *testing.T) {
	cfg := &rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "open", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
		{Key: "k", Value: "v", ShadowMode: true, DetailedMetric: true,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 7, Name: "hourly"}},
		{Key: "outer", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "inner",
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1,
				Replaces: []*rlsconf.RateLimitReplace{{Name: "hourly"}}}}}},
		{Key: "zero", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY}},
		{Key: "quota", QuotaMode: true, Metadata: mustStruct(t, map[string]any{"team": "a", "nested": map[string]any{"x": 1}}),
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: 10}},
	}}
	files, err := Files([]*anypb.Any{mustAny(t, cfg)})
	if err != nil {
		t.Fatal(err)
	}
	set, err := rules.Parse(files, rules.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, files["xds/n"])
	}
	match := func(kv ...string) *rules.Rule {
		var es []rules.Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, rules.Entry{Key: kv[i], Value: kv[i+1]})
		}
		return set.Match("d", es)
	}
	for _, tc := range []struct {
		name string
		rule *rules.Rule
		ok   func(r *rules.Rule) bool
	}{
		{"unlimited, without a unit", match("open", "x"), func(r *rules.Rule) bool { return r.Limits[0].Unlimited }},
		{"flags, name and limit", match("k", "v"), func(r *rules.Rule) bool {
			l := r.Limits[0]
			return r.ShadowMode && r.DetailedMetric && l.Name == "hourly" && l.RequestsPerUnit == 7 && l.Unit.String() == "hour"
		}},
		{"nested, with replaces", match("outer", "a", "inner", "b"), func(r *rules.Rule) bool {
			return len(r.Limits[0].Replaces) == 1 && r.Limits[0].Replaces[0] == "hourly"
		}},
		{"requests_per_unit 0 kept", match("zero", "z"), func(r *rules.Rule) bool { return r.Limits[0].RequestsPerUnit == 0 && !r.Limits[0].Unlimited }},
		// As the reference's ConfigXdsProtoToYaml carries them.
		{"quota_mode and metadata", match("quota", "q"), func(r *rules.Rule) bool {
			nested, _ := r.Metadata["nested"].(map[string]any)
			return r.QuotaMode && r.Metadata["team"] == "a" && nested["x"] == float64(1)
		}},
	} {
		if tc.rule == nil || len(tc.rule.Limits) == 0 || !tc.ok(tc.rule) {
			t.Errorf("%s: rule %+v", tc.name, tc.rule)
		}
	}
}

// TestFilesRefuse names the resource and the problem for each resource
// that cannot become a rule file.
func TestFilesRefuse(t *testing.T) {
	good := mustAny(t, &rlsconf.RateLimitConfig{Name: "a", Domain: "a"})
	undecodable := &anypb.Any{TypeUrl: TypeURL, Value: []byte{0xff, 0xff}}
	otherDomain := RuleFile("r", []byte("domain: one\n"))
	otherDomain.Domain = "two"
	for _, tc := range []struct {
		name string
		res  []*anypb.Any
		want string
	}{
		{"another type", []*anypb.Any{mustAny(t, wrapperspb.String("domain: x"))}, `xds/resource[0]: resource of type "type.googleapis.com/google.protobuf.StringValue"`},
		{"undecodable", []*anypb.Any{good, undecodable}, "xds/resource[1]: does not decode as a RateLimitConfig"},
		{"one name twice", []*anypb.Any{good, good}, "xds/a: two resources have this name"},
		{"domains differ", []*anypb.Any{mustAny(t, otherDomain)}, `xds/r: the rule file's domain "one" differs from the resource's "two"`},
	} {
		if _, err := Files(tc.res); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestRuleFileSurvivesEncoding: the rule file travels as an unknown field
// through encoding and decoding, as a management server and the wire pass
// it, and the last occurrence wins.
func TestRuleFileSurvivesEncoding(t *testing.T) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(RuleFile("r", []byte("domain: first\n")))
	if err != nil {
		t.Fatal(err)
	}
	var c rlsconf.RateLimitConfig
	if err := proto.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	again := RuleFile("r", []byte("domain: second\n"))
	c.ProtoReflect().SetUnknown(append(c.ProtoReflect().GetUnknown(), again.ProtoReflect().GetUnknown()...))
	files, err := Files([]*anypb.Any{mustAny(t, &c)})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(files["xds/r"]); got != "domain: second\n" {
		t.Errorf("rule file %q, want the last one", got)
	}
}

// TestFilesAcceptAsReference: each push is loaded or refused as the
// reference's loader (config_impl.go loadConfig/loadDescriptors) does.
func TestFilesAcceptAsReference(t *testing.T) {
	minute := rlsconf.RateLimitUnit_MINUTE
	pol := func(n uint32) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{Unit: minute, RequestsPerUnit: n}
	}
	for _, tc := range []struct {
		name   string
		res    []*rlsconf.RateLimitConfig
		accept bool // what the reference does
	}{
		{"zero requests per unit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: pol(0)}}}}, true},
		{"unlimited with unit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: minute, Unlimited: true}}}}}, false},
		{"unlimited with count", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 5, Unlimited: true}}}}}, true},
		{"empty rate limit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{}}}}}, false},
		{"empty key", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{RateLimit: pol(1)}}}}, false},
		{"empty domain", []*rlsconf.RateLimitConfig{{Name: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: pol(1)}}}}, false},
		{"domain only", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a"}}, true},
		{"duplicate descriptor", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: pol(1)}, {Key: "k", RateLimit: pol(2)}}}}, false},
		{"duplicate domain", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "d"}, {Name: "b", Domain: "d"}}, false},
		{"descriptor no limit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k"}}}}, true},
		{"shadow no limit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", ShadowMode: true}}}}, true},
		{"replaces self", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: minute, RequestsPerUnit: 1, Name: "n", Replaces: []*rlsconf.RateLimitReplace{{Name: "n"}}}}}}}, false},
		{"replaces empty", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: minute, RequestsPerUnit: 1, Replaces: []*rlsconf.RateLimitReplace{{}}}}}}}, false},
		{"replaces unknown name", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: minute, RequestsPerUnit: 1, Replaces: []*rlsconf.RateLimitReplace{{Name: "zz"}}}}}}}, true},
		{"out of range unit", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unit: 99, RequestsPerUnit: 1}}}}}, false},
		{"wildcard middle", []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", Value: "a*b", RateLimit: pol(1)}}}}, true},
		{"empty name", []*rlsconf.RateLimitConfig{{Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "k", RateLimit: pol(1)}}}}, true},
		{"two empty names", []*rlsconf.RateLimitConfig{{Domain: "a"}, {Domain: "b"}}, true},
	} {
		var anys []*anypb.Any
		for _, r := range tc.res {
			a, _ := anypb.New(r)
			anys = append(anys, a)
		}
		files, err := Files(anys)
		if err == nil {
			_, err = rules.Parse(files, rules.Options{})
		}
		if got := err == nil; got != tc.accept {
			t.Errorf("%s: floodgate accepts=%v, reference accepts=%v (err %v)", tc.name, got, tc.accept, err)
		}
	}
}

// TestFilesStringsRoundTrip converts RateLimitConfig resources whose keys
// and values are strings that YAML reads specially, and checks that each
// rule compiles and matches exactly that key and value, as the reference
// (which reads the proto's strings as they are) would.
func TestFilesStringsRoundTrip(t *testing.T) {
	odd := []string{"yes", "no", "on", "Off", "~", "null", "<<", "=", "- x", "-", "#x", "a: b", "a #b",
		"line\nbreak", " lead", "trail ", "\ttab", "*x", "&a", "!tag", "%p", "@a", "`b", "'q", "\"d", "{}", "[a]",
		"0x10", "1e3", "0o7", ".inf", "2024-01-01", "x\u0085y", "x\u2028y", "x\r\ny", "x\ry", "?", ":", "|", ">", "\\"}
	for i, s := range odd {
		for _, asKey := range []bool{true, false} {
			key, value := "k", s
			if asKey {
				key, value = s, "v"
			}
			c := &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{
				Key: key, Value: value,
				RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: uint32(i + 1)},
			}}}
			a, err := anypb.New(c)
			if err != nil {
				t.Fatal(err)
			}
			files, err := Files([]*anypb.Any{a})
			if err != nil {
				t.Errorf("%q (key %v): Files: %v", s, asKey, err)
				continue
			}
			set, err := rules.Parse(files, rules.Options{})
			if err != nil {
				t.Errorf("%q (key %v): NACK where the reference loads it: %v\nfile:\n%s", s, asKey, err, files["xds/r"])
				continue
			}
			r := set.Match("d", []rules.Entry{{Key: key, Value: value}})
			if r == nil || len(r.Limits) == 0 || int(r.Limits[0].RequestsPerUnit) != i+1 {
				t.Errorf("%q (key %v): the rule does not match its own key and value (rule %v)\nfile:\n%s", s, asKey, r, files["xds/r"])
			}
		}
	}
}

// TestFilesBigResource converts a resource large enough to be parsed in
// slices, with long values holding spaces, "- " and ": ", nested levels,
// and checks every rule matches.
func TestFilesBigResource(t *testing.T) {
	const n = 3000
	var ds []*rlsconf.RateLimitDescriptor
	val := func(i int) string {
		return strings.Repeat("a b - c: d #e ", 12) + itoa(i) + "\n- key: x\n  value: y"
	}
	for i := range n {
		ds = append(ds, &rlsconf.RateLimitDescriptor{Key: "route", Value: val(i), Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "- k", Value: "v: " + itoa(i), RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: uint32(i + 1)}},
		}})
	}
	a, _ := anypb.New(&rlsconf.RateLimitConfig{Name: "ns/gw/http", Domain: "ns/gw/http", Descriptors: ds})
	files, err := Files([]*anypb.Any{a})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file of %d bytes", len(files["xds/ns/gw/http"]))
	set, err := rules.Parse(files, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		r := set.Match("ns/gw/http", []rules.Entry{{Key: "route", Value: val(i)}, {Key: "- k", Value: "v: " + itoa(i)}})
		if r == nil || int(r.Limits[0].RequestsPerUnit) != i+1 {
			t.Fatalf("rule %d: %v", i, r)
		}
	}
}

// TestEnvoyGatewayResources: the RateLimitConfig resources of every case
// of Envoy Gateway's translator test data load as pushed, all of a case in
// one response, and give the rules their documents give as rule files.
func TestEnvoyGatewayResources(t *testing.T) {
	for _, c := range xdstest.GatewayCases(t) {
		var anys []*anypb.Any
		asFiles := map[string][]byte{}
		for i, doc := range c.Docs {
			anys = append(anys, mustAny(t, c.Resource(t, i)))
			asFiles[fmt.Sprintf("%s-%d.yaml", c.Name, i)] = []byte(doc)
		}
		files, err := Files(anys)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		pushed, err := rules.Parse(files, rules.Options{})
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if w := pushed.Warnings(); len(w) > 0 {
			t.Errorf("%s: warnings %v", c.Name, w)
		}
		written, err := rules.Parse(asFiles, rules.Options{})
		if err != nil {
			t.Errorf("%s as rule files: %v", c.Name, err)
			continue
		}
		if got, want := ruleList(pushed), ruleList(written); got != want {
			t.Errorf("%s: pushed, the rules are\n%s\nwritten as files\n%s", c.Name, got, want)
		}
	}
}

// ruleList describes every rule of set, with its limits and flags, one
// a line, in order.
func ruleList(set *rules.Set) string {
	var b strings.Builder
	for _, r := range set.Rules() {
		fmt.Fprintf(&b, "%s shadow=%t", r.Path, r.ShadowMode)
		for _, l := range r.Limits {
			b.WriteString(" " + l.Describe())
		}
		b.WriteString("\n")
	}
	return b.String()
}
