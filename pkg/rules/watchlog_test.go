package rules

import (
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
)

// A fresh start is no reload: floodgate_rules_reloads_total counts reloads
// after the first load, and Run's look at the files when it starts finds
// nothing new. A change made before Run watches is one.
func TestWatcherStartCountsNoReload(t *testing.T) {
	tests := []struct {
		name            string
		beforeRun       string // the file's content written between NewWatcher and Run; "" for none
		reloads, failed uint64
	}{
		{"untouched", "", 0, 0},
		{"same content written again", rulesWith("d", 1), 0, 0},
		{"changed before Run", rulesWith("d", 2), 1, 0},
		{"broken before Run", "domain: [", 1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
			w, _ := startWatcherAfter(t, dir, func() {
				if tc.beforeRun != "" {
					writeFile(t, dir+"/rules.yaml", tc.beforeRun)
				}
			})
			if st := w.Status(); st.Reloads != tc.reloads || st.Failures != tc.failed {
				t.Errorf("after start: reloads %d, failures %d; want %d, %d", st.Reloads, st.Failures, tc.reloads, tc.failed)
			}
		})
	}

	dir := t.TempDir()
	writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
	w, _ := startWatcher(t, dir)
	start := time.Now()
	writeFile(t, dir+"/rules.yaml", rulesWith("d", 2))
	waitFor(t, w, start, "edit", limitIs("d", 2))
	if st := w.Status(); st.Reloads != 1 || st.Failures != 0 {
		t.Errorf("after one edit: reloads %d, failures %d; want 1, 0", st.Reloads, st.Failures)
	}
}

// startWatcherAfter is startWatcher with before run between NewWatcher
// and Run.
func startWatcherAfter(t *testing.T, path string, before func()) (*Watcher, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	w, err := NewWatcher(path, Options{}, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	before()
	runUntilCleanup(t, w)
	return w, logs
}

// When the files are good again after refused reloads, one line says so
// and which version is in force, whether the fix changed the rules or
// restored the ones in force.
func TestWatcherLogsRulesBackInForce(t *testing.T) {
	tests := []struct {
		name    string
		breakIt func(dir string)
		fix     func(dir string)
		want    string // the attributes after the message
	}{
		{
			name:    "refused edit, then a fix",
			breakIt: func(dir string) { writeFile(t, dir+"/rules.yaml", "domain: [") },
			fix:     func(dir string) { writeFile(t, dir+"/rules.yaml", rulesWith("d", 2)) },
			want:    `version=2 changed=true`,
		},
		{
			name: "emptied directory, then restored",
			breakIt: func(dir string) {
				if err := os.Remove(dir + "/rules.yaml"); err != nil {
					t.Fatal(err)
				}
			},
			fix:  func(dir string) { writeFile(t, dir+"/rules.yaml", rulesWith("d", 1)) },
			want: `version=1 changed=false`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
			w, logs := startWatcher(t, dir)
			start := time.Now()
			tc.breakIt(dir)
			for w.Status().Failures == 0 {
				if time.Since(start) > maxReloadDelay {
					t.Fatalf("the break was not refused within %v", maxReloadDelay)
				}
				time.Sleep(2 * time.Millisecond)
			}
			if strings.Contains(logs.String(), "loaded again") {
				t.Fatalf("'loaded again' logged while the files are broken:\n%s", logs)
			}
			start = time.Now()
			tc.fix(dir)
			for w.Status().LastError != nil {
				if time.Since(start) > maxReloadDelay {
					t.Fatalf("the fix was not loaded within %v", maxReloadDelay)
				}
				time.Sleep(2 * time.Millisecond)
			}
			re := regexp.MustCompile(`level=INFO msg="rules: loaded again after refused reloads" path=\S+ refused=[1-9]\d* ` + tc.want + "\n")
			if got := re.FindAllString(logs.String(), -1); len(got) != 1 {
				t.Errorf("want one line matching %s, got %d:\n%s", re, len(got), logs)
			}
			// A later good edit is an ordinary reload, not "again".
			start = time.Now()
			writeFile(t, dir+"/rules.yaml", rulesWith("d", 9))
			waitFor(t, w, start, "later edit", limitIs("d", 9))
			if n := strings.Count(logs.String(), "loaded again"); n != 1 {
				t.Errorf("'loaded again' logged %d times, want once:\n%s", n, logs)
			}
		})
	}
}

// A warning's field is logged only when it has one: the empty directory's
// warning is about the path, not a field.
func TestWatcherWarningFields(t *testing.T) {
	empty := t.TempDir()
	logs := &testlog.Buffer{}
	if _, err := NewWatcher(empty, Options{}, slog.New(slog.NewTextHandler(logs, nil))); err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^.*no rule files.*$`).FindString(logs.String())
	if line == "" || strings.Contains(line, "field=") || !strings.Contains(line, "at="+empty) {
		t.Errorf("empty directory warning: %q, want one with at=%s and no field:\n%s", line, empty, logs)
	}

	dir := t.TempDir()
	writeFile(t, dir+"/rules.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n")
	logs = &testlog.Buffer{}
	if _, err := NewWatcher(dir, Options{}, slog.New(slog.NewTextHandler(logs, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "field=descriptors[0].rate_limit.requests_per_unit") {
		t.Errorf("a warning about a field does not name it:\n%s", logs)
	}
}
