package test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const (
	goodRules    = "domain: rules\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 3}\n"
	betterRules  = "domain: rules\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 10}\n"
	brokenRules  = "domain: rules\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n"
	garbledRules = "domain: rules\ndescriptors: [\n"
)

// ruleBreak is a way the rule directory goes bad.
type ruleBreak struct {
	name string
	// breakRules spoils dir.
	breakRules func(t *testing.T, dir string)
}

// replaceDir swaps dir for a directory holding files, in one rename, as a
// deployment does.
func replaceDir(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	next := dir + ".next"
	writeRules(t, next, files)
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, dir); err != nil {
		t.Fatal(err)
	}
}

// TestRuleDirectoryFailures: the rule directory is deleted or replaced by
// a broken set while floodgate serves. The last good rules stay in force
// (same version, same limits, counters kept), the refusal is logged at
// error level and counted, and the next good set is taken up by itself.
func TestRuleDirectoryFailures(t *testing.T) {
	for _, tc := range []ruleBreak{
		{"deleted", func(t *testing.T, dir string) {
			if err := os.RemoveAll(dir); err != nil {
				t.Fatal(err)
			}
		}},
		{"a broken file written over the good one", func(t *testing.T, dir string) {
			writeRules(t, dir, map[string]string{"rules.yaml": brokenRules})
		}},
		{"replaced by a broken set", func(t *testing.T, dir string) {
			replaceDir(t, dir, map[string]string{"rules.yaml": garbledRules, "more.yaml": brokenRules})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { testRuleBreak(t, tc) })
	}
}

func testRuleBreak(t *testing.T, tc ruleBreak) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "rules")
	writeRules(t, dir, map[string]string{"rules.yaml": goodRules})
	p := start(t, options{args: []string{"-config", dir}})
	// A fresh start is no reload: the counts below are the break's.
	reloads := func() float64 {
		return p.metric(`floodgate_rules_reloads_total{result="success"}`) + p.metric(`floodgate_rules_reloads_total{result="failure"}`)
	}
	if got := reloads(); got != 0 {
		t.Errorf("floodgate_rules_reloads_total on a fresh start: %v, want 0", got)
	}
	if got := summary(p.mustCall(request("rules", desc("user", "u")))); got != "OK OK:2" {
		t.Fatalf("good rules: %q", got)
	}
	before := reloads()
	failures := p.metric(`floodgate_rules_reloads_total{result="failure"}`)
	logged := len(p.Logs.String())

	tc.breakRules(t, dir)
	eventually(t, 5*time.Second, func() string {
		if reloads() == before {
			return "no reload after the rule directory was " + tc.name
		}
		return ""
	})
	// A few events may trail; let the watcher settle.
	time.Sleep(600 * time.Millisecond)
	if got := p.metric(`floodgate_rules_version`); got != 1 {
		t.Errorf("rules version %v after the directory was %s, want 1 (the last good rules)", got, tc.name)
	}
	if got := p.metric(`floodgate_rules_reloads_total{result="failure"}`); got <= failures {
		t.Errorf("refused reloads = %v, want more than %v", got, failures)
	}
	if got := summary(p.mustCall(request("rules", desc("user", "u")))); got != "OK OK:1" {
		t.Errorf("after the directory was %s: %q, want OK OK:1 (the last good rules, their counter kept)", tc.name, got)
	}
	logs := p.Logs.String()[logged:]
	if !strings.Contains(logs, "level=ERROR") || !strings.Contains(logs, "reload refused") {
		t.Errorf("no error-level log of the refused reload:\n%s", logs)
	}
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "version: 1") || strings.Contains(body, "last_error: none") {
		t.Errorf("/rlconfig does not show the refused reload over version 1:\n%s", body)
	}

	// A good set comes back: taken up, and the counter carries over.
	replaceDir(t, dir, map[string]string{"rules.yaml": betterRules})
	eventually(t, 5*time.Second, func() string {
		if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "version: 2") || !strings.Contains(body, "last_error: none") {
			return fmt.Sprintf("the good set is not in force:\n%s", body)
		}
		return ""
	})
	if got := summary(p.mustCall(request("rules", desc("user", "u")))); got != "OK OK:7" {
		t.Errorf("after a good set came back: %q, want OK OK:7 (10 per day, 3 hits)", got)
	}
	if !regexp.MustCompile(`level=INFO msg="rules: loaded again after refused reloads" path=\S+ refused=[1-9]\d* version=2 changed=true`).MatchString(p.Logs.String()) {
		t.Errorf("no line says the rules are back in force:\n%s", p.Logs.String()[logged:])
	}
	checkNoCrash(t, p)
}
