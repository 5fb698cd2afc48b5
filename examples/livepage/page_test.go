package livepage_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/internal/ui"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
)

// browserRules have a plain limit (per client), a detailed_metric one with
// a nested rule, a shadow-mode one, and one with a long name that gets no
// traffic. The client's limit is the lowest, so that it refuses the most
// whatever the pace of the traffic (traffic's comment).
const browserRules = `domain: shop
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 30}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 600, algorithm: sliding_window}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: forwarded_client_address
    value: /api/v1/reports/quarterly
    rate_limit: {unit: hour, requests_per_unit: 100000}
`

// heavyClient and tenantValue are request values that must not show on
// the HTTP listener's page; tenantValue is also markup that must show as
// text on the debug listener's.
const (
	heavyClient = "heavy-client-7"
	tenantValue = "<b>acme</b>"
)

// screenshotDir is where TestPageInBrowser writes its screenshots.
var screenshotDir = flag.String("screenshots", "", "directory for the live page's screenshots (default: $FLOODGATE_ARTIFACTS, else a temporary directory of the test)")

// History of the page in these tests: a sample every 250 ms, 30 s kept.
const (
	historyStep   = 250 * time.Millisecond
	historyLength = 120
)

// uiServer is a running floodgate: rules from a file the test can edit,
// the in-memory store, the page on both listeners.
type uiServer struct {
	srv      *server.Server
	ruleFile string
}

