package rules

import (
	"github.com/floodgate/floodgate/internal/racebuild"

	"strings"
	"testing"
)

// idOf parses src and returns the ID of the first limit matching e in
// domain d.
func idOf(t *testing.T, src string, e []Entry) string {
	t.Helper()
	r := parseOne(t, src).Match("d", e)
	if r == nil || len(r.Limits) == 0 {
		t.Fatalf("no limit for %v in:\n%s", e, src)
	}
	return r.Limits[0].ID
}

// TestLimitIDStability: a reload that leaves the window and algorithm alone
// keeps the ID (and so the counters); changing them changes it.
func TestLimitIDStability(t *testing.T) {
	const base = "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: token_bucket, burst: 20, name: n}\n"
	e := entries("k=v")
	baseID := idOf(t, base, e)
	if want := "1:d/1:k=1:v|a=token_bucket|w=1m0s"; baseID != want {
		t.Errorf("ID = %q, want %q", baseID, want)
	}
	same := []struct{ name, src string }{
		{"requests_per_unit", strings.Replace(base, "requests_per_unit: 10", "requests_per_unit: 99", 1)},
		{"burst", strings.Replace(base, "burst: 20", "burst: 5", 1)},
		{"name", strings.Replace(base, "name: n", "name: other", 1)},
		{"flags", strings.Replace(base, "    rate_limit:", "    shadow_mode: true\n    failure_mode: deny\n    rate_limit:", 1)},
		{"the same window in seconds", strings.Replace(base, "unit: minute", "unit: second, unit_multiplier: 60", 1)},
		{"other rules before it", strings.Replace(base, "descriptors:\n", "descriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1}\n", 1)},
		{"comments and layout", "# comment\ndomain: d\ndescriptors:\n- rate_limit:\n    name: n\n    unit: MINUTE\n    burst: 20\n    algorithm: token_bucket\n    requests_per_unit: 10\n  value: v\n  key: k\n"},
	}
	for _, tt := range same {
		if got := idOf(t, tt.src, e); got != baseID {
			t.Errorf("changing %s changed the ID: %q -> %q", tt.name, baseID, got)
		}
	}
	differ := []struct{ name, src string }{
		{"algorithm", strings.Replace(base, "token_bucket", "gcra", 1)},
		{"unit", strings.Replace(base, "minute", "hour", 1)},
		{"unit_multiplier", strings.Replace(base, "unit: minute", "unit: minute, unit_multiplier: 2", 1)},
		{"domain", strings.Replace(base, "domain: d", "domain: d2", 1)},
		{"key", strings.Replace(base, "key: k", "key: k2", 1)},
		{"value", strings.Replace(base, "value: v", "value: v2", 1)},
	}
	for _, tt := range differ {
		set := parseOne(t, tt.src)
		for _, r := range set.Rules() {
			for _, l := range r.Limits {
				if l.ID == baseID {
					t.Errorf("changing %s kept the ID %q", tt.name, baseID)
				}
			}
		}
	}
	// Precision and calendar are part of the window.
	sw := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 10, algorithm: sliding_window, precision: 6}\n"
	swID := idOf(t, sw, entries("k=x"))
	if swID != "1:d/1:k=0:|a=sliding_window|w=1m0s|p=6" {
		t.Errorf("sliding window ID = %q", swID)
	}
	if idOf(t, strings.Replace(sw, "precision: 6", "precision: 12", 1), entries("k=x")) == swID {
		t.Errorf("changing precision kept the ID")
	}
	cal := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 10, calendar: true, timezone: Europe/Paris}\n"
	calID := idOf(t, cal, entries("k=x"))
	if calID != "1:d/1:k=0:|a=fixed_window|w=cal:month@Europe/Paris" {
		t.Errorf("calendar ID = %q", calID)
	}
	for _, change := range []string{
		strings.Replace(cal, "Europe/Paris", "UTC", 1),
		strings.Replace(cal, ", calendar: true, timezone: Europe/Paris", "", 1),
	} {
		if idOf(t, change, entries("k=x")) == calID {
			t.Errorf("changing the calendar kept the ID: %s", change)
		}
	}
	unl := idOf(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n", entries("k=x"))
	if unl != "1:d/1:k=0:|unlimited" {
		t.Errorf("unlimited ID = %q", unl)
	}
}

// TestLimitIDsAreDistinct: every limit of a set has its own ID, even where
// the reference server's "_"-joined names collide.
func TestLimitIDsAreDistinct(t *testing.T) {
	src := `domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    value: b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a.b
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: x
    rate_limits:
      - {unit: second, requests_per_unit: 1}
      - {unit: second, requests_per_unit: 1, algorithm: gcra}
      - {unit: minute, requests_per_unit: 1}
      - {unit: minute, requests_per_unit: 1, algorithm: sliding_window}
      - {unit: minute, requests_per_unit: 1, algorithm: sliding_window, precision: 2}
`
	set := parseOne(t, src)
	seen := map[string]string{}
	for _, r := range set.Rules() {
		for _, l := range r.Limits {
			if other, dup := seen[l.ID]; dup {
				t.Errorf("ID %q shared by %s and %s", l.ID, other, r.Path)
			}
			seen[l.ID] = r.Path
		}
	}
	if len(seen) != 9 {
		t.Errorf("%d distinct IDs, want 9", len(seen))
	}
}

