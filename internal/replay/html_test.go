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
	}
	return rep
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
