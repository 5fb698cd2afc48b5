package replay

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/capture"
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

// one is the Traffic of a single input.
func one(r io.Reader) *Traffic { return Merge(0, Input{Name: "traffic", Reader: NewReader(r)}) }

func runHand(t *testing.T) *Report {
	t.Helper()
	rep, err := Run(context.Background(), handRules(t, false), handRules(t, true), one(strings.NewReader(handTraffic())), Options{Examples: 100})
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
		"RULE  REQUESTS  DENIED  REFUSED  NOW DENIED  NOW ALLOWED",
		"Descriptor values by change in denials (the 6 values with a request denied)",
		"DOMAIN  DESCRIPTOR",
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
			Old, New struct{ Requests, Allowed, Denied, Refused int }
			// Each request has one descriptor: its changes are the rule's.
			NowDenied  int `json:"now_denied"`
			NowAllowed int `json:"now_allowed"`
		}
		Values []struct {
			Descriptor       string
			OldDenied        int `json:"old_denied"`
			NewDenied        int `json:"new_denied"`
			Requests, Change int
		}
		ValuesDenied int `json:"values_denied"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range back.Rules {
		if r.Rule == "hand.k_sliding_window" {
			found = r.Old.Requests == 9 && r.Old.Allowed == 4 && r.Old.Denied == 5 && r.Old.Refused == 5 &&
				r.New.Allowed == 5 && r.New.Denied == 4 && r.New.Refused == 4 && r.NowDenied == 1 && r.NowAllowed == 2
		}
	}
	if !found {
		t.Errorf("JSON report lacks hand.k_sliding_window with 4/5 old, 5/4 new, 1 now denied and 2 now allowed:\n%s", js.String())
	}
	// By the size of the change: gcra, leaky_bucket, sliding_window (5
	// denied, now 4) and token_bucket change by 1, each to 4 denied, so by
	// name; fixed_window and sliding_log (new and old alike) by 0.
	var order []string
	for _, v := range back.Values {
		order = append(order, v.Descriptor)
	}
	wantOrder := []string{"k=gcra", "k=leaky_bucket", "k=sliding_window", "k=token_bucket", "k=fixed_window", "k=sliding_log"}
	if !slices.Equal(order, wantOrder) || back.ValuesDenied != 6 {
		t.Errorf("JSON values in the order %v (%d denied), want %v (6)", order, back.ValuesDenied, wantOrder)
	}
	if v := back.Values[2]; v.OldDenied != 5 || v.NewDenied != 4 || v.Change != -1 || v.Requests != 9 {
		t.Errorf("JSON value %+v: want 9 requests, 5 denied old, 4 new, a change of -1", v)
	}
	if err := rep.WriteHTML(&html); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	for _, want := range []string{"<svg", `class="old"`, `class="new"`, "hand.k_gcra", "Decisions changed: 12",
		"<th>refused</th><th>now denied</th>", "REFUSED: denied with this rule over its limit", `<table id="values">`,
		"<td class=\"l\"><code>k=sliding_log</code></td><td>9</td><td>4 (44%)</td><td>4 (44%)</td><td>=</td>"} {
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

// ruleRules is a domain of three rules a request of ruleTraffic meets:
// ip at ipLimit a second, path at 100, bot at 2, in shadow mode or not.
func ruleRules(t *testing.T, botShadow bool, ipLimit int) *rules.Set {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"s.yaml": fmt.Appendf(nil, `domain: s
descriptors:
  - key: ip
    rate_limit: {unit: second, requests_per_unit: %d}
  - key: bot
    shadow_mode: %v
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 100}
`, ipLimit, botShadow)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// ruleTraffic is three requests in one second, each with an ip, a bot and
// a path descriptor, the path twice: the third is over the bot limit, and
// an ip limit of 2.
func ruleTraffic() string {
	var b strings.Builder
	for i := range 3 {
		fmt.Fprintf(&b, `{"time":%q,"domain":"s","descriptors":[{"entries":[{"key":"ip","value":"a"}]},{"entries":[{"key":"bot","value":"x"}]},`+
			`{"entries":[{"key":"path","value":"/"}]},{"entries":[{"key":"path","value":"/b"}]}]}`+"\n",
			t0.Add(time.Duration(i)*time.Millisecond).Format(time.RFC3339Nano))
	}
	return b.String()
}

// TestReplayRuleCounts: a rule counts the requests that met it (once, for
// the path rule two descriptors meet) by their answer, whichever rule
// decided it; Refused those it refused, WouldRefuse those it was over in
// shadow mode; and a change of mode shows as requests now denied or
// allowed on that rule alone (the one that refuses them, or refused them),
// though the rule's counts of requests are the same; a request two rules
// refuse counts on both.
func TestReplayRuleCounts(t *testing.T) {
	type counts struct{ requests, allowed, denied, refused, would int }
	type want struct {
		old, new              map[string]counts
		nowDenied, nowAllowed map[string]int // by rule; none on the others
	}
	passed := counts{3, 3, 0, 0, 0}
	deniedByBot := counts{3, 2, 1, 0, 0}
	for _, tt := range []struct {
		name                 string
		oldShadow, newShadow bool
		newIPLimit           int // 0 is 100, as the old rules
		want                 want
	}{
		{"shadow in both", true, true, 0, want{
			old: map[string]counts{"s.ip": passed, "s.path": passed, "s.bot": {3, 3, 0, 0, 1}},
			new: map[string]counts{"s.ip": passed, "s.path": passed, "s.bot": {3, 3, 0, 0, 1}},
		}},
		{"out of shadow mode", true, false, 0, want{
			old:       map[string]counts{"s.ip": passed, "s.path": passed, "s.bot": {3, 3, 0, 0, 1}},
			new:       map[string]counts{"s.ip": deniedByBot, "s.path": deniedByBot, "s.bot": {3, 2, 1, 1, 0}},
			nowDenied: map[string]int{"s.bot": 1},
		}},
		{"into shadow mode", false, true, 0, want{
			old:        map[string]counts{"s.ip": deniedByBot, "s.path": deniedByBot, "s.bot": {3, 2, 1, 1, 0}},
			new:        map[string]counts{"s.ip": passed, "s.path": passed, "s.bot": {3, 3, 0, 0, 1}},
			nowAllowed: map[string]int{"s.bot": 1},
		}},
		{"out of shadow mode, ip lowered to 2", true, false, 2, want{
			old:       map[string]counts{"s.ip": passed, "s.path": passed, "s.bot": {3, 3, 0, 0, 1}},
			new:       map[string]counts{"s.ip": {3, 2, 1, 1, 0}, "s.path": deniedByBot, "s.bot": {3, 2, 1, 1, 0}},
			nowDenied: map[string]int{"s.bot": 1, "s.ip": 1},
		}},
		{"into shadow mode, ip lowered to 2", false, true, 2, want{
			// The third request is denied under both, by another rule:
			// no change to count.
			old: map[string]counts{"s.ip": deniedByBot, "s.path": deniedByBot, "s.bot": {3, 2, 1, 1, 0}},
			new: map[string]counts{"s.ip": {3, 2, 1, 1, 0}, "s.path": deniedByBot, "s.bot": {3, 2, 1, 0, 1}},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			newIP := cmp.Or(tt.newIPLimit, 100)
			rep, err := Run(context.Background(), ruleRules(t, tt.oldShadow, 100), ruleRules(t, tt.newShadow, newIP), one(strings.NewReader(ruleTraffic())), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Rules) != 3 {
				t.Fatalf("%d rules, want 3: %+v", len(rep.Rules), rep.Rules)
			}
			of := func(c *RuleCount) counts {
				return counts{c.Requests, c.Allowed, c.Denied, c.Refused, c.WouldRefuse}
			}
			for _, r := range rep.Rules {
				if got := of(r.Old); got != tt.want.old[r.Rule] {
					t.Errorf("%s old: %+v, want %+v", r.Rule, got, tt.want.old[r.Rule])
				}
				if got := of(r.New); got != tt.want.new[r.Rule] {
					t.Errorf("%s new: %+v, want %+v", r.Rule, got, tt.want.new[r.Rule])
				}
				if r.NowDenied != tt.want.nowDenied[r.Rule] || r.NowAllowed != tt.want.nowAllowed[r.Rule] {
					t.Errorf("%s: %d now denied, %d now allowed; want %d, %d", r.Rule, r.NowDenied, r.NowAllowed, tt.want.nowDenied[r.Rule], tt.want.nowAllowed[r.Rule])
				}
			}
		})
	}
}

// TestReportModeChange: the text report names a change of mode and shows
// it in REFUSED and NOW DENIED, where the per-rule counts of requests do
// not change.
func TestReportModeChange(t *testing.T) {
	rep, err := Run(context.Background(), ruleRules(t, true, 100), ruleRules(t, false, 100), one(strings.NewReader(ruleTraffic())), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`(?m)^\s*s\.bot \(shadow -> enforced\)\s+3\s+0 -> 1\s+would 1 -> 1\s+1\s+0\s*$`)
	if !row.MatchString(b.String()) {
		t.Errorf("no row for s.bot with its mode change, 0 -> 1 denied, would 1 -> 1 refused, 1 now denied:\n%s", b.String())
	}
	if !strings.Contains(b.String(), "REFUSED: denied with this rule over its limit") {
		t.Errorf("the text report does not define REFUSED:\n%s", b.String())
	}
}

// TestReplayValues: descriptor values are listed by the change in their
// denials, largest first whether up or down, then by new denials, then by
// requests; a request counts under each of its descriptors (path=/x has
// no rule, and loses what client=a loses); values never denied are left
// out; Options.Values keeps the top ones, ValuesDenied counts them all.
func TestReplayValues(t *testing.T) {
	parse := func(yaml string) *rules.Set {
		t.Helper()
		set, err := rules.Parse(map[string][]byte{"v.yaml": []byte(yaml)}, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	old := parse("domain: v\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 2}\n")
	new := parse("domain: v\ndescriptors:\n  - key: client\n    rate_limit: {unit: second, requests_per_unit: 1}\n" +
		"  - key: client\n    value: c\n    rate_limit: {unit: second, requests_per_unit: 4}\n")
	// In one second: a 4 times (with path=/x), b twice, c 4 times, d once.
	// Old, 2 a second: a 2 denied, c 2. New, 1 a second but 4 for c: a 3,
	// b 1, c 0.
	var traffic strings.Builder
	i := 0
	for _, c := range []string{"a", "b", "c", "a", "c", "a", "b", "c", "d", "c", "a"} {
		extra := ""
		if c == "a" {
			extra = `,{"entries":[{"key":"path","value":"/x"}]}`
		}
		fmt.Fprintf(&traffic, `{"time":%q,"domain":"v","descriptors":[{"entries":[{"key":"client","value":%q}]}%s]}`+"\n",
			t0.Add(time.Duration(i)*10*time.Millisecond).Format(capture.TimeLayout), c, extra)
		i++
	}
	want := []ValueChange{
		{Domain: "v", Descriptor: "client=c", Requests: 4, OldDenied: 2, NewDenied: 0, Change: -2, OldRule: "v.client", NewRule: "v.client_c"},
		{Domain: "v", Descriptor: "client=a", Requests: 4, OldDenied: 2, NewDenied: 3, Change: 1, OldRule: "v.client", NewRule: "v.client"},
		{Domain: "v", Descriptor: "path=/x", Requests: 4, OldDenied: 2, NewDenied: 3, Change: 1},
		{Domain: "v", Descriptor: "client=b", Requests: 2, OldDenied: 0, NewDenied: 1, Change: 1, OldRule: "v.client", NewRule: "v.client"},
	}
	for _, tt := range []struct {
		values int
		want   []ValueChange
		text   string
	}{
		{0, want, "(the 4 values with a request denied)"},
		{2, want[:2], "(the top 2 of 4 values with a request denied)"},
	} {
		rep, err := Run(context.Background(), old, new, one(strings.NewReader(traffic.String())), Options{Values: tt.values})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rep.Values, tt.want) || rep.ValuesDenied != 4 {
			t.Errorf("Values %d: %+v (%d denied); want %+v (4)", tt.values, rep.Values, rep.ValuesDenied, tt.want)
		}
		var b bytes.Buffer
		if err := rep.WriteText(&b); err != nil {
			t.Fatal(err)
		}
		row := regexp.MustCompile(`(?m)^v\s+client=c\s+4\s+2 \(50%\)\s+0\s+-2$`)
		if !strings.Contains(b.String(), tt.text) || !row.MatchString(b.String()) {
			t.Errorf("the text report lacks %q or the row of client=c:\n%s", tt.text, b.String())
		}
	}
}

func TestValueShare(t *testing.T) {
	for _, tt := range []struct {
		n, of int64
		want  string
	}{
		{0, 10, "0"}, {385, 1197, "385 (32%)"}, {1, 1000, "1 (<1%)"}, {999, 1000, "999 (>99%)"}, {7, 7, "7 (100%)"},
	} {
		v := ValueChange{Requests: tt.of}
		if got := v.share(tt.n); got != tt.want {
			t.Errorf("%d of %d: %q, want %q", tt.n, tt.of, got, tt.want)
		}
	}
}

// TestReplayUsageCharges replays a budget charged after the fact, as a
// capture records it: a look before each request, the usage charged when
// it ends (a descriptor's own hits_addend). Under a budget of 1,000 the
// second charge of 600 is kept though it is over, and the third look is
// refused; raised to 2,000, it passes: the replay says which look the
// edit lets through.
func TestReplayUsageCharges(t *testing.T) {
	budget := func(n int) *rules.Set {
		t.Helper()
		set, err := rules.Parse(map[string][]byte{"llm.yaml": []byte(fmt.Sprintf(
			"domain: llm\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: %d}\n", n))}, rules.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return set
	}
	var b strings.Builder
	for i, hits := range []int{0, 600, 0, 600, 0} {
		fmt.Fprintf(&b, `{"time":%q,"domain":"llm","descriptors":[{"entries":[{"key":"user","value":"ann"}],"hits_addend":%d}]}`+"\n",
			t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano), hits)
	}
	rep, err := Run(context.Background(), budget(1000), budget(2000), one(strings.NewReader(b.String())), Options{Examples: 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Changed.Total != 2 || rep.Changed.NowAllowed != 2 || len(rep.Changed.Examples) != 2 {
		t.Fatalf("changed %+v, want the second charge and the third look now allowed", rep.Changed)
	}
	for i, e := range rep.Changed.Examples {
		if at := e.Time.Sub(t0); at != time.Duration(3+i)*time.Second || e.Old != "denied" || e.New != "allowed" {
			t.Errorf("change %d: %+v, want the request at %ds denied, now allowed", i, e, 3+i)
		}
	}
}

// TestReplayStopsOnCancel: Ctrl-C while the traffic's input is held open
// (stdin from a pipe nothing writes to any more) ends the replay at once,
// not at the input's end.
func TestReplayStopsOnCancel(t *testing.T) {
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	go fmt.Fprintln(pw, strings.SplitN(handTraffic(), "\n", 2)[0])
	old, new := handRules(t, false), handRules(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := Run(ctx, old, new, one(pr), Options{})
		done <- err
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run still waits for the end of its input after ctx ended")
	}
}
