package xds

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

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
			return r.ShadowMode && r.DetailedMetric && l.Name == "hourly" && l.RequestsPerUnit == 7 && l.Unit == rules.Hour
		}},
		{"nested, with replaces", match("outer", "a", "inner", "b"), func(r *rules.Rule) bool {
			return len(r.Limits[0].Replaces) == 1 && r.Limits[0].Replaces[0] == "hourly"
		}},
		{"requests_per_unit 0 kept", match("zero", "z"), func(r *rules.Rule) bool { return r.Limits[0].RequestsPerUnit == 0 && !r.Limits[0].Unlimited }},
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
