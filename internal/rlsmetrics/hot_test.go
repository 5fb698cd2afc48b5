package rlsmetrics

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestHotCounters sends one heavy counter among many distinct light ones
// and checks what Hot reports: the heavy one first with its exact count
// (it was tracked from its first hit), at most HotCapacity counters kept,
// values only for detailed_metric rules and only when asked, and the
// labels a detailed rule's series are under.
func TestHotCounters(t *testing.T) {
	const heavy, light = 500, 1000
	h := newHarness(t, envoy.Options{}, Options{})
	send := func(key, value string) {
		t.Helper()
		if _, err := h.svc.ShouldRateLimit(context.Background(), request("test", desc(key, value))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range light {
		for _, key := range []string{"user", "detailed"} {
			if i%3 == 0 {
				send(key, "heavy")
			}
			send(key, fmt.Sprintf("light%d", i))
		}
	}
	for _, key := range []string{"user", "detailed"} {
		for range heavy - (light+2)/3 {
			send(key, "heavy")
		}
	}
	byRule := func(hot []RuleHot) map[string]RuleHot {
		m := map[string]RuleHot{}
		for _, r := range hot {
			m[r.Rule] = r
		}
		return m
	}
	for _, tc := range []struct {
		rule, wantKey string
		show          HotValues
		hidden        bool
	}{
		{"test.user", "test.user #", HotAll, true}, // not kept without KeepHotValues
		{"test.user", "test.user #", HotOptedIn, true},
		{"test.detailed", "test.detailed_heavy", HotAll, false},
		{"test.detailed", "test.detailed_heavy", HotOptedIn, false},
		{"test.detailed", "test.detailed #", HotFingerprints, true},
	} {
		r, ok := byRule(h.m.Hot(5, tc.show))[tc.rule]
		if !ok {
			t.Fatalf("Hot(show %v) has no %s", tc.show, tc.rule)
		}
		if len(r.Hot) != 5 {
			t.Fatalf("%s: %d hot counters, want 5", tc.rule, len(r.Hot))
		}
		top := r.Hot[0]
		if !strings.HasPrefix(top.Key, tc.wantKey) || top.Hidden != tc.hidden {
			t.Errorf("%s (show %v): top key %q hidden %v, want prefix %q hidden %v", tc.rule, tc.show, top.Key, top.Hidden, tc.wantKey, tc.hidden)
		}
		if top.Hits != heavy || top.Error != 0 {
			t.Errorf("%s: heavy counter hits %d error %d, want %d and 0", tc.rule, top.Hits, top.Error, heavy)
		}
		if tc.hidden && strings.Contains(top.Key, "heavy") {
			t.Errorf("%s: hidden key %q shows the value", tc.rule, top.Key)
		}
		for _, c := range r.Hot[1:] {
			if c.Hits < c.Error || c.Hits > top.Hits {
				t.Errorf("%s: counter %+v out of bounds", tc.rule, c)
			}
		}
	}
	all := byRule(h.m.Hot(HotCapacity+10, HotAll))
	if n := len(all["test.user"].Hot); n != HotCapacity {
		t.Errorf("%d counters kept, want HotCapacity %d", n, HotCapacity)
	}
	if all["test.user"].ValueLabels != nil {
		t.Errorf("test.user has value labels %v", all["test.user"].ValueLabels)
	}
	// 1001 distinct values, DefaultMaxValueSeries labelled, the rest under _other_.
	if l := all["test.detailed"].ValueLabels; len(l) != DefaultMaxValueSeries+1 || !strings.Contains(strings.Join(l, " "), "test.detailed._other_") {
		t.Errorf("test.detailed has %d value labels (want %d, _other_ included)", len(l), DefaultMaxValueSeries+1)
	}
}

// With KeepHotValues every rule's values are kept, and Hot shows them per
// HotValues: all of them for HotAll, only the opted-in rules' for
// HotOptedIn, none for HotFingerprints.
func TestHotValuesKept(t *testing.T) {
	h := newHarness(t, envoy.Options{}, Options{Store: "memory", KeepHotValues: true})
	m := h.m
	for _, d := range [][2]string{{"user", "alice"}, {"detailed", "acme"}} {
		if _, err := h.svc.ShouldRateLimit(context.Background(), request("test", desc(d[0], d[1]))); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		values       HotValues
		user, detail string // the keys shown; "#" for a fingerprint
	}{
		{HotAll, "test.user_alice", "test.detailed_acme"},
		{HotOptedIn, "#", "test.detailed_acme"},
		{HotFingerprints, "#", "#"},
	} {
		got := map[string]string{}
		for _, r := range m.Hot(5, tc.values) {
			if len(r.Hot) == 1 {
				got[r.Rule] = r.Hot[0].Key
				if r.Hot[0].Hidden {
					got[r.Rule] = "#"
				}
			}
		}
		if got["test.user"] != tc.user || got["test.detailed"] != tc.detail {
			t.Errorf("Hot(%v): keys %q, want user %q and detailed %q", tc.values, got, tc.user, tc.detail)
		}
	}
}

// A kept value is cut to HotKeyBytes at a character boundary; a reload
// that turns a rule's values off keeps them only for HotAll when every
// rule's values are kept.
func TestHotSketchLabels(t *testing.T) {
	long := strings.Repeat("é", HotKeyBytes)
	var s hotSketch
	s.add([]rules.Entry{{Key: "k", Value: long}}, true, true, []byte(long), 1, false)
	key := s.top(1, "p", HotAll)[0].Key
	if len(key) > HotKeyBytes || !strings.HasSuffix(key, "é…") || !utf8.ValidString(key) {
		t.Errorf("a %d-byte value is kept as %d bytes %q, want at most %d ending é…", len(long), len(key), key, HotKeyBytes)
	}
	s.add([]rules.Entry{{Key: "k", Value: long}}, true, false, []byte(long), 1, false)
	for _, tc := range []struct {
		values HotValues
		hidden bool
	}{{HotAll, false}, {HotOptedIn, true}} {
		if c := s.top(1, "p", tc.values)[0]; c.Hidden != tc.hidden {
			t.Errorf("after the rule's values were turned off, Hot(%v) shows %+v, want hidden %v", tc.values, c, tc.hidden)
		}
	}
}

// TestHotSketchKeepsHeavyHitters: a counter with more than 1/HotCapacity
// of the hits is reported whatever order the hits come in, with a count
// within its error bound.
func TestHotSketchKeepsHeavyHitters(t *testing.T) {
	var s hotSketch
	const rounds = 50
	heavy := []rules.Entry{{Key: "k", Value: "heavy"}}
	for i := range rounds * HotCapacity * 4 {
		if i%(HotCapacity/2) == 0 {
			s.add(heavy, true, true, []byte("heavy"), 1, true)
		}
		s.add([]rules.Entry{{Key: "k", Value: fmt.Sprint(i)}}, true, true, []byte(fmt.Sprint(i)), 1, false)
	}
	want := uint64(rounds * 4 * 2)
	top := s.top(1, "p", HotOptedIn)[0]
	if top.Key != "heavy" || top.Hits-top.Error > want || top.Hits < want || top.Over != top.Hits-top.Error {
		t.Errorf("top counter %+v, want heavy with %d hits within its bounds", top, want)
	}
	if len(s.slots) != HotCapacity || len(s.hashes) != HotCapacity {
		t.Errorf("sketch holds %d slots, %d hashes; want %d", len(s.slots), len(s.hashes), HotCapacity)
	}
	for i := range s.slots {
		if s.hashes[i] != s.slots[i].hash || slices.Index(s.hashes, s.hashes[i]) != i {
			t.Errorf("slot %d: hash %x, hashes[%d] %x, first at %d: want the slot's hash, once", i, s.slots[i].hash, i, s.hashes[i], slices.Index(s.hashes, s.hashes[i]))
		}
	}
	// A reload that turns the rule's values off hides those kept.
	s.add(heavy, false, false, nil, 1, false)
	for _, c := range s.top(HotCapacity, "p", HotAll) {
		if !c.Hidden || !strings.HasPrefix(c.Key, "p #") {
			t.Errorf("after values were turned off, counter %+v still shows its value", c)
		}
	}
}

// BenchmarkHotSketchAdd measures what the request path pays per limited
// descriptor for the hot counters: a repeated counter, and a new counter
// at every hit (which replaces the least hit one), without and with the
// values kept (Options.KeepHotValues: the label is built for every
// hit and copied for every new counter).
func BenchmarkHotSketchAdd(b *testing.B) {
	entries := make([][]rules.Entry, 4096)
	for i := range entries {
		entries[i] = []rules.Entry{{Key: "remote_address", Value: fmt.Sprintf("192.0.2.%d", i)}, {Key: "path", Value: "/api"}}
	}
	for _, bc := range []struct {
		name     string
		distinct int
		keep     bool
	}{{"same", 1, false}, {"distinct", len(entries), false}, {"same/values", 1, true}, {"distinct/values", len(entries), true}} {
		b.Run(bc.name, func(b *testing.B) {
			var s hotSketch
			var label []byte
			i := 0
			for b.Loop() {
				e := entries[i%bc.distinct]
				if bc.keep {
					label = appendDetailedLabel(label[:0], "demo", e)
				}
				s.add(e, bc.keep, false, label, 1, false)
				i++
			}
		})
	}
}

// BenchmarkHotSketchAddParallel is BenchmarkHotSketchAdd's distinct case
// with every core adding to one rule's sketch, as a hot rule does.
func BenchmarkHotSketchAddParallel(b *testing.B) {
	entries := make([][]rules.Entry, 4096)
	for i := range entries {
		entries[i] = []rules.Entry{{Key: "remote_address", Value: fmt.Sprintf("192.0.2.%d", i)}}
	}
	var s hotSketch
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.add(entries[i%len(entries)], false, false, nil, 1, false)
			i++
		}
	})
	b.ReportMetric(float64(s.skipped.Load())/float64(b.N), "skipped/op")
}