// TestCounterKeys checks which request values a counter key includes.
func TestCounterKeys(t *testing.T) {
	src := `domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1}
    descriptors:
      - key: path
        value: /files/*
        share_threshold: true
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: path
        value: /api/*
        rate_limit: {unit: second, requests_per_unit: 1}
      - key: path
        value: /exact
        rate_limit: {unit: second, requests_per_unit: 1}
`
	set := parseOne(t, src)
	key := func(e []Entry) string {
		r := set.Match("d", e)
		if r == nil {
			t.Fatalf("no rule for %v", e)
		}
		return string(r.appendIdentity(nil, r.Limits[0], e))
	}
	long := strings.Repeat("x", 65)
	tests := []struct {
		name string
		a, b []Entry
		same bool
	}{
		{"key-only: each value its own counter", entries("user=alice"), entries("user=bob"), false},
		{"key-only: the same value, the same counter", entries("user=alice"), entries("user=alice"), true},
		{"share_threshold: one counter for the pattern", entries("user=alice", "path=/files/a"), entries("user=alice", "path=/files/b"), true},
		{"share_threshold: still per key-only parent", entries("user=alice", "path=/files/a"), entries("user=bob", "path=/files/a"), false},
		{"wildcard: each value its own counter", entries("user=alice", "path=/api/a"), entries("user=alice", "path=/api/b"), false},
		{"exact: per parent value", entries("user=alice", "path=/exact"), entries("user=bob", "path=/exact"), false},
		{"long values are hashed, distinctly", entries("user=" + long), entries("user=" + long + "y"), false},
		{"long values are stable", entries("user=" + long), entries("user=" + long), true},
		{"no separator confusion", entries("user=a|v1:b"), entries("user=a"), false},
	}
	for _, tt := range tests {
		ka, kb := key(tt.a), key(tt.b)
		if (ka == kb) != tt.same {
			t.Errorf("%s: %q vs %q, same = %v", tt.name, ka, kb, ka == kb)
		}
	}
	if got := key(entries("user=alice", "path=/api/x")); got != "1:d/4:user=0:/4:path=6:/api/*|a=fixed_window|w=1s|v5:alice|v6:/api/x" {
		t.Errorf("counter key = %q", got)
	}
	if got := key(entries("user=" + long)); !strings.HasPrefix(got, "1:d/4:user=0:|a=fixed_window|w=1s|h") || len(got) != len("1:d/4:user=0:|a=fixed_window|w=1s|h")+64 {
		t.Errorf("hashed counter key = %q", got)
	}

	// No allocation when dst has room.
	e := entries("user=alice", "path=/api/x")
	r := set.Match("d", e)
	buf := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		buf = r.appendIdentity(buf[:0], r.Limits[0], e)
	})
	if allocs != 0 {
		t.Errorf("appendIdentity allocates %v times", allocs)
	}
	long2 := entries("user=" + long)
	r2 := set.Match("d", long2)
	allocs = testing.AllocsPerRun(100, func() {
		buf = r2.appendIdentity(buf[:0], r2.Limits[0], long2)
	})
	if allocs != 0 && !racebuild.Enabled {
		t.Errorf("appendIdentity of a long value allocates %v times", allocs)
	}
}

// TestCounterKeysAreInjective checks, over many combinations of values
// that are easy to confuse, that different relevant values never share a
// key.
func TestCounterKeysAreInjective(t *testing.T) {
	set := parseOne(t, "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1}\n")
	values := []string{"", "1", "1:", ":", "|", "|v", "|v1:", "v1:x", "x|v1:", "1:x", strings.Repeat("y", 64), strings.Repeat("y", 65), strings.Repeat("y", 66)}
	seen := map[string][2]string{}
	for _, a := range values {
		for _, b := range values {
			e := []Entry{{"a", a}, {"b", b}}
			r := set.Match("d", e)
			k := string(r.appendIdentity(nil, r.Limits[0], e))
			if prev, dup := seen[k]; dup {
				t.Errorf("(%q, %q) and (%q, %q) share key %q", a, b, prev[0], prev[1], k)
			}
			seen[k] = [2]string{a, b}
		}
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	set, err := Load("testdata/reference", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range [][]Entry{
		entries("to_number=1"),
		entries("message_type=marketing", "to_number=2"),
		entries("path=/files/a.txt"),
		entries("user=u", "action=upload-x"),
		entries("nothing=here"),
	} {
		allocs := testing.AllocsPerRun(100, func() {
			set.Match("messaging", e)
			set.Match("wildcard", e)
		})
		if allocs != 0 {
			t.Errorf("Match(%v) allocates %v times", e, allocs)
		}
	}
}
