package replay

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// wideReport is a report of two minutes of traffic with long descriptors
// and rule names, what a real one has.
func wideReport() *Report {
	t0 := time.Date(2026, 1, 5, 9, 0, 0, 0, time.UTC)
	rep := &Report{
		Requests: 500, From: t0, To: t0.Add(119 * time.Second),
		Old: &SetStats{Name: "config", Allowed: 400, Denied: 100}, New: &SetStats{Name: "/tmp/edited", Allowed: 300, Denied: 200},
		Domains:  []DomainCount{{Domain: "demo"}},
		Minutes:  []MinuteCount{{Minute: t0, OldDenied: 80, NewDenied: 120}, {Minute: t0.Add(time.Minute), OldDenied: 20, NewDenied: 80}},
		Counters: 1,
	}
	long := strings.Repeat("x", 60)
	for i := range 5 {
		rep.Peaks = append(rep.Peaks, CounterPeak{
			Domain:     "demo-domain-with-a-long-name",
			Descriptor: "api_key=" + long + strconv.Itoa(i) + ", path=/v1/organisations/" + long + "/projects/" + long + ", user_agent=" + long,
			OldRule:    "demo-domain-with-a-long-name.api_key_path_user_agent_" + long, NewRule: "demo-domain-with-a-long-name.api_key_path_user_agent_" + long,
			Requests: 100, PeakPerSecond: 15, PeakSecond: t0.Add(30 * time.Second), PeakPerMinute: 100,
		})
		rep.Values = append(rep.Values, ValueChange{
			Domain: "demo-domain-with-a-long-name", Descriptor: rep.Peaks[i].Descriptor,
			Requests: 1197, OldDenied: 0, NewDenied: 385, Change: 385, OldRule: rep.Peaks[i].OldRule, NewRule: rep.Peaks[i].NewRule,
		})
	}
	rep.ValuesDenied = 12
	rep.Rules = []RuleDiff{
		{Domain: "demo", Rule: "demo.user_agent_*bot*",
			Old: &RuleCount{Shadow: true, Requests: 176, Allowed: 176, WouldRefuse: 90},
			New: &RuleCount{Requests: 176, Allowed: 86, Denied: 90, Refused: 90}, NowDenied: 90},
		{Domain: "demo", Rule: "demo.remote_address_" + long,
			Old: &RuleCount{Requests: 51994, Allowed: 47195, Denied: 4799},
			New: &RuleCount{Requests: 51994, Allowed: 46810, Denied: 5184, Refused: 385}, NowDenied: 385},
		{Domain: "demo", Rule: "demo.idle", Old: &RuleCount{}, New: &RuleCount{}},
	}
	return rep
}

