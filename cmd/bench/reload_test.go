package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestLargeRuleSet checks the generator of large rule sets, which
// docs/benchmarks.md measures both servers on: -rules N adds N rules of
// their own to bench-under, each value v0..vN-1 of key1 matching its exact
// rule and any other value key1's rule for any value, in the reference's
// format; a later generation changes the exact rules' limits only.
func TestLargeRuleSet(t *testing.T) {
	const n = 1000
	dir := filepath.Join(t.TempDir(), "rules")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-write-rules", dir, "-rules", "1000"}, &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr.String())
	}
	set, err := rules.Load(dir, rules.Options{})
	if err != nil {
		t.Fatalf("written rules do not load: %v", err)
	}
	perDomain := map[string]int{}
	for _, r := range set.Rules() {
		perDomain[r.Domain]++
	}
	if perDomain["bench-under"] != n+3 || perDomain["bench-over"] != 3 {
		t.Errorf("rules per domain %v, want bench-under %d (3 keys and %d values) and bench-over 3", perDomain, n+3, n)
	}
	for _, tc := range []struct {
		value string
		path  string
		limit uint32
	}{
		{exactValue(0), "bench-under.key1_v0", exactLimit(0)},
		{exactValue(n - 1), "bench-under.key1_v999", exactLimit(0)},
		{exactValue(n), "bench-under.key1", underLimitPerSecond},
	} {
		r := set.Match("bench-under", []rules.Entry{{Key: descriptorKey(0), Value: tc.value}})
		if r == nil || r.Path != tc.path || len(r.Limits) != 1 || r.Limits[0].RequestsPerUnit != tc.limit {
			t.Errorf("%s matched %+v; want %s with %d per second", tc.value, r, tc.path, tc.limit)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, "bench-under.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if per := fi.Size() / n; per < 90 || per > 120 {
		t.Errorf("%d bytes per rule; want about 100 (100,000 rules in 10 MB, as the figures say)", per)
	}

	// A later generation changes the exact rules' limit, nothing else.
	var b bytes.Buffer
	if err := writeRules(&b, limitUnder, ruleSpec{maxDescriptors: 3, algorithm: "fixed_window", rules: n, generation: 7}); err != nil {
		t.Fatal(err)
	}
	set7, err := rules.Parse(map[string][]byte{"bench-under.yaml": b.Bytes()}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		value string
		limit uint32
	}{{exactValue(0), exactLimit(7)}, {exactValue(n), underLimitPerSecond}} {
		if r := set7.Match("bench-under", []rules.Entry{{Key: descriptorKey(0), Value: tc.value}}); r == nil || r.Limits[0].RequestsPerUnit != tc.limit {
			t.Errorf("generation 7, %s: matched %+v; want %d per second", tc.value, r, tc.limit)
		}
	}
	if exactLimit(7) == exactLimit(0) {
		t.Errorf("generations 0 and 7 have the same limit")
	}
}

// TestReloads runs the -reloads mode on floodgate with a small rule set:
// the start, two reloads under load, and a report whose figures are all
// there and consistent. It asserts no performance figure.
func TestReloads(t *testing.T) {
	rd := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{
		"-redis-addr", rd.Addr, "-rules", "2000", "-reloads", "2", "-settle", "100ms",
		"-rate", "300", "-concurrency", "4", "-conns", "1", "-json",
	}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var rep reloadReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not a report: %v\n%s", err, stdout.String())
	}
	if rep.Server != "floodgate" || rep.Rules != 2000 || rep.FileMiB <= 0 || rep.Rate != 300 {
		t.Errorf("report header %+v", rep)
	}
	if rep.StartToFirstAnswerMs <= 0 || rep.RSSAfterStartMiB <= 0 {
		t.Errorf("start: %v ms, RSS %v MiB; want both > 0", rep.StartToFirstAnswerMs, rep.RSSAfterStartMiB)
	}
	if len(rep.ReloadMs) != 2 || len(rep.RSSAfterReloadMiB) != 2 || slices.Min(rep.ReloadMs) <= 0 || slices.Min(rep.RSSAfterReloadMiB) <= 0 {
		t.Errorf("reloads %v ms, RSS %v MiB; want 2 of each, > 0", rep.ReloadMs, rep.RSSAfterReloadMiB)
	}
	if len(rep.ReloadCPUMs) != 2 || slices.Min(rep.ReloadCPUMs) < 0 || rep.StartCPUMs <= 0 {
		t.Errorf("CPU: start %v ms, reloads %v ms; want the start's > 0 and one per reload", rep.StartCPUMs, rep.ReloadCPUMs)
	}
	if rep.PeakRSSMiB < rep.RSSAfterStartMiB || rep.PeakRSSMiB < slices.Max(rep.RSSAfterReloadMiB) {
		t.Errorf("peak RSS %v MiB below a reading (%v, %v)", rep.PeakRSSMiB, rep.RSSAfterStartMiB, rep.RSSAfterReloadMiB)
	}
	if rep.Errors != 0 || rep.Decisions <= 0 || rep.DuringCount <= 0 || int64(rep.DuringCount) > rep.Decisions {
		t.Errorf("%d decisions, %d during reloads, %d errors (%s); want decisions during the reloads and no error",
			rep.Decisions, rep.DuringCount, rep.Errors, rep.FirstError)
	}
	for name, l := range map[string]latencyMicros{"during": rep.DuringReloads, "between": rep.BetweenReloads} {
		if !(0 < l.P50 && l.P50 <= l.P99 && l.P99 <= l.Max && l.Max <= rep.All.Max) {
			t.Errorf("latency %s reloads %+v, all %+v: want positive, ascending, within all", name, l, rep.All)
		}
	}
	if !strings.Contains(stderr.String(), "reload 2 in force after") {
		t.Errorf("progress does not tell the reloads:\n%s", stderr.String())
	}
}

// TestReferenceEnv checks the reference server's environment: the rules
// where the tool writes them, its directory watched, no statsd, and the
// three listeners where the tool reaches them.
func TestReferenceEnv(t *testing.T) {
	got := referenceEnv("/r", "127.0.0.1:6379", [3]string{"127.0.0.1:1001", "127.0.0.1:1002", "127.0.0.1:1003"})
	for _, want := range []string{
		"RUNTIME_ROOT=/r", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false", "REDIS_URL=127.0.0.1:6379",
		"USE_STATSD=false", "GRPC_PORT=1001", "PORT=1002", "DEBUG_PORT=1003", "GRPC_HOST=127.0.0.1", "HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("reference environment %q lacks %s", got, want)
		}
	}
}

func TestParseStatusBytes(t *testing.T) {
	status := "Name:\tfloodgate\nVmHWM:\t  151564 kB\nVmRSS:\t  123268 kB\n"
	for field, want := range map[string]int64{"VmHWM": 151564 << 10, "VmRSS": 123268 << 10} {
		if got, err := parseStatusBytes(strings.NewReader(status), field); err != nil || got != want {
			t.Errorf("%s = %d, %v; want %d", field, got, err, want)
		}
	}
	if _, err := parseStatusBytes(strings.NewReader(status), "VmPeak"); err == nil {
		t.Errorf("a missing field gave no error")
	}
}
