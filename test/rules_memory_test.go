package test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// largeRules is a domain of n rules, each a value of its own with a limit
// of rpu per second, as cmd/bench -rules writes them: about 100 bytes of
// YAML per rule.
func largeRules(n, rpu int) string {
	var b strings.Builder
	b.Grow(110 * n)
	b.WriteString("domain: large\ndescriptors:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - key: key1\n    value: v%d\n    rate_limit:\n      unit: second\n      requests_per_unit: %d\n", i, rpu)
	}
	return b.String()
}

// statusKB reads a size field of /proc/<pid>/status, such as VmRSS or
// VmHWM (the most the process has held), in kB.
func statusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the process status (this test needs Linux's /proc): %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatalf("%s line %q: %v", field, line, err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// Bounds of the process's memory with a large rule set: a base for the
// runtime and the binary (24 MiB with a handful of rules) plus a multiple
// of the rule file's size, at rest after a load, and for the most the
// process ever held, which includes what the collector lets pile up at
// GOGC=400 while a load allocates some 40 times the file. Measured with
// 30,000 rules (2.9 MB): 55 MiB at rest after the start and after
// reloads, 125 to 128 MiB at the peak (at most about 180 by the numbers);
// before the rules were parsed in slices and released after loads, 279
// MiB right after the start.
const (
	rssBaseKB       = 32 << 10
	rssPerFileByte  = 12 // at rest, after a load
	peakPerFileByte = 60 // the most ever held, reloads included
)

// TestLargeRuleSetRSS starts floodgate on a domain of 30,000 rules,
// reloads it twice with changed limits, and holds its resident memory at
// rest after the start and after each reload, and the most it ever held,
// to bounds in the rule file's size: a load's live peak is small and what
// it leaves free goes back to the system.
func TestLargeRuleSetRSS(t *testing.T) {
	const n = 30_000
	dir := filepath.Join(t.TempDir(), "rules")
	file := largeRules(n, 1000)
	writeRules(t, dir, map[string]string{"large.yaml": file})
	p := start(t, options{args: []string{"-config", dir}})
	pid := p.Pid()
	size := int64(len(file))
	atRest := func(when string) {
		t.Helper()
		limit := rssBaseKB + rssPerFileByte*size>>10
		eventually(t, 10*time.Second, func() string {
			if rss := statusKB(t, pid, "VmRSS"); rss > limit {
				return fmt.Sprintf("%s: RSS %d kB, want at most %d kB (%d kB + %d times the %d-byte file)\n%s", when, rss, limit, rssBaseKB, rssPerFileByte, size, p.Logs)
			}
			return ""
		})
	}
	atRest("after the start")
	for i, rpu := range []int{2000, 3000} {
		writeRules(t, dir, map[string]string{"large.yaml": largeRules(n, rpu)})
		eventually(t, 30*time.Second, func() string {
			resp := p.mustCall(request("large", desc("key1", "v"+strconv.Itoa(n-1))))
			if got := resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); got != uint32(rpu) {
				return fmt.Sprintf("reload %d: the limit in force is %d, want %d", i+1, got, rpu)
			}
			return ""
		})
		atRest(fmt.Sprintf("after reload %d", i+1))
	}
	peak, limit := statusKB(t, pid, "VmHWM"), rssBaseKB+peakPerFileByte*size>>10
	t.Logf("%d rules, %d bytes: RSS at rest %d kB, peak %d kB", n, size, statusKB(t, pid, "VmRSS"), peak)
	if peak > limit {
		t.Errorf("the process held %d kB at its peak, want at most %d kB (%d kB + %d times the file)", peak, limit, rssBaseKB, peakPerFileByte)
	}
}
