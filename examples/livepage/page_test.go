package livepage_test

import (
	"bufio"
	"context"
	"fmt"
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

	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/internal/ui"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
)

// browserRules have a plain limit (per client), a detailed_metric one with
// a nested rule, and a shadow-mode one.
const browserRules = `domain: shop
descriptors:
  - key: client
    rate_limit: {unit: second, requests_per_unit: 20, algorithm: token_bucket, burst: 10}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 30}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 600, algorithm: sliding_window}
  - key: beta
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 5}
`

// heavyClient and tenantValue are request values that must not show on
// the HTTP listener's page; tenantValue is also markup that must show as
// text on the debug listener's.
const (
	heavyClient = "heavy-client-7"
	tenantValue = "<b>acme</b>"
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
	metrics, err := envoy.NewMetrics(reg, envoy.MetricsOptions{Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	svc, err := envoy.New(w, st.Limiter(), envoy.Options{Metrics: metrics})
	if err != nil {
		t.Fatal(err)
	}
	page := func(show bool) http.Handler {
		h, err := ui.New(ui.Options{Rules: w, Gatherer: reg, Metrics: metrics, Store: st.Health, ShowValues: show, Interval: interval})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	srv, err := server.New(svc, w, reg, server.Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", DebugAddr: "127.0.0.1:0",
		Store: st.Health, UI: page(false), DebugUI: page(true)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
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
// alone in its request so that none is refused by another.
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
			for _, d := range [][2]string{{"client", client}, {"tenant", tenantValue}, {"beta", "x"}} {
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
}

// readPage is the script that reads pageState from the DOM, as a reader
// sees it: the figures' text is checked against their data-value.
const readPage = `
const num = (e) => e && e.dataset.value !== undefined ? parseFloat(e.dataset.value) : -1;
const out = {Polls: +(document.body.dataset.polls || 0), Rules: {}, Depths: {}};
for (const tr of document.querySelectorAll("tr.rule")) {
  const q = (c) => tr.querySelector(c);
  const r = {OK: num(q(".r-ok")), Over: num(q(".r-over")), Shadow: num(q(".r-shadow")), Near: num(q(".r-near")),
    THits: num(q(".t-hits")), TWithin: num(q(".t-within")), TOver: num(q(".t-over")), TShadow: num(q(".t-shadow")),
    TNear: num(q(".t-near")), TNotCharged: num(q(".t-not_charged"))};
  for (const k of ["hits", "within", "over", "shadow", "near", "not_charged"]) {
    const e = q(".t-" + k);
    if (e && e.textContent !== String(Math.round(parseFloat(e.dataset.value)))) r.THits = -2;
  }
  r.Limits = [...tr.querySelectorAll(".limit")].map((e) => e.dataset.algorithm + " " + e.dataset.limit + "/" + e.dataset.window + "s");
  const hot = [...document.querySelectorAll("tr.hot")].find((h) => h.dataset.rule === tr.dataset.rule);
  r.Hot = hot && !hot.hidden ? [...hot.querySelectorAll(".key")].map((e) => e.textContent) : [];
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
// server with traffic: the rule tree with its limits, figures that move
// while traffic flows and equal /metrics once it stops, hot counters
// without values on the HTTP listener and with them, as text, on the debug
// listener, a refused edit with its file:line, and a screenshot kept as
// an artifact.
func TestPageInBrowser(t *testing.T) {
	s := startUIServer(t, 200*time.Millisecond)
	b := newBrowser(t)
	b.open(s.httpURL("/ui"))
	first := b.waitPage("the rules", func(p pageState) bool { return len(p.Rules) == 4 })
	wantLimits := map[string]string{"shop.client": "token_bucket 20/1s", "shop.tenant": "fixed_window 30/1s",
		"shop.tenant.path": "sliding_window 600/60s", "shop.beta": "fixed_window 5/1s"}
	wantDepth := map[string]int{"shop.client": 0, "shop.tenant": 0, "shop.tenant.path": 1, "shop.beta": 0}
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
	for rule, r := range later.Rules {
		for _, k := range r.Hot {
			if strings.Contains(k, heavyClient) || strings.Contains(k, "acme") || !strings.HasPrefix(k, rule+" #") {
				t.Errorf("HTTP listener's page shows hot counter %q of %s: want the rule and a fingerprint, no value", k, rule)
			}
		}
	}
	// Enough snapshots for the charts to show a few seconds.
	b.waitPage("15 snapshots", func(p pageState) bool { return p.Polls >= 15 })
	saveScreenshot(t, b.screenshot())
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

	// The debug listener's page shows the detailed_metric rule's value,
	// as text, and still hides the other rules' values.
	b.open(s.debugURL("/ui/"))
	dbg := b.waitPage("hot counters on the debug listener", func(p pageState) bool { return len(p.Rules["shop.tenant"].Hot) > 0 })
	if got := dbg.Rules["shop.tenant"].Hot[0]; got != "shop.tenant_"+tenantValue {
		t.Errorf("debug page's hottest tenant counter is %q, want %q", got, "shop.tenant_"+tenantValue)
	}
	if dbg.BoldTags != 0 {
		t.Errorf("a request value became markup: %d <b> elements", dbg.BoldTags)
	}
	if hot := dbg.Rules["shop.client"].Hot; len(hot) == 0 || !strings.HasPrefix(hot[0], "shop.client #") {
		t.Errorf("debug page shows client counters %q, want them hidden (no detailed_metric)", hot)
	}

	// A refused edit shows with its file:line, and the rules in force stay.
	broken := strings.Replace(browserRules, "{unit: second, requests_per_unit: 20,", "{unit: fortnight, requests_per_unit: 20,", 1)
	if err := os.WriteFile(s.ruleFile, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	refused := b.waitPage("the refused edit", func(p pageState) bool { return len(p.Refused) > 0 })
	if got := strings.Join(refused.Refused, "\n"); !strings.Contains(got, "shop.yaml:4:") || !strings.Contains(got, "fortnight") {
		t.Errorf("refused edit shown as %q, want shop.yaml:4 and the bad unit", got)
	}
	if refused.Version != "version 1" || strings.Join(refused.Rules["shop.client"].Limits, "") != "token_bucket 20/1s" {
		t.Errorf("after a refused edit the page shows %q with client limits %q", refused.Version, refused.Rules["shop.client"].Limits)
	}
}

// saveScreenshot keeps the page's screenshot in $FLOODGATE_ARTIFACTS, or
// a floodgate-artifacts directory in the system's temporary directory.
func saveScreenshot(t *testing.T, png []byte) {
	t.Helper()
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	dir := os.Getenv("FLOODGATE_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "floodgate-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ui.png")
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
	m, err := envoy.NewMetrics(reg, envoy.MetricsOptions{Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(ui.Options{Rules: feed, Gatherer: reg, Metrics: m})
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
