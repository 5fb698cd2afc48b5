package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/rules"
)

// t0 starts a second (and a minute): fixed windows are aligned on the
// Unix epoch, so the hand computations below start from an empty window.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// handTimes are the offsets of the hand-computed traffic: nine requests on
// one counter, none on a window boundary, so that no decision hangs on
// rounding.
var handTimes = []float64{0.0, 0.1, 0.2, 0.55, 1.05, 1.15, 1.25, 1.6, 2.4}

// handCases are, per algorithm at 2 per second (a burst of 2 for the
// buckets), the decision of each request of handTimes, derived by hand (A
// allowed, D denied):
var handCases = []struct {
	algorithm string
	extra     string // more rate_limit fields
	want      string
	allowed   int
	denied    int
}{
	// Windows [0,1) [1,2) [2,3): two pass in each, the rest are refused.
	// 0.0 A, 0.1 A, 0.2 D, 0.55 D | 1.05 A, 1.15 A, 1.25 D, 1.6 D | 2.4 A.
	{"fixed_window", "", "AADDAADDA", 5, 4},
	// Estimate = hits of the current second + hits of the previous one ×
	// the share of the previous window still inside the last second.
	// 0.0: 0+1 ≤ 2 A; 0.1: 1+1 A; 0.2, 0.55: 2+1 D.
	// 1.05: 2×0.95+1 = 2.9 D; 1.15: 2×0.85+1 = 2.7 D; 1.25: 2.5 D;
	// 1.6: 2×0.4+1 = 1.8 A (current 1); 2.4: 1×0.6+1 = 1.6 A.
	{"sliding_window", "", "AADDDDDAA", 4, 5},
	// Admitted hits in (now−1s, now]: 0.0 A, 0.1 A, 0.2 D, 0.55 D;
	// 1.05: {0.1} A; 1.15: {1.05} A; 1.25: {1.05,1.15} D; 1.6 D;
	// 2.4: {} A.
	{"sliding_log", "", "AADDAADDA", 5, 4},
	// Starts with 2 tokens, +2 per second up to 2; a refused hit takes none.
	// 0.0: 2 A →1; 0.1: 1.2 A →0.2; 0.2: 0.4 D; 0.55: 0.2+0.9 = 1.1 A →0.1;
	// 1.05: 0.1+1.0 = 1.1 A →0.1; 1.15: 0.3 D; 1.25: 0.5 D;
	// 1.6: 0.1+1.1 = 1.2 A →0.2; 2.4: 0.2+1.6 = 1.8 A.
	{"token_bucket", "burst: 2", "AADAADDAA", 6, 3},
	// Level +1 per hit, at most 2, draining 2 per second.
	// 0.0: 1 A; 0.1: 0.8+1 = 1.8 A; 0.2: 1.6+1 = 2.6 D; 0.55: 0.9+1 = 1.9 A;
	// 1.05: 0.9+1 = 1.9 A; 1.15: 1.7+1 D; 1.25: 1.5+1 D; 1.6: 0.8+1 = 1.8 A;
	// 2.4: 0.2+1 = 1.2 A.
	{"leaky_bucket", "burst: 2", "AADAADDAA", 6, 3},
	// The token bucket's decisions, kept as a theoretical arrival time.
	{"gcra", "burst: 2", "AADAADDAA", 6, 3},
}

// handRules is a rule file with one descriptor (k, <algorithm>) per case,
// each 2 per second with the algorithm asDefault says: the case's own, or
// fixed_window for all.
func handRules(t *testing.T, fixedForAll bool) *rules.Set {
	t.Helper()
	var b strings.Builder
	b.WriteString("domain: hand\ndescriptors:\n")
	for _, c := range handCases {
		alg, extra := c.algorithm, c.extra
		if fixedForAll {
			alg, extra = "fixed_window", ""
		}
		fmt.Fprintf(&b, "  - key: k\n    value: %s\n    rate_limit:\n      unit: second\n      requests_per_unit: 2\n      algorithm: %s\n", c.algorithm, alg)
		if extra != "" {
			fmt.Fprintf(&b, "      %s\n", extra)
		}
	}
	set, err := rules.Parse(map[string][]byte{"hand.yaml": []byte(b.String())}, rules.Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return set
}

// handTraffic is handTimes for every case, in time order, in the
// JSON-lines format.
func handTraffic() string {
	type rec struct {
		at  time.Duration
		alg string
	}
	var recs []rec
	for _, c := range handCases {
		for _, s := range handTimes {
			recs = append(recs, rec{time.Duration(s * float64(time.Second)), c.algorithm})
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].at < recs[j].at })
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, `{"time":%q,"domain":"hand","descriptors":[{"entries":[{"key":"k","value":%q}]}]}`+"\n",
			t0.Add(r.at).Format(time.RFC3339Nano), r.alg)
	}
	return b.String()
}

