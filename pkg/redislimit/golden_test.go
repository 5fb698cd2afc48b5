package redislimit_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

var update = flag.Bool("update", false, "rewrite testdata/golden.json from limit.Memory")

const goldenFile = "testdata/golden.json"

// golden is the file of shared vectors: cases of requests at exact
// instants with the decisions both twins, limit.Memory and the script, must
// give, to the µs.
type golden struct {
	// StartMicros is the instant (µs since the Unix epoch) every case's
	// steps count from: 2032-01-01T00:00:00Z, a whole number of days, so
	// epoch-aligned windows start at it, and in the future, so keys
	// written with it as now stay alive while the test runs.
	StartMicros int64        `json:"start_us"`
	Cases       []goldenCase `json:"cases"`
}

type goldenCase struct {
	Name  string       `json:"name"`
	Spec  goldenSpec   `json:"spec"`
	Steps []goldenStep `json:"steps"`
}

type goldenSpec struct {
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	Window    int64  `json:"window_us"`
	Burst     int64  `json:"burst,omitempty"`
	Precision int    `json:"precision,omitempty"`
	Calendar  string `json:"calendar,omitempty"` // "day", "week", "month" or "year"
	Location  string `json:"location,omitempty"`
}

// goldenStep is one request: its hits at At µs after the start, each on
// counter Key of the case's spec, and the decisions they get.
type goldenStep struct {
	At   int64        `json:"at_us"`
	Hits []goldenHit  `json:"hits"`
	Want []goldenWant `json:"want"`
}

type goldenHit struct {
	Key    string `json:"key"`
	Cost   int64  `json:"cost"`
	Refund bool   `json:"refund,omitempty"`
	Usage  bool   `json:"usage,omitempty"`
	Mode   string `json:"mode,omitempty"` // limit.Mode's name; "" is enforce
	Group  uint32 `json:"group,omitempty"`
}

type goldenWant struct {
	Allowed   bool  `json:"allowed"`
	Remaining int64 `json:"remaining"`
	Reset     int64 `json:"reset_us"`
	Retry     int64 `json:"retry_us"`
	Never     bool  `json:"never,omitempty"`
	Debt      int64 `json:"debt,omitempty"`
}

var calendarPeriods = map[string]time.Duration{
	"day": 24 * time.Hour, "week": 7 * 24 * time.Hour, "month": 30 * 24 * time.Hour, "year": 365 * 24 * time.Hour,
}

func (g goldenSpec) spec(t *testing.T) limit.Spec {
	t.Helper()
	var a limit.Algorithm
	if err := a.UnmarshalText([]byte(g.Algorithm)); err != nil {
		t.Fatal(err)
	}
	sp := limit.Spec{Algorithm: a, Limit: g.Limit, Window: time.Duration(g.Window) * time.Microsecond,
		Burst: g.Burst, Precision: g.Precision}
	if g.Calendar != "" {
		if calendarPeriods[g.Calendar] != sp.Window {
			t.Fatalf("calendar %q with a window of %v", g.Calendar, sp.Window)
		}
		loc, err := time.LoadLocation(g.Location)
		if err != nil {
			t.Fatal(err)
		}
		sp.Calendar = loc
	}
	return sp
}

func (g goldenHit) hit(t *testing.T, sp limit.Spec) limit.Hit {
	t.Helper()
	h := limit.Hit{Key: g.Key, Spec: sp, Cost: g.Cost, Refund: g.Refund, Usage: g.Usage, Group: g.Group}
	if g.Mode != "" {
		for m := limit.Enforce; m <= limit.Quota; m++ {
			if m.String() == g.Mode {
				h.Mode = m
			}
		}
		if h.Mode.String() != g.Mode {
			t.Fatalf("unknown mode %q", g.Mode)
		}
	}
	return h
}

func wantOf(d limit.Decision) goldenWant {
	return goldenWant{Allowed: d.Allowed, Remaining: d.Remaining, Reset: d.ResetAfter.Microseconds(),
		Retry: d.RetryAfter.Microseconds(), Never: d.Never, Debt: d.Debt}
}

