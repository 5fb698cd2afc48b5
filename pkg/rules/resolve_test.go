package rules

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

const resolveRules = `
domain: test
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: open
  - key: shadow
    shadow_mode: true
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: tenant
    failure_mode: deny
    rate_limits:
      - {unit: second, requests_per_unit: 5, name: burst}
      - {unit: day, requests_per_unit: 2, name: daily}
  - key: premium
    rate_limit: {unit: minute, requests_per_unit: 10, name: premium, replaces: [{name: standard}]}
  - key: standard
    rate_limit: {unit: minute, requests_per_unit: 1, name: standard}
  - key: slide
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window, precision: 6}
  - key: slidelog
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_log}
  - key: trial
    rate_limit: {unlimited: true, name: trial}
  - key: paid
    rate_limit: {unit: minute, requests_per_unit: 5, replaces: [{name: trial}]}
  - key: staff
    rate_limit: {unlimited: true, replaces: [{name: standard}]}
`

func one(k, v string) []Entry { return []Entry{{Key: k, Value: v}} }

// TestResolve checks what Resolve reports of each descriptor: the rule,
// the mode, the limits with their keys, replaces and overrides.
func TestResolve(t *testing.T) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(resolveRules)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// limits summarizes a descriptor's limits as "name:rpu/unit*mult:key"
	// (key "-" when not counted, "replaced" when replaced).
	limits := func(rd *Resolved) string {
		var parts []string
		for _, l := range rd.Limits {
			k := l.Key
			switch {
			case l.Replaced:
				k = "replaced"
			case !l.Counted():
				k = "-"
			}
			parts = append(parts, l.Limit.Name+":"+strings.Join([]string{
				itoa(int(l.Limit.RequestsPerUnit)), l.Limit.Unit.String(), itoa(int(l.Limit.UnitMultiplier))}, "/")+":"+k)
		}
		return strings.Join(parts, " ")
	}
	tests := []struct {
		name  string
		descs []Descriptor
		want  []string // per descriptor: rule path, mode, override, limits
	}{
		{"a rule", []Descriptor{{Entries: one("user", "alice")}},
			[]string{"test.user enforce false :3/minute/1:r4:test/4:user=0:|a=fixed_window|w=1m0s|v5:alice"}},
		{"no rule, unlimited, no limits", []Descriptor{{Entries: one("nobody", "x")}, {Entries: one("free", "x")}, {Entries: one("open", "x")}},
			[]string{"- enforce false ", "test.free enforce false :0//1:-", "test.open enforce false "}},
		{"shadow wins over quota", []Descriptor{{Entries: one("shadow", "x")}, {Entries: one("quota", "x")}},
			[]string{"test.shadow advisory false :1/minute/1:r4:test/6:shadow=0:|a=fixed_window|w=1m0s|v1:x", "test.quota quota false :1/minute/1:r4:test/5:quota=0:|a=fixed_window|w=1m0s|v1:x"}},
		{"several limits", []Descriptor{{Entries: one("tenant", "t")}},
			[]string{"test.tenant enforce false burst:5/second/1:r4:test/6:tenant=0:|a=fixed_window|w=1s|v1:t daily:2/day/1:r4:test/6:tenant=0:|a=fixed_window|w=24h0m0s|v1:t"}},
		{"replaces across descriptors", []Descriptor{{Entries: one("standard", "s")}, {Entries: one("premium", "p")}},
			[]string{"test.standard enforce false standard:1/minute/1:replaced", "test.premium enforce false premium:10/minute/1:r4:test/7:premium=0:|a=fixed_window|w=1m0s|v1:p"}},
		{"an unlimited limit is not replaced, as in the reference", []Descriptor{{Entries: one("trial", "t")}, {Entries: one("paid", "p")}},
			[]string{"test.trial enforce false trial:0//1:-", "test.paid enforce false :5/minute/1:r4:test/4:paid=0:|a=fixed_window|w=1m0s|v1:p"}},
		{"an unlimited limit replaces", []Descriptor{{Entries: one("standard", "s")}, {Entries: one("staff", "x")}},
			[]string{"test.standard enforce false standard:1/minute/1:replaced", "test.staff enforce false :0//1:-"}},
		{"an override does not replace", []Descriptor{{Entries: one("standard", "s")}, {Entries: one("premium", "p"), Override: Override{RequestsPerUnit: 4, Unit: hour, UnitMultiplier: 2}}},
			[]string{"test.standard enforce false standard:1/minute/1:r4:test/8:standard=0:|a=fixed_window|w=1m0s|v1:s", "test.premium enforce true :4/hour/2:o4:test/7:premium=0:|a=fixed_window|w=1m0s|v1:p|w7200000000|a0"}},
		{"an override of a shadow rule enforces", []Descriptor{{Entries: one("shadow", "x"), Override: Override{RequestsPerUnit: 1, Unit: second, UnitMultiplier: 1}}},
			[]string{"test.shadow enforce true :1/second/1:o4:test/6:shadow=0:|a=fixed_window|w=1m0s|v1:x|w1000000|a0"}},
		{"an override without a rule", []Descriptor{{Entries: one("nobody", "x"), Override: Override{RequestsPerUnit: 1, Unit: second, UnitMultiplier: 1}}},
			[]string{"- enforce true :1/second/1:dv4:testv6:nobodyv1:x|w1000000|a0"}},
	}
	var res Resolution // reused, as a server does
	for _, tt := range tests {
		if err := set.Resolve(&res, "test", tt.descs); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if len(res.Descriptors) != len(tt.want) {
			t.Fatalf("%s: %d descriptors, want %d", tt.name, len(res.Descriptors), len(tt.want))
		}
		for i := range res.Descriptors {
			rd := &res.Descriptors[i]
			path := "-"
			if rd.Rule != nil {
				path = rd.Rule.Path
			}
			got := path + " " + rd.Mode.String() + " " + map[bool]string{true: "true", false: "false"}[rd.Override] + " " + limits(rd)
			if got != tt.want[i] {
				t.Errorf("%s: descriptor %d\n got  %s\n want %s", tt.name, i, got, tt.want[i])
			}
		}
	}
}