func runHand(t *testing.T) *Report {
	t.Helper()
	rep, err := Run(context.Background(), handRules(t, false), handRules(t, true), NewReader(strings.NewReader(handTraffic())), Options{Examples: 100})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestReplayHandComputed(t *testing.T) {
	rep := runHand(t)
	if rep.Requests != len(handCases)*len(handTimes) {
		t.Fatalf("replayed %d requests, want %d", rep.Requests, len(handCases)*len(handTimes))
	}
	fixed := handCases[0].want
	rulesByPath := map[string]RuleDiff{}
	for _, r := range rep.Rules {
		rulesByPath[r.Rule] = r
	}
	var wantChanged, wantNowDenied, wantNowAllowed int
	for _, c := range handCases {
		t.Run(c.algorithm, func(t *testing.T) {
			if strings.Count(c.want, "A") != c.allowed || strings.Count(c.want, "D") != c.denied {
				t.Fatalf("the case is inconsistent: %s is not %d A and %d D", c.want, c.allowed, c.denied)
			}
			r, ok := rulesByPath["hand.k_"+c.algorithm]
			if !ok || r.Old == nil || r.New == nil {
				t.Fatalf("no rule hand.k_%s under both sets in %+v", c.algorithm, rep.Rules)
			}
			if r.Old.Allowed != c.allowed || r.Old.Denied != c.denied {
				t.Errorf("old (%s): %d allowed, %d denied; want %d, %d (%s)", c.algorithm, r.Old.Allowed, r.Old.Denied, c.allowed, c.denied, c.want)
			}
			if r.New.Allowed != 5 || r.New.Denied != 4 {
				t.Errorf("new (fixed_window): %d allowed, %d denied; want 5, 4", r.New.Allowed, r.New.Denied)
			}
			// The examples are every changed request: each one's old
			// decision must be the hand-computed one at its time.
			var got []string
			for _, e := range rep.Changed.Examples {
				if !strings.Contains(e.Descriptors, "k="+c.algorithm+")") {
					continue
				}
				i := indexOfTime(t, e.Time)
				got = append(got, fmt.Sprintf("%d:%s->%s", i, e.Old, e.New))
			}
			var want []string
			for i := range c.want {
				if c.want[i] != fixed[i] {
					want = append(want, fmt.Sprintf("%d:%s->%s", i, word(c.want[i]), word(fixed[i])))
				}
			}
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("changed requests: got %v, want %v", got, want)
			}
		})
		for i := range c.want {
			switch {
			case c.want[i] == 'A' && fixed[i] == 'D':
				wantChanged++
				wantNowDenied++
			case c.want[i] == 'D' && fixed[i] == 'A':
				wantChanged++
				wantNowAllowed++
			}
		}
	}
	// 3 (sliding_window) + 0 (sliding_log) + 3 × 3 (the buckets, gcra):
	// 12 changes, 7 now denied and 5 now allowed.
	if wantChanged != 12 || wantNowDenied != 7 || wantNowAllowed != 5 {
		t.Fatalf("hand totals drifted: %d, %d, %d", wantChanged, wantNowDenied, wantNowAllowed)
	}
	if c := rep.Changed; c.Total != 12 || c.NowDenied != 7 || c.NowAllowed != 5 {
		t.Errorf("changed %+v; want 12 total, 7 now denied, 5 now allowed", c)
	}
	// Old: 5+4+5+6+6+6 = 32 allowed, 22 denied; new: 6 × (5, 4).
	if rep.Old.Allowed != 32 || rep.Old.Denied != 22 || rep.New.Allowed != 30 || rep.New.Denied != 24 {
		t.Errorf("totals old %+v new %+v; want 32/22 and 30/24", rep.Old, rep.New)
	}
	if len(rep.Domains) != 1 || rep.Domains[0].Old != (Counts{Allowed: 32, Denied: 22}) || rep.Domains[0].New != (Counts{Allowed: 30, Denied: 24}) {
		t.Errorf("domains %+v", rep.Domains)
	}
	// Each counter: 4 requests in [0,1), 4 in [1,2), 1 in [2,3); 9 in the
	// minute.
	if len(rep.Peaks) != len(handCases) || rep.Counters != len(handCases) {
		t.Fatalf("%d peaks of %d counters, want %d", len(rep.Peaks), rep.Counters, len(handCases))
	}
	for _, p := range rep.Peaks {
		if p.Requests != 9 || p.PeakPerSecond != 4 || !p.PeakSecond.Equal(t0) || p.PeakPerMinute != 9 || p.OldRule != p.NewRule || p.OldRule == "" {
			t.Errorf("peak %+v: want 9 requests, 4/s at %v, 9/min, the same rule", p, t0)
		}
	}
	// All in one minute: 22 denials old, 24 new.
	if len(rep.Minutes) != 1 || rep.Minutes[0] != (MinuteCount{Minute: t0, OldDenied: 22, NewDenied: 24}) {
		t.Errorf("minutes %+v", rep.Minutes)
	}
}