// TestGolden runs the shared vectors against limit.Memory and against the
// script on a real redis-server (with an explicit now): both must give the
// decisions of the file, to the µs. go test -run TestGolden -update
// rewrites the file from limit.Memory with the cases of goldenCases; review
// the diff (TestGoldenHandChecked holds a few values computed by hand).
func TestGolden(t *testing.T) {
	g := readGolden(t)
	if *update {
		g = golden{StartMicros: g.StartMicros, Cases: goldenCases()}
	}
	n := startNode(t)
	for ci := range g.Cases {
		c := &g.Cases[ci]
		t.Run(c.Name, func(t *testing.T) {
			sp := c.Spec.spec(t)
			clk := newClock(time.UnixMicro(g.StartMicros))
			mem := limit.NewMemory(limit.MemoryOptions{Now: clk.now})
			lim := newLimiter(t, n.client, clk, fmt.Sprintf("golden:%d:", ci))
			for si := range c.Steps {
				st := &c.Steps[si]
				clk.set(time.UnixMicro(g.StartMicros + st.At))
				hits := make([]limit.Hit, len(st.Hits))
				for i, h := range st.Hits {
					hits[i] = h.hit(t, sp)
				}
				for _, twin := range []struct {
					name string
					e    limit.Limiter
				}{{"memory", mem}, {"redis", lim}} {
					d := decide(t, twin.e, hits...)
					got := make([]goldenWant, len(d))
					for i := range d {
						got[i] = wantOf(d[i])
					}
					if *update && twin.name == "memory" {
						st.Want = got
					}
					if !reflect.DeepEqual(got, st.Want) {
						t.Errorf("step %d at %d µs, hits %+v: %s\n got  %+v\n want %+v", si, st.At, st.Hits, twin.name, got, st.Want)
					}
				}
			}
		})
	}
	if *update {
		b, err := json.MarshalIndent(g, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readGolden(t *testing.T) golden {
	t.Helper()
	b, err := os.ReadFile(goldenFile)
	if *update && os.IsNotExist(err) {
		return golden{StartMicros: time.Date(2032, time.January, 1, 0, 0, 0, 0, time.UTC).UnixMicro()}
	}
	if err != nil {
		t.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatalf("%s: %v", goldenFile, err)
	}
	if len(g.Cases) == 0 {
		t.Fatalf("%s: no cases", goldenFile)
	}
	return g
}

// goldenCases are the inputs of the vectors: each algorithm's edges (the
// last µs before a retry, the µs of it, a cost above the capacity, a
// refund), awkward rates, a calendar day across local midnight, the hit
// modes, and each algorithm's debt (usage charged past the limit).
func goldenCases() []goldenCase {
	const ms, s = 1000, 1000000
	hit := func(key string, cost int64) goldenHit { return goldenHit{Key: key, Cost: cost} }
	refund := func(key string, cost int64) goldenHit { return goldenHit{Key: key, Cost: cost, Refund: true} }
	at := func(t int64, hits ...goldenHit) goldenStep { return goldenStep{At: t, Hits: hits} }
	mode := func(h goldenHit, m string, group uint32) goldenHit { h.Mode, h.Group = m, group; return h }
	a := hit("a", 1)
	charge := func(key string, cost int64) goldenHit { return goldenHit{Key: key, Cost: cost, Usage: true} }
	giveBack := func(key string, cost int64) goldenHit {
		return goldenHit{Key: key, Cost: cost, Usage: true, Refund: true}
	}
	// debt charges a limit of 3 past it, then looks, hits and gives back
	// while the debt is paid (buckets) or the window counts it (windows).
	debt := func(name string, sp goldenSpec, paid int64) goldenCase {
		return goldenCase{Name: "debt " + name, Spec: sp, Steps: []goldenStep{
			at(0, charge("a", 2)), at(1, charge("a", 3)), at(2, hit("a", 0)), at(3, a),
			at(4, charge("a", 10)), at(5, giveBack("a", 2)),
			at(paid-1, hit("a", 0)), at(paid, hit("a", 0)), at(paid+1, a),
			// A blocked request keeps its charge, alone.
			at(paid+2, hit("b", 1), hit("a", 4), charge("c", 5)), at(paid+3, hit("b", 0), hit("c", 0)),
			at(paid+10*s, charge("a", 1), charge("b", 7)),
		}}
	}
	// edges drives a limit of 3 to its denial and across its retry.
	edges := func(name string, sp goldenSpec, retry int64) goldenCase {
		return goldenCase{Name: name, Spec: sp, Steps: []goldenStep{
			at(0, a), at(1, a), at(2, a), at(3, a),
			at(retry-1, a), at(retry, a), at(retry, hit("a", 0)),
			at(retry+1, refund("a", 2)), at(retry+2, hit("a", 4)), at(retry+3, hit("a", 3)),
			at(retry+10*s, hit("a", 2)),
		}}
	}
	// bound charges far past any limit: windows count up to
	// limit.MaxCount, buckets owe up to twin.MaxDebt.
	bound := func(alg string) goldenCase {
		const huge = 1 << 53
		return goldenCase{Name: "debt bound " + alg, Spec: goldenSpec{Algorithm: alg, Limit: 10, Window: 3600 * s}, Steps: []goldenStep{
			at(0, charge("a", huge)), at(1, charge("a", huge)), at(2, hit("a", 0)), at(3, charge("a", 1)),
		}}
	}
	var bounds []goldenCase
	for _, a := range limit.Algorithms() {
		bounds = append(bounds, bound(a.String()))
	}
	return append(bounds,
		edges("fixed_window 3 per s", goldenSpec{Algorithm: "fixed_window", Limit: 3, Window: s}, s),
		edges("sliding_window 3 per s", goldenSpec{Algorithm: "sliding_window", Limit: 3, Window: s}, s),
		edges("sliding_window 3 per s precision 4", goldenSpec{Algorithm: "sliding_window", Limit: 3, Window: s, Precision: 4}, s),
		edges("sliding_log 3 per s", goldenSpec{Algorithm: "sliding_log", Limit: 3, Window: s}, s),
		edges("token_bucket 3 per s", goldenSpec{Algorithm: "token_bucket", Limit: 3, Window: s}, s/3),
		edges("leaky_bucket 3 per s", goldenSpec{Algorithm: "leaky_bucket", Limit: 3, Window: s}, s/3),
		edges("gcra 3 per s", goldenSpec{Algorithm: "gcra", Limit: 3, Window: s}, s/3),
		edges("gcra 3 per 7 ms burst 3", goldenSpec{Algorithm: "gcra", Limit: 3, Window: 7 * ms, Burst: 3}, 7*ms/3),
		edges("token_bucket 7 per 3 ms burst 3", goldenSpec{Algorithm: "token_bucket", Limit: 7, Window: 3 * ms, Burst: 3}, 3*ms/7),
		edges("leaky_bucket 7 per 3 ms burst 3", goldenSpec{Algorithm: "leaky_bucket", Limit: 7, Window: 3 * ms, Burst: 3}, 3*ms/7),
		goldenCase{Name: "sliding_log spread", Spec: goldenSpec{Algorithm: "sliding_log", Limit: 3, Window: s}, Steps: []goldenStep{
			at(0, a), at(100*ms, a), at(200*ms, a), at(300*ms, a),
			at(s-1, a), at(s, a), at(s+100*ms, hit("a", 2)), at(s+200*ms, refund("a", 1)), at(s+300*ms, hit("a", 2)),
		}},
		goldenCase{Name: "sliding_window 10 per s precision 1 weighting", Spec: goldenSpec{Algorithm: "sliding_window", Limit: 10, Window: s}, Steps: []goldenStep{
			at(0, hit("a", 10)), at(s, a), at(s+250*ms, hit("a", 3)), at(s+700*ms, hit("a", 5)), at(2*s+1, hit("a", 9)),
		}},
		goldenCase{Name: "fixed_window calendar day New York", Spec: goldenSpec{Algorithm: "fixed_window", Limit: 2, Window: 24 * 3600 * s,
			Calendar: "day", Location: "America/New_York"}, Steps: []goldenStep{
			// The start is 19:00 in New York: local midnight is 5 h later.
			at(0, a), at(1, a), at(2, a), at(5*3600*s-1, a), at(5*3600*s, hit("a", 2)), at(5*3600*s+1, a),
		}},
		goldenCase{Name: "fixed_window limit 0", Spec: goldenSpec{Algorithm: "fixed_window", Limit: 0, Window: s}, Steps: []goldenStep{
			at(0, a), at(1, hit("a", 0)), at(2, refund("a", 1)),
		}},
		debt("fixed_window 3 per s", goldenSpec{Algorithm: "fixed_window", Limit: 3, Window: s}, s),
		debt("sliding_window 3 per s", goldenSpec{Algorithm: "sliding_window", Limit: 3, Window: s}, s),
		debt("sliding_window 3 per s precision 4", goldenSpec{Algorithm: "sliding_window", Limit: 3, Window: s, Precision: 4}, s),
		debt("sliding_log 3 per s", goldenSpec{Algorithm: "sliding_log", Limit: 3, Window: s}, s),
		debt("token_bucket 3 per s", goldenSpec{Algorithm: "token_bucket", Limit: 3, Window: s}, 4*s),
		debt("leaky_bucket 3 per s", goldenSpec{Algorithm: "leaky_bucket", Limit: 3, Window: s}, 4*s),
		debt("gcra 3 per 7 ms burst 3", goldenSpec{Algorithm: "gcra", Limit: 3, Window: 7 * ms, Burst: 3}, 30*ms),
		goldenCase{Name: "usage modes fixed_window 2 per s", Spec: goldenSpec{Algorithm: "fixed_window", Limit: 2, Window: s}, Steps: []goldenStep{
			// Usage alone on the fast path: every charge kept, the request blocked.
			at(0, charge("u", 1), charge("v", 3)), at(1, charge("u", 1), charge("v", 1)),
			// An advisory charge past the limit blocks nothing and is kept.
			at(2, mode(charge("w", 3), "advisory", 0), hit("x", 1)),
			// A quota charge past the limit: over, kept; the other quota consumes.
			at(3, mode(charge("y", 3), "quota", 0), mode(hit("z", 1), "quota", 1)),
			// Two hits on one counter, a charge after a plain hit.
			at(4, hit("k", 1), charge("k", 2)), at(5, hit("k", 0)),
			at(s, giveBack("v", 1), hit("v", 9)), at(s+1, hit("v", 0)),
		}},
		goldenCase{Name: "modes fixed_window 1 per s", Spec: goldenSpec{Algorithm: "fixed_window", Limit: 1, Window: s}, Steps: []goldenStep{
			at(0, hit("full", 1)),
			// An advisory denial blocks nothing: b consumes.
			at(1, mode(hit("full", 1), "advisory", 0), hit("b", 1)),
			// An enforced denial blocks: c consumes nothing and reports a peek.
			at(2, hit("c", 1), hit("full", 1)),
			at(3, hit("c", 0)),
			// One quota over, another not: d consumes.
			at(4, mode(hit("full", 1), "quota", 0), mode(hit("d", 1), "quota", 1)),
			// Every quota over: blocked, e consumes nothing.
			at(5, mode(hit("e", 1), "quota", 0), mode(hit("full", 1), "quota", 0), mode(hit("d", 1), "quota", 1)),
			at(6, hit("e", 0)),
			// Two hits on one counter see each other.
			at(s, hit("f", 1), hit("f", 1)),
		}},
	)
}

// TestGoldenHandChecked holds a few vectors to values computed by hand, so
// that regenerating the file cannot quietly change what it asserts.
func TestGoldenHandChecked(t *testing.T) {
	g := readGolden(t)
	byName := map[string]*goldenCase{}
	for i := range g.Cases {
		byName[g.Cases[i].Name] = &g.Cases[i]
	}
	const s = 1000000
	for _, c := range []struct {
		name       string
		step, hit  int
		want       goldenWant
		whyWritten string
	}{
		{"fixed_window 3 per s", 2, 0, goldenWant{true, 0, s - 2, 0, false, 0}, "third hit at 2 µs: none left, window ends at 1 s"},
		{"fixed_window 3 per s", 3, 0, goldenWant{false, 0, s - 3, s - 3, false, 0}, "fourth hit at 3 µs: retry at the window's end"},
		{"fixed_window 3 per s", 5, 0, goldenWant{true, 2, s, 0, false, 0}, "at 1 s a new window"},
		{"fixed_window 3 per s", 8, 0, goldenWant{false, 3, s - 2, 0, true, 0}, "after the refund of 2 at count 1, cost 4 above the limit 3: never, a peek's remaining 3"},
		{"sliding_log 3 per s", 3, 0, goldenWant{false, 0, s - 1, s - 3, false, 0}, "hits at 0, 1, 2 µs: retry when the one at 0 leaves, reset when the one at 2 does"},
		{"sliding_log spread", 3, 0, goldenWant{false, 0, 900000, 700000, false, 0}, "at 300 ms: the hit of 0 leaves at 1 s, the newest (200 ms) at 1.2 s"},
		{"token_bucket 3 per s", 3, 0, goldenWant{false, 0, s - 3, 333334 - 3, false, 0}, "one token takes 333333.3 µs: ceil, less the 3 µs elapsed"},
		{"gcra 3 per s", 3, 0, goldenWant{false, 0, s - 3, 333334 - 3, false, 0}, "as the token bucket it mirrors"},
		{"fixed_window calendar day New York", 2, 0, goldenWant{false, 0, 5*3600*s - 2, 5*3600*s - 2, false, 0}, "retry at local midnight, 5 h after 19:00"},
		{"modes fixed_window 1 per s", 2, 0, goldenWant{true, 1, s - 2, 0, false, 0}, "blocked: c reports a peek, remaining 1"},
		{"modes fixed_window 1 per s", 4, 1, goldenWant{true, 0, s - 4, 0, false, 0}, "one quota not over: d consumes"},
		{"debt fixed_window 3 per s", 1, 0, goldenWant{false, 0, s - 1, s - 1, false, 2}, "2 then 3 charged: 5 counted against 3, retry at the window's end"},
		{"debt fixed_window 3 per s", 2, 0, goldenWant{false, 0, s - 2, s - 2, false, 2}, "a look at 5 counted against 3: denied"},
		{"debt token_bucket 3 per s", 1, 0, goldenWant{false, 0, 1666666, 1666666, false, 2}, "2 charged at 0, 3 at 1 µs: -1.999997 tokens, 3 (full) again after 4.999997/3 s"},
		{"debt token_bucket 3 per s", 4, 0, goldenWant{false, 0, 4999996, 0, true, 12}, "10 more at 4 µs from -1.999988: kept, full after 14.999988/3 s; above the burst: never"},
		{"usage modes fixed_window 2 per s", 0, 1, goldenWant{false, 0, s, 0, true, 1}, "a charge of 3 above the limit 2 is kept: never"},
		{"usage modes fixed_window 2 per s", 1, 1, goldenWant{false, 0, s - 1, s - 1, false, 2}, "1 more on v, at 3 against 2: denied, kept"},
	} {
		gc := byName[c.name]
		if gc == nil || c.step >= len(gc.Steps) || c.hit >= len(gc.Steps[c.step].Want) {
			t.Errorf("%s step %d hit %d: not in %s", c.name, c.step, c.hit, goldenFile)
			continue
		}
		if got := gc.Steps[c.step].Want[c.hit]; got != c.want {
			t.Errorf("%s step %d hit %d (%s): file says %+v, by hand %+v", c.name, c.step, c.hit, c.whyWritten, got, c.want)
		}
	}
}