// TestResolveOverrideSpec checks the spec an override gets: the rule's
// algorithm and precision when it fits the window, the override's window.
func TestResolveOverrideSpec(t *testing.T) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(resolveRules)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		desc Descriptor
		want limit.Spec
	}{
		{"sliding rule", Descriptor{Entries: one("slide", "x"), Override: Override{RequestsPerUnit: 7, Unit: minute, UnitMultiplier: 1}},
			limit.Spec{Algorithm: limit.SlidingWindow, Limit: 7, Window: time.Minute, Precision: 6}},
		{"a shorter window keeps the precision", Descriptor{Entries: one("slide", "x"), Override: Override{RequestsPerUnit: 7, Unit: second, UnitMultiplier: 1}},
			limit.Spec{Algorithm: limit.SlidingWindow, Limit: 7, Window: time.Second, Precision: 6}},
		{"no rule", Descriptor{Entries: one("nobody", "x"), Override: Override{RequestsPerUnit: 7, Unit: day, UnitMultiplier: 3}},
			limit.Spec{Limit: 7, Window: 72 * time.Hour}},
	}
	var res Resolution
	for _, tt := range tests {
		if err := set.Resolve(&res, "test", []Descriptor{tt.desc}); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := res.Descriptors[0].Limits[0].Limit.Spec; got != tt.want {
			t.Errorf("%s: spec %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// TestResolveOverrideErrors checks that an invalid override is refused,
// naming its descriptor and field.
func TestResolveOverrideErrors(t *testing.T) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(resolveRules)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok := Descriptor{Entries: one("user", "a")}
	tests := []struct {
		name  string
		descs []Descriptor
		want  string
	}{
		{"multiplier 0", []Descriptor{ok, {Entries: one("user", "a"), Override: Override{RequestsPerUnit: 1, Unit: minute}}},
			"descriptors[1].limit.unit_multiplier: must be at least 1 when set"},
		{"a window too long", []Descriptor{{Entries: one("user", "a"), Override: Override{RequestsPerUnit: 1, Unit: year, UnitMultiplier: 1000}}},
			"descriptors[0].limit.unit_multiplier: 1000 years is longer than a window can be"},
		{"past a rule's bounds", []Descriptor{{Entries: one("slidelog", "a"), Override: Override{RequestsPerUnit: 5000, Unit: minute, UnitMultiplier: 1}}},
			"descriptors[0].limit.requests_per_unit: sliding_log of 5000 per window"},
		{"not a unit", []Descriptor{{Entries: one("user", "a"), Override: Override{RequestsPerUnit: 1, Unit: week + 1, UnitMultiplier: 1}}},
			"descriptors[0].limit.unit: Unit(8) is not a unit"},
	}
	var res Resolution
	for _, tt := range tests {
		err := set.Resolve(&res, "test", tt.descs)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to start with %q", tt.name, err, tt.want)
		}
	}
}

// TestResolveAllocations checks that a reused Resolution costs a request
// only its counter keys' strings.
func TestResolveAllocations(t *testing.T) {
	set, err := Parse(map[string][]byte{"test.yaml": []byte(resolveRules)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	descs := []Descriptor{
		{Entries: one("tenant", "t")}, // two keys
		{Entries: one("free", "f")},   // none
		{Entries: one("user", "u"), Override: Override{RequestsPerUnit: 1, Unit: second, UnitMultiplier: 1}}, // one
	}
	var res Resolution
	allocs := testing.AllocsPerRun(100, func() {
		if err := set.Resolve(&res, "test", descs); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Errorf("Resolve allocates %v times, want at most 3 (one per counter key)", allocs)
	}
	res.Reset()
	if len(res.Descriptors) != 0 || res.limits[:cap(res.limits)][0].Limit != nil {
		t.Errorf("Reset kept references: %+v", res)
	}
}
