package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

const unitRules = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra, burst: 2}
    descriptors:
      - key: path
        value: /x
        rate_limit: {unit: hour, requests_per_unit: 7}
  - key: tenant-b
`

// fixedRules are rules in force with a given load status.
type fixedRules struct {
	set *rules.Set
	st  rules.Status
}

func (f fixedRules) Current() *rules.Set  { return f.set }
func (f fixedRules) Status() rules.Status { return f.st }

type unitPage struct {
	h   *Handler
	svc *envoy.Service
	reg *prometheus.Registry
}

// newUnitPage serves unitRules with the page showing values, and every
// rule's values kept, as on a server whose debug listener shows them.
func newUnitPage(t *testing.T, st rules.Status, values rlsmetrics.HotValues) *unitPage {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"d.yaml": []byte(unitRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs := fixedRules{set: set, st: st}
	reg := prometheus.NewRegistry()
	// Two value series per rule: the rest of the tenants count under
	// d.tenant._other_, which the page must add too.
	m, err := rlsmetrics.New(reg, rlsmetrics.Options{Store: "memory", MaxValueSeries: 2, KeepHotValues: true})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := envoy.New(rs.Current, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	h, err := New(Options{Rules: rs.Current, RuleStatus: rs.Status, Gatherer: reg, Metrics: m, Values: values, HistoryStep: time.Second, HistoryLength: 4})
	if err != nil {
		t.Fatal(err)
	}
	return &unitPage{h: h, svc: svc, reg: reg}
}

func (p *unitPage) send(t *testing.T, key, value string) { p.charge(t, key, value, nil) }

// charge is send with the descriptor's own hits_addend when not nil: usage
// reported after the fact.
func (p *unitPage) charge(t *testing.T, key, value string, hits *wrapperspb.UInt64Value) {
	t.Helper()
	req := &pb.RateLimitRequest{Domain: "d", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}, HitsAddend: hits}}}
	if _, err := p.svc.ShouldRateLimit(context.Background(), req); err != nil {
		t.Fatal(err)
	}
}

func (p *unitPage) get(t *testing.T, method, path string) *http.Response {
	t.Helper()
	rec := httptest.NewRecorder()
	p.h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

// The page's routes: read-only, its own files only, a redirect to the
// page's directory so that its relative links work behind a prefix.
func TestRoutes(t *testing.T) {
	p := newUnitPage(t, rules.Status{Version: 1}, rlsmetrics.HotFingerprints)
	for _, tc := range []struct {
		method, path string
		code         int
		want         string // in the body, or the Location
	}{
		{"GET", "/ui", http.StatusMovedPermanently, "ui/"},
		{"GET", "/ui/", http.StatusOK, `<script src="app.js"`},
		{"HEAD", "/ui/", http.StatusOK, ""},
		{"GET", "/ui/index.html", http.StatusMovedPermanently, "./"},
		{"GET", "/ui/app.js", http.StatusOK, "api/snapshot"},
		{"GET", "/ui/style.css", http.StatusOK, "--ok"},
		{"GET", "/ui/api/snapshot", http.StatusOK, `"domains"`},
		{"GET", "/ui/nothing.js", http.StatusNotFound, ""},
		{"GET", "/ui/../ui.go", http.StatusNotFound, ""},
		{"GET", "/ui/assets/app.js", http.StatusNotFound, ""},
		{"POST", "/ui/api/snapshot", http.StatusMethodNotAllowed, "read-only"},
		{"DELETE", "/ui/", http.StatusMethodNotAllowed, "read-only"},
		{"GET", "/elsewhere", http.StatusNotFound, ""},
	} {
		resp := p.get(t, tc.method, tc.path)
		body, _ := io.ReadAll(resp.Body)
		got := string(body) + resp.Header.Get("Location")
		if resp.StatusCode != tc.code || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: %d %q, want %d with %q", tc.method, tc.path, resp.StatusCode, got, tc.code, tc.want)
		}
		if csp := resp.Header.Get("Content-Security-Policy"); resp.StatusCode != http.StatusMethodNotAllowed && !strings.Contains(csp, "default-src 'none'") {
			t.Errorf("%s %s: Content-Security-Policy %q", tc.method, tc.path, csp)
		}
	}
}

// The snapshot's totals are the sums of the rule's series in the registry
// /metrics serves, value series and _other_ included; the rules form a
// tree with their limits; a refused reload lists its problems one per
// line.
func TestSnapshot(t *testing.T) {
	refusedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	_, refused := rules.Parse(map[string][]byte{
		"d.yaml": []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"),
		"e.yaml": []byte("descriptors: []\n"),
	}, rules.Options{})
	st := rules.Status{Version: 4, Reloads: 5, Failures: 1, Origin: "7", Source: "xds eg:18001 node n: receiving rules", LastErrorAt: refusedAt, LastError: refused}
	p := newUnitPage(t, st, rlsmetrics.HotFingerprints)
	for i := range 9 {
		p.send(t, "tenant", fmt.Sprintf("t%d", i%5))
		p.send(t, "user", "u")
	}
	p.charge(t, "user", "spender", wrapperspb.UInt64(5)) // usage past the limit of 3
	snap, err := p.h.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]Rule{}
	for _, d := range snap.Domains {
		for _, r := range d.Rules {
			byPath[r.Path] = r
		}
	}
	for _, tc := range []struct {
		path, name string
		depth      int
		limits     string
		flags      string
		hits       float64
	}{
		{"d.tenant", "tenant", 0, "gcra 2/60", "detailed_metric", 9},
		{"d.tenant.path_/x", "path_/x", 1, "fixed_window 7/3600", "", 0},
		{"d.tenant-b", "tenant-b", 0, "", "", 0},
		{"d.user", "user", 0, "fixed_window 3/60", "", 14},
	} {
		r, ok := byPath[tc.path]
		if !ok {
			t.Errorf("no rule %s in %+v", tc.path, snap.Domains)
			continue
		}
		var lims []string
		for _, l := range r.Limits {
			lims = append(lims, fmt.Sprintf("%s %d/%v", l.Algorithm, l.Limit, l.Window))
		}
		if r.Name != tc.name || r.Depth != tc.depth || strings.Join(lims, ",") != tc.limits {
			t.Errorf("%s: name %q depth %d limits %q, want %q %d %q", tc.path, r.Name, r.Depth, lims, tc.name, tc.depth, tc.limits)
		}
		if got := strings.Join(r.Flags, ","); got != tc.flags {
			t.Errorf("%s: flags %q, want %q", tc.path, got, tc.flags)
		}
		if r.Totals.Hits != tc.hits || r.Totals.Hits != sumSeries(t, p.reg, "floodgate_hits_total", tc.path) ||
			r.Totals.Over != sumSeries(t, p.reg, "floodgate_over_limit_total", tc.path) ||
			r.Totals.Within != sumSeries(t, p.reg, "floodgate_within_limit_total", tc.path) ||
			r.Totals.Charged != sumSeries(t, p.reg, "floodgate_usage_charged_total", tc.path) {
			t.Errorf("%s: totals %+v, want %v hits and the registry's sums", tc.path, r.Totals, tc.hits)
		}
	}
	if got := byPath["d.user"].Totals.Charged; got != 5 {
		t.Errorf("d.user charged %v, want the 5 reported past its limit", got)
	}
	if got := len(byPath["d.tenant"].Hot); got != hotCounters {
		t.Errorf("d.tenant has %d hot counters, want %d", got, hotCounters)
	}
	for _, h := range byPath["d.tenant"].Hot {
		if !h.Hidden || strings.Contains(h.Key, "_t") {
			t.Errorf("hot counter %+v shows a value with HotFingerprints", h)
		}
	}
	want := RuleStatus{Version: 4, Reloads: 5, Failures: 1, Origin: "7", Source: "xds eg:18001 node n: receiving rules", LastErrorAt: &refusedAt, Errors: []string{
		`d.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit "fortnight" (want second, minute, hour, day, week, month or year)`,
		"e.yaml:1:1: domain: missing (want the domain name Envoy sends)"}}
	gotJSON, _ := json.Marshal(snap.Rules)
	wantJSON, _ := json.Marshal(want)
	if string(gotJSON) != string(wantJSON) {
		t.Errorf("rule status\n got %s\nwant %s", gotJSON, wantJSON)
	}
}

// Each listener's page shows the values its HotValues lets through, even
// though every rule's values are kept: the HTTP listener's those of the
// detailed_metric rule only, the debug listener's (WithValues(HotAll))
// every rule's; and the snapshot says which.
func TestValuesPerListener(t *testing.T) {
	p := newUnitPage(t, rules.Status{Version: 1}, rlsmetrics.HotOptedIn)
	p.send(t, "tenant", "acme")
	p.send(t, "user", "alice")
	for _, tc := range []struct {
		name         string
		h            *Handler
		values       string
		tenant, user string // the hot key shown; "#" for a fingerprint
	}{
		{"HTTP listener", p.h, "opted_in", "d.tenant_acme", "#"},
		{"debug listener", p.h.WithValues(rlsmetrics.HotAll), "all", "d.tenant_acme", "d.user_alice"},
		{"no values", p.h.WithValues(rlsmetrics.HotFingerprints), "fingerprints", "#", "#"},
	} {
		resp := httptest.NewRecorder()
		tc.h.ServeHTTP(resp, httptest.NewRequest("GET", "/ui/api/snapshot", nil))
		var snap Snapshot
		if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{}
		for _, r := range snap.Domains[0].Rules {
			for _, h := range r.Hot {
				switch {
				case h.Hidden && strings.HasPrefix(h.Key, r.Path+" #") && !strings.Contains(h.Key, "acme") && !strings.Contains(h.Key, "alice"):
					keys[r.Path] = "#"
				case h.Hidden:
					keys[r.Path] = "bad fingerprint " + h.Key
				default:
					keys[r.Path] = h.Key
				}
			}
		}
		if snap.Values != tc.values || keys["d.tenant"] != tc.tenant || keys["d.user"] != tc.user {
			t.Errorf("%s: values %q, hot keys %q; want %q, tenant %q, user %q", tc.name, snap.Values, keys, tc.values, tc.tenant, tc.user)
		}
	}
}

// The history keeps at most HistoryLength samples, the newest, each with
// the rules in force; the snapshot carries them only when asked.
func TestHistoryBounds(t *testing.T) {
	p := newUnitPage(t, rules.Status{Version: 1}, rlsmetrics.HotFingerprints)
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	for i := range 7 {
		p.send(t, "user", "u")
		p.h.sample(t0.Add(time.Duration(i) * time.Second))
	}
	for _, tc := range []struct {
		query string
		want  int
	}{{"", 0}, {"?history=1", 4}} {
		var snap Snapshot
		if err := json.NewDecoder(p.get(t, "GET", "/ui/api/snapshot"+tc.query).Body).Decode(&snap); err != nil {
			t.Fatal(err)
		}
		if len(snap.History) != tc.want || snap.HistoryLength != 4 || snap.HistoryStepMillis != 1000 {
			t.Fatalf("snapshot%s: %d samples, length %d, step %d ms; want %d, 4, 1000", tc.query, len(snap.History),
				snap.HistoryLength, snap.HistoryStepMillis, tc.want)
		}
		for i, s := range snap.History {
			// The newest four: samples 3 to 6, with 4 to 7 hits on d.user,
			// the only rule with traffic: the 3 idle ones are left out, so
			// that a large rule set costs the history nothing per idle rule.
			if want := t0.Add(time.Duration(3+i) * time.Second); !s.Time.Equal(want) || s.Rules["d.user"][0] != float64(4+i) || len(s.Rules) != 1 {
				t.Errorf("sample %d: %v with %v, want %v with d.user's %d hits, and no idle rule", i, s.Time, s.Rules, want, 4+i)
			}
		}
	}
}

// The Refusing list counts the refusals since the oldest sample within
// three history steps (or the newest sample when all are older, or the
// start without any), most refused first, naming the most refused
// counters.
func TestRefusingOrder(t *testing.T) {
	for _, tc := range []struct {
		name string
		// before is sent before the sample taken sampleAge ago (none for
		// 0), after between it and the snapshot.
		before, after map[string]int
		sampleAge     time.Duration
		want          string // path:refused, most first
	}{
		{"no history: since the start", map[string]int{"user": 12, "tenant": 4}, nil, 0, "d.user:9 d.tenant:2"},
		{"since the sample in the window", map[string]int{"user": 12}, map[string]int{"tenant": 4, "user": 1}, time.Second, "d.tenant:2 d.user:1"},
		{"since the newest sample when older", map[string]int{"user": 12}, map[string]int{"tenant": 5}, time.Minute, "d.tenant:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newUnitPage(t, rules.Status{Version: 1}, rlsmetrics.HotAll)
			send := func(n map[string]int) {
				for key, count := range n {
					for range count {
						p.send(t, key, "x")
					}
				}
			}
			send(tc.before)
			if tc.sampleAge > 0 {
				p.h.sample(time.Now().Add(-tc.sampleAge))
			}
			send(tc.after)
			snap, err := p.h.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range snap.Refusing {
				got = append(got, fmt.Sprintf("%s:%v", r.Path, r.Refused))
				if top := r.Top; len(top) == 0 || top[0].Key != r.Path+"_x" || top[0].Over == 0 {
					t.Errorf("%s: top refused counters %+v, want %s_x first", r.Path, top, r.Path)
				}
			}
			if strings.Join(got, " ") != tc.want {
				t.Errorf("refusing %q, want %q", got, tc.want)
			}
		})
	}
}

// sumSeries sums the series of name whose rule label is rule or one of its
// value labels ("rule_", "rule._other_").
func sumSeries(t *testing.T, g prometheus.Gatherer, name, rule string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := label(m, "rule")
			if l == rule || strings.HasPrefix(l, rule+"_") || l == rule+"._other_" {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