// TestHTMLTables: the page shows each rule's mode change and counts, what
// its columns mean, and the table of values by change, with the share of
// each value's requests, as the text report does.
func TestHTMLTables(t *testing.T) {
	var b bytes.Buffer
	if err := wideReport().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	for _, want := range []string{
		`<tr><td class="l">demo.user_agent_*bot* (shadow -&gt; enforced)</td><td>176</td><td>0 -&gt; 90</td><td>would 90 -&gt; 90</td><td>90</td><td>0</td></tr>`,
		`<td>51994</td><td>4799 -&gt; 5184</td><td>0 -&gt; 385</td><td>385</td><td>0</td></tr>`,
		"1 rule without traffic not shown.",
		"REFUSED: denied with this rule over its limit;",
		"Listing the top 5 of 12 values with a request denied under either rule set.",
		"A request counts under each of its descriptors.",
		`<td>1197</td><td>0</td><td>385 (32%)</td><td>&#43;385</td></tr>`, // html/template writes + as &#43;
	} {
		if !strings.Contains(h, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if strings.Contains(h, "demo.idle") {
		t.Errorf("the page lists a rule without traffic")
	}
	if rows := strings.Count(h[strings.Index(h, `<table id="values">`):], "<td>&#43;385</td>"); rows != 5 {
		t.Errorf("%d rows of values, want 5", rows)
	}
}

// TestHTMLChartBars: the chart draws a pair of bars per minute, old left
// of new, as tall as their counts, and no line joining the minutes (which
// would read as a gradual change between two counts).
func TestHTMLChartBars(t *testing.T) {
	var b bytes.Buffer
	if err := wideReport().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	if !strings.Contains(h, "Replayed 500 requests") || !strings.Contains(h, "<p>1 counter seen;") {
		t.Errorf("the HTML summary's counts are not worded by number")
	}
	if strings.Contains(h, "<polyline") || strings.Contains(h, "<path") {
		t.Errorf("the chart joins the minutes with a line")
	}
	rects := regexp.MustCompile(`<rect class="(old|new)" x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)" height="([0-9.]+)"><title>([^<]+)</title>`).FindAllStringSubmatch(h, -1)
	if len(rects) != 4 {
		t.Fatalf("%d bars, want 4 (old and new for 2 minutes):\n%s", len(rects), h)
	}
	num := func(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
	for i, want := range []struct {
		class  string
		height float64 // of 200 px, for a top of 120 denials
		title  string
	}{
		{"old", 80 * 200 / 120.0, "2026-01-05 09:00 UTC: old, 80 denied"},
		{"new", 200, "2026-01-05 09:00 UTC: new, 120 denied"},
		{"old", 20 * 200 / 120.0, "2026-01-05 09:01 UTC: old, 20 denied"},
		{"new", 80 * 200 / 120.0, "2026-01-05 09:01 UTC: new, 80 denied"},
	} {
		r := rects[i]
		if r[1] != want.class || num(r[4])-want.height > 0.1 || want.height-num(r[4]) > 0.1 || r[5] != want.title {
			t.Errorf("bar %d: %s height %s %q; want %s height %.1f %q", i, r[1], r[4], r[5], want.class, want.height, want.title)
		}
		if i%2 == 1 && num(rects[i-1][2])+num(rects[i-1][3]) > num(r[2])+0.05 {
			t.Errorf("bar %d overlaps the old bar before it", i)
		}
		if i >= 2 && num(r[2]) <= num(rects[i-1][2]) {
			t.Errorf("bar %d is not right of the minute before", i)
		}
	}
}

// TestHTMLFitsWindow opens the report in headless Chromium in a 1200 px
// wide window: with long descriptors and rule names, nothing is wider than
// the window (the page needs no horizontal scrolling).
func TestHTMLFitsWindow(t *testing.T) {
	chromium := harness.Require(t, "chromium")
	var b bytes.Buffer
	if err := wideReport().WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	// The measure is written into the page by a script added to a copy:
	// the report itself has none.
	page := strings.Replace(b.String(), "</body>", `<script>
addEventListener("load", () => {
  let widest = 0;
  for (const t of document.querySelectorAll("table")) widest = Math.max(widest, t.getBoundingClientRect().right);
  document.body.insertAdjacentHTML("beforeend", "<p id=measure>scroll=" + document.documentElement.scrollWidth + " client=" + document.documentElement.clientWidth + " widest=" + Math.ceil(widest) + "</p>");
});
</script></body>`, 1)
	dir := t.TempDir()
	file := filepath.Join(dir, "report.html")
	if err := os.WriteFile(file, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--user-data-dir="+filepath.Join(dir, "profile"),
		"--window-size=1200,900", "--virtual-time-budget=2000", "--dump-dom", "file://"+file).Output()
	if err != nil {
		t.Fatalf("chromium: %v", err)
	}
	m := regexp.MustCompile(`scroll=(\d+) client=(\d+) widest=(\d+)`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("no measure in the page:\n%s", out)
	}
	scroll, _ := strconv.Atoi(m[1])
	client, _ := strconv.Atoi(m[2])
	widest, _ := strconv.Atoi(m[3])
	t.Logf("page %d px wide in a %d px viewport; widest table ends at %d px", scroll, client, widest)
	if client < 1100 || scroll > client || widest > client {
		t.Errorf("the report overflows a 1200 px window: page %d px, viewport %d px, a table ends at %d px", scroll, client, widest)
	}
}