func startUIServer(t *testing.T, interval time.Duration) *uiServer {
	t.Helper()
	// Positions read "shop.yaml:3:5", as on a server started where its
	// rules are.
	t.Chdir(t.TempDir())
	file := "shop.yaml"
	if err := os.WriteFile(file, []byte(browserRules), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := rules.NewWatcher(".", rules.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics, err := rlsmetrics.New(reg, rlsmetrics.Options{Store: "memory", KeepHotValues: true})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	svc, err := envoy.New(w.Current, st.Limiter(), envoy.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	// As cmd/server does: the HTTP listener's page shows the values of
	// opted-in rules, the debug listener's every rule's.
	page, err := ui.New(ui.Options{Rules: w.Current, RuleStatus: w.Status, Gatherer: reg, Metrics: metrics, Store: st.Health, Values: rlsmetrics.HotOptedIn,
		Interval: interval, HistoryStep: historyStep, HistoryLength: historyLength})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(svc, w.Current, w.Status, reg, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0",
		Store: st.Health, UI: page, DebugUI: page.WithValues(rlsmetrics.HotAll)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	wg.Go(func() { page.Run(ctx) })
	wg.Go(func() {
		if err := srv.Run(ctx); err != nil {
			t.Errorf("server: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	select {
	case <-srv.Ready():
	case <-time.After(5 * time.Second):
		t.Fatal("server not ready")
	}
	return &uiServer{srv: srv, ruleFile: file}
}

func (s *uiServer) httpURL(p string) string  { return "http://" + s.srv.Addrs().HTTP.String() + p }
func (s *uiServer) debugURL(p string) string { return "http://" + s.srv.Addrs().Debug.String() + p }

// traffic sends requests through /json until stop is called, which
// returns once the last request has been answered: a heavy client among
// light ones, one detailed_metric tenant and a shadow-mode descriptor, each
// alone in its request so that none is refused by another. At R rounds a
// second (at most 66), the heavy client is sent 1.75R times a second and
// refuses about 1.75R-5 (each light client has a bucket of its own), the
// tenant R-30: the client refuses the most at any pace.
func (s *uiServer) traffic(t *testing.T) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(15 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			client := heavyClient
			if i%4 == 3 {
				client = fmt.Sprintf("light-%d", i%40)
			}
			for _, d := range [][2]string{{"client", heavyClient}, {"client", client}, {"tenant", tenantValue}, {"beta", "x"}} {
				body := fmt.Sprintf(`{"domain":"shop","descriptors":[{"entries":[{"key":%q,"value":%q}]}]}`, d[0], d[1])
				resp, err := http.Post(s.httpURL("/json"), "application/json", strings.NewReader(body))
				if err != nil {
					t.Errorf("traffic: %v", err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
					t.Errorf("traffic: /json answered %s", resp.Status)
					return
				}
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}

// pageRule is what the page shows of one rule.
type pageRule struct {
	OK, Over, Shadow, Near                             float64
	THits, TWithin, TOver, TShadow, TNear, TNotCharged float64
	Limits, Hot                                        []string
	// Points is how many points its chart draws, Scale the chart's scale.
	Points int
	Scale  string
}

// pageRefusal is one row of the page's "refusing now" list.
type pageRefusal struct {
	Rule    string
	Refused float64
	Top     []string
}

// pageState is what the page shows.
type pageState struct {
	Polls     int
	Rules     map[string]pageRule
	Depths    map[string]int
	Refused   []string
	Version   string
	Store     string
	Latency   string
	DecOK     float64
	BoldTags  int
	ValueNote string
	Listener  string // the header's listener badge, "" when hidden
	Refusing  []pageRefusal
}

// readPage is the script that reads pageState from the DOM, as a reader
// sees it: the figures' text is checked against their data-value.
const readPage = `
const num = (e) => e && e.dataset.value !== undefined ? parseFloat(e.dataset.value) : -1;
const out = {Polls: +(document.body.dataset.polls || 0), Rules: {}, Depths: {}};
for (const tr of document.querySelectorAll("tr.rule")) {
  // A rule's figures are in its row, its totals and hot counters in the
  // row after it.
  const hot = [...document.querySelectorAll("tr.hot")].find((h) => h.dataset.rule === tr.dataset.rule);
  const q = (c) => tr.querySelector(c), qt = (c) => hot && hot.querySelector(c);
  const r = {OK: num(q(".r-ok")), Over: num(q(".r-over")), Shadow: num(q(".r-shadow")), Near: num(q(".r-near")),
    THits: num(qt(".t-hits")), TWithin: num(qt(".t-within")), TOver: num(qt(".t-over")), TShadow: num(qt(".t-shadow")),
    TNear: num(qt(".t-near")), TNotCharged: num(qt(".t-not_charged"))};
  for (const k of ["hits", "within", "over", "shadow", "near", "not_charged"]) {
    const e = qt(".t-" + k);
    if (e && e.textContent !== String(Math.round(parseFloat(e.dataset.value)))) r.THits = -2;
  }
  r.Limits = [...tr.querySelectorAll(".limit")].map((e) => e.dataset.algorithm + " " + e.dataset.limit + "/" + e.dataset.window + "s");
  r.Hot = hot && !hot.hidden ? [...hot.querySelectorAll(".key")].map((e) => e.textContent) : [];
  r.Points = +(tr.querySelector("svg.chart").dataset.points || 0);
  r.Scale = tr.querySelector(".scale").textContent;
  out.Rules[tr.dataset.rule] = r;
  out.Depths[tr.dataset.rule] = Math.round((parseFloat(tr.querySelector("td.rule").style.paddingLeft) - 0.5) / 1.2);
}
out.Refused = document.getElementById("refused").hidden ? [] : [...document.querySelectorAll("#refused-errors li")].map((e) => e.textContent);
out.Version = document.getElementById("rules-version").textContent;
out.Store = document.getElementById("store-health").textContent;
out.Latency = document.getElementById("store-latency").textContent;
out.DecOK = num(document.getElementById("dec-ok"));
out.BoldTags = document.querySelectorAll("#domains b").length;
out.ValueNote = document.getElementById("values-note").textContent;
const badge = document.getElementById("listener");
out.Listener = badge.hidden ? "" : badge.textContent;
out.Refusing = document.getElementById("refusing-table").hidden ? [] : [...document.querySelectorAll("tr.refusal")].map((tr) =>
  ({Rule: tr.dataset.rule, Refused: parseFloat(tr.dataset.refused), Top: [...tr.querySelectorAll(".key")].map((e) => e.textContent)}));
return out;`

// pageLayout is how the page lays out at the viewport's width.
type pageLayout struct {
	Width, ScrollWidth int
	// BrokenNames are the rule names broken inside a word: a part
	// between two break points ("." "_" "/") that spans lines.
	BrokenNames []string
	// TotalLines is the most lines one rule's totals take.
	TotalLines int
}

// readLayout is the script that reads pageLayout.
const readLayout = `
const out = {Width: window.innerWidth, ScrollWidth: document.documentElement.scrollWidth, BrokenNames: [], TotalLines: 0};
for (const n of document.querySelectorAll("td.rule .name")) {
  for (const t of n.childNodes) {
    if (t.nodeType !== Node.TEXT_NODE) continue;
    const r = document.createRange();
    r.selectNodeContents(t);
    if (new Set([...r.getClientRects()].map((c) => Math.round(c.top))).size > 1) out.BrokenNames.push(n.textContent);
  }
}
for (const t of document.querySelectorAll(".totals")) {
  const one = t.querySelector(".total").getBoundingClientRect().height;
  out.TotalLines = Math.max(out.TotalLines, Math.round(t.getBoundingClientRect().height / one));
}
return out;`

func (b *browser) page() pageState {
	b.t.Helper()
	var p pageState
	b.eval(&p, readPage)
	return p
}

// waitPage polls the page until ok accepts it, failing after 20 s with
// what it saw last.
func (b *browser) waitPage(what string, ok func(pageState) bool) pageState {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		p := b.page()
		if ok(p) {
			return p
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("page never showed %s; last seen: %+v", what, p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPolls waits until the page has taken n more snapshots.
func (b *browser) waitPolls(n int) pageState {
	b.t.Helper()
	from := b.page().Polls
	return b.waitPage(fmt.Sprintf("%d more snapshots", n), func(p pageState) bool { return p.Polls >= from+n })
}

// metricsLine is one hit counter series of /metrics.
var metricsLine = regexp.MustCompile(`^(floodgate_\w+_total)\{domain="([^"]*)",rule="([^"]*)"\} (\S+)$`)

// scrape returns /metrics' hit counters by name and rule label.
func scrape(t *testing.T, url string) map[string]map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		m := metricsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[4], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", sc.Text(), err)
		}
		if out[m[1]] == nil {
			out[m[1]] = map[string]float64{}
		}
		out[m[1]][m[3]] = v
	}
	return out
}

// TestPageInBrowser drives the page in headless Chromium against a running
// server with traffic: the rule tree with its limits, the biggest refuser
// first in "refusing now", a layout that holds at 1280 and 800 px (with
// screenshots), figures that move while traffic flows and equal /metrics
// once it stops, charts full of the last seconds from the first paint, hot
// counters with the values of the detailed_metric rule only on the HTTP
// listener and of every rule, as text, on the debug listener, and a
// refused edit with its file:line.
func TestPageInBrowser(t *testing.T) {
	s := startUIServer(t, 200*time.Millisecond)
	b := newBrowser(t)
	b.viewport(1280, 900)
	b.open(s.httpURL("/ui"))
	first := b.waitPage("the rules", func(p pageState) bool { return len(p.Rules) == 5 })
	wantLimits := map[string]string{"shop.client": "token_bucket 5/1s", "shop.tenant": "fixed_window 30/1s",
		"shop.tenant.path": "sliding_window 600/60s", "shop.beta": "fixed_window 5/1s",
		"shop.forwarded_client_address_/api/v1/reports/quarterly": "fixed_window 100000/3600s"}
	wantDepth := map[string]int{"shop.client": 0, "shop.tenant": 0, "shop.tenant.path": 1, "shop.beta": 0,
		"shop.forwarded_client_address_/api/v1/reports/quarterly": 0}
	for rule, want := range wantLimits {
		if got := strings.Join(first.Rules[rule].Limits, ", "); got != want {
			t.Errorf("%s: page shows limits %q, want %q", rule, got, want)
		}
		if got := first.Depths[rule]; got != wantDepth[rule] {
			t.Errorf("%s: depth %d in the tree, want %d", rule, got, wantDepth[rule])
		}
	}
	if first.Version != "version 1" || !strings.HasPrefix(first.Store, "memory healthy") {
		t.Errorf("page shows %q and store %q", first.Version, first.Store)
	}

	stop := s.traffic(t)
	moving := b.waitPage("rates from the traffic", func(p pageState) bool {
		c, tn, beta := p.Rules["shop.client"], p.Rules["shop.tenant"], p.Rules["shop.beta"]
		return c.OK > 0 && c.Over > 0 && tn.OK > 0 && tn.Over > 0 && beta.Shadow > 0 && p.DecOK > 0 && c.Near >= 0 &&
			len(c.Hot) > 0 && strings.HasPrefix(p.Latency, "mean ")
	})
	later := b.waitPolls(3)
	for _, rule := range []string{"shop.client", "shop.tenant", "shop.beta"} {
		if a, z := moving.Rules[rule].THits, later.Rules[rule].THits; !(z > a && a > 0) {
			t.Errorf("%s: hits total went from %v to %v while traffic flowed", rule, a, z)
		}
	}
	checkHTTPValues(t, later)
	// The client refuses the most (traffic's comment): first in "refusing
	// now", the others after it in decreasing order, with its most refused
	// counter named, as a fingerprint here.
	refusing := b.waitPage("the client refusing the most", func(p pageState) bool {
		return len(p.Refusing) >= 2 && p.Refusing[0].Rule == "shop.client" && p.Refusing[0].Refused > p.Refusing[1].Refused
	})
	for i, r := range refusing.Refusing {
		if r.Refused <= 0 || (i > 0 && r.Refused > refusing.Refusing[i-1].Refused) || r.Rule == "shop.beta" {
			t.Errorf("refusing now lists %+v: want refusing rules only (no shadow_mode one), most refused first", refusing.Refusing)
		}
	}
	if top := refusing.Refusing[0].Top; len(top) == 0 || !strings.HasPrefix(top[0], "shop.client #") {
		t.Errorf("refusing now names the client's counters %q, want a fingerprint first", top)
	}
	for _, w := range []int64{1280, 800} {
		checkLayout(t, b, w)
	}
	stop()

	// Once traffic stopped and the page took a snapshot after it, its
	// totals are /metrics' counters.
	final := b.waitPolls(2)
	m := scrape(t, s.httpURL("/metrics"))
	series := map[string]string{"shop.client": "shop.client", "shop.tenant": "shop.tenant_" + tenantValue, "shop.beta": "shop.beta"}
	for rule, label := range series {
		r := final.Rules[rule]
		for _, f := range []struct {
			name string
			page float64
		}{{"floodgate_hits_total", r.THits}, {"floodgate_within_limit_total", r.TWithin}, {"floodgate_over_limit_total", r.TOver},
			{"floodgate_shadow_mode_total", r.TShadow}, {"floodgate_near_limit_total", r.TNear}, {"floodgate_not_charged_total", r.TNotCharged}} {
			if want := m[f.name][label]; f.page != want {
				t.Errorf("%s: page shows %s %v, /metrics says %v", rule, f.name, f.page, want)
			}
		}
	}
	if final.Rules["shop.client"].THits == 0 || final.Rules["shop.beta"].TShadow == 0 {
		t.Errorf("no traffic counted: %+v", final.Rules)
	}

	// A page opened now draws the last seconds at once, from the
	// server's history: more points than its own polls could give.
	b.viewport(1280, 900)
	b.open(s.debugURL("/ui/"))
	dbg := b.waitPage("hot counters on the debug listener", func(p pageState) bool { return len(p.Rules["shop.tenant"].Hot) > 0 })
	if c := dbg.Rules["shop.client"]; c.Points < 8 || c.Points <= dbg.Polls+1 || !strings.HasPrefix(c.Scale, "peak ") ||
		!strings.HasSuffix(c.Scale, "last 30 s") {
		t.Errorf("after %d snapshots the client's chart has %d points, scale %q: want the server's history (8 points or more), a peak and 30 s",
			dbg.Polls, c.Points, c.Scale)
	}
	checkDebugValues(t, dbg)
	saveScreenshot(t, "ui-debug-1280.png", b.screenshot())

	// A refused edit shows with its file:line, and the rules in force stay.
	broken := strings.Replace(browserRules, "{unit: second, requests_per_unit: 5,", "{unit: fortnight, requests_per_unit: 5,", 1)
	if err := os.WriteFile(s.ruleFile, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := b.waitPage("the refused edit", func(p pageState) bool { return len(p.Refused) > 0 })
	if got := strings.Join(refused.Refused, "\n"); !strings.Contains(got, "shop.yaml:4:") || !strings.Contains(got, "fortnight") {
		t.Errorf("refused edit shown as %q, want shop.yaml:4 and the bad unit", got)
	}
	if refused.Version != "version 1" || strings.Join(refused.Rules["shop.client"].Limits, "") != "token_bucket 5/1s" {
		t.Errorf("after a refused edit the page shows %q with client limits %q", refused.Version, refused.Rules["shop.client"].Limits)
	}
}

// checkHTTPValues: the HTTP listener's page shows the detailed_metric
// rule's value, as text, and fingerprints for the other rules, and says
// so.
func checkHTTPValues(t *testing.T, p pageState) {
	t.Helper()
	for rule, r := range p.Rules {
		for _, k := range r.Hot {
			shown := rule == "shop.tenant" && k == "shop.tenant_"+tenantValue
			if !shown && (strings.Contains(k, heavyClient) || strings.Contains(k, "acme") || !strings.HasPrefix(k, rule+" #")) {
				t.Errorf("HTTP listener's page shows hot counter %q of %s: want the rule and a fingerprint, no value", k, rule)
			}
		}
	}
	if hot := p.Rules["shop.tenant"].Hot; len(hot) == 0 || hot[0] != "shop.tenant_"+tenantValue || p.BoldTags != 0 {
		t.Errorf("HTTP listener's page shows tenant counters %q (%d <b> elements), want the detailed_metric value as text",
			hot, p.BoldTags)
	}
	if !strings.Contains(p.ValueNote, "only for detailed_metric and value_to_metric rules") || p.Listener != "" {
		t.Errorf("HTTP listener's page says %q (badge %q), want values only for opted-in rules", p.ValueNote, p.Listener)
	}
}

// checkDebugValues: the debug listener's page shows every rule's values,
// as text, and says why it may.
func checkDebugValues(t *testing.T, p pageState) {
	t.Helper()
	for rule, want := range map[string]string{"shop.tenant": "shop.tenant_" + tenantValue, "shop.client": "shop.client_" + heavyClient,
		"shop.beta": "shop.beta_x"} {
		if hot := p.Rules[rule].Hot; len(hot) == 0 || hot[0] != want {
			t.Errorf("debug page's %s counters are %q, want %q first", rule, hot, want)
		}
	}
	if p.BoldTags != 0 {
		t.Errorf("a request value became markup: %d <b> elements", p.BoldTags)
	}
	if !strings.Contains(p.ValueNote, "debug listener") || !strings.Contains(p.ValueNote, "loopback") || p.Listener == "" {
		t.Errorf("debug page says %q (badge %q), want it to name the debug listener and why it is on loopback", p.ValueNote, p.Listener)
	}
}

// checkLayout sets the viewport to width and checks that the page holds:
// no horizontal scrolling, no rule name broken inside a word, every rule's
// totals on at most two lines; and keeps a screenshot of the exact width.
func checkLayout(t *testing.T, b *browser, width int64) {
	t.Helper()
	b.viewport(width, 900)
	b.waitPolls(2)
	var l pageLayout
	b.eval(&l, readLayout)
	if l.Width != int(width) || l.ScrollWidth > l.Width || len(l.BrokenNames) > 0 || l.TotalLines > 2 {
		t.Errorf("at %d px: page %d px wide in a %d px viewport, names broken inside a word %q, totals on %d lines; "+
			"want no overflow, none broken, at most 2 lines", width, l.ScrollWidth, l.Width, l.BrokenNames, l.TotalLines)
	}
	shot := b.screenshot()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot at %d px: %v", width, err)
	}
	if got := img.Bounds().Size(); got.X != int(width) || got.Y != 900 {
		t.Errorf("screenshot at %d px is %v, want %dx900", width, got, width)
	}
	saveScreenshot(t, fmt.Sprintf("ui-%d.png", width), shot)
}

// saveScreenshot writes a screenshot as name in -screenshots, else in
// $FLOODGATE_ARTIFACTS, else in a temporary directory of the test.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := cmp.Or(*screenshotDir, os.Getenv("FLOODGATE_ARTIFACTS"))
	if dir == "" {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the live page: %s (%d bytes)", path, len(png))
}

// xdsRules are the rules an xDS management server pushes in
// TestPageShowsXDSOrigin.
const xdsRules = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
`

// TestPageShowsXDSOrigin opens the page over rules pushed as an xDS
// management server pushes them: the header names the version_info in
// force and the state of the connection, as /rlconfig's origin: and
// source: lines do.
func TestPageShowsXDSOrigin(t *testing.T) {
	feed := rules.NewFeed(rules.Options{}, nil)
	if err := feed.Push("42", map[string][]byte{"xds/api": []byte(xdsRules)}); err != nil {
		t.Fatal(err)
	}
	feed.SetSource(`xds eg:18001 node envoy-ratelimit: receiving rules; last ACK "42"`)
	reg := prometheus.NewRegistry()
	m, err := rlsmetrics.New(reg, rlsmetrics.Options{Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(ui.Options{Rules: feed.Current, RuleStatus: feed.Status, Gatherer: reg, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b := newBrowser(t)
	b.open(srv.URL + "/ui/")
	p := b.waitPage("the rules", func(p pageState) bool { return len(p.Rules) > 0 })
	if p.Version != "version 1 (xDS version_info 42)" {
		t.Errorf("page header %q, want the version and the xDS version_info 42", p.Version)
	}
	var detail string
	b.eval(&detail, `return document.getElementById("rules-detail").textContent;`)
	if !strings.Contains(detail, `xds eg:18001 node envoy-ratelimit: receiving rules; last ACK "42"`) {
		t.Errorf("page detail %q, want the xDS connection's state", detail)
	}
}