func word(c byte) string {
	if c == 'A' {
		return "allowed"
	}
	return "denied"
}

func indexOfTime(t *testing.T, at time.Time) int {
	for i, s := range handTimes {
		if t0.Add(time.Duration(s * float64(time.Second))).Equal(at) {
			return i
		}
	}
	t.Fatalf("no request at %v", at)
	return -1
}

// TestReplayIsRepeatable: a replay depends on the traffic alone, not on
// when it runs (a virtual clock) nor on an earlier replay.
func TestReplayIsRepeatable(t *testing.T) {
	var outs []string
	for range 2 {
		var b bytes.Buffer
		if err := runHand(t).WriteJSON(&b); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Errorf("two replays differ:\n%s\n%s", outs[0], outs[1])
	}
}

func TestReportFormats(t *testing.T) {
	rep := runHand(t)
	var text, js, html bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"Replayed 54 requests from 2026-01-01T00:00:00Z to 2026-01-01T00:00:02Z",
		"Decisions changed: 12 (7 now denied, 5 now allowed)",
		"hand.k_token_bucket",
		"(all)",
	} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Rules []struct {
			Rule     string
			Old, New struct{ Allowed, Denied int }
		}
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range back.Rules {
		if r.Rule == "hand.k_sliding_window" {
			found = r.Old.Allowed == 4 && r.Old.Denied == 5 && r.New.Allowed == 5 && r.New.Denied == 4
		}
	}
	if !found {
		t.Errorf("JSON report lacks hand.k_sliding_window with 4/5 old and 5/4 new:\n%s", js.String())
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	for _, want := range []string{"<svg", `class="old"`, `class="new"`, "hand.k_gcra", "Decisions changed: 12"} {
		if !strings.Contains(h, want) {
			t.Errorf("HTML report lacks %q", want)
		}
	}
	for _, bad := range []string{"src=", "href=", "<script", "@import", "url("} {
		if strings.Contains(h, bad) {
			t.Errorf("HTML report has %q: it must need no external asset", bad)
		}
	}
}

// TestReplayShadowRule: a rule in shadow mode refuses nothing, and the
// report still counts its descriptors over their limit (the answer says OK
// for them; the store's decision says they were over), with the request's
// other descriptors before and after it.
func TestReplayShadowRule(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"s.yaml": []byte(`domain: s
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: bot
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
`)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var traffic strings.Builder
	// Three requests in one second: the third is over the shadow limit of
	// 2, and passes.
	for i := range 3 {
		fmt.Fprintf(&traffic, `{"time":%q,"domain":"s","descriptors":[{"entries":[{"key":"ip","value":"a"}]},{"entries":[{"key":"bot","value":"x"}]},{"entries":[{"key":"path","value":"/"}]}]}`+"\n",
			t0.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano))
	}
	rep, err := Run(context.Background(), set, set, NewReader(strings.NewReader(traffic.String())), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Old.Allowed != 3 || rep.Old.Denied != 0 {
		t.Errorf("requests: %+v; want 3 allowed", rep.Old)
	}
	for _, r := range rep.Rules {
		want := RuleCount{Allowed: 3}
		if r.Rule == "s.bot" {
			want = RuleCount{Allowed: 2, Denied: 1}
		}
		if r.Old.Allowed != want.Allowed || r.Old.Denied != want.Denied {
			t.Errorf("%s: %d within, %d over; want %d, %d", r.Rule, r.Old.Allowed, r.Old.Denied, want.Allowed, want.Denied)
		}
	}
}
