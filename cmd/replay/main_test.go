package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/buildinfo"
)

// writeRules writes one rule file into a new directory and returns it.
func writeRules(t *testing.T, yaml string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const (
	userRules3 = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n"
	userRules1 = "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
)

func TestReplayCommandErrors(t *testing.T) {
	good := writeRules(t, userRules3)
	traffic := filepath.Join(t.TempDir(), "t.jsonl")
	os.WriteFile(traffic, []byte(`{"time":"2026-01-01T00:00:00Z","domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`+"\n"+"oops\n"), 0o644)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"-old", good}, 2, "-old, -new and -traffic are required"},
		{[]string{"-old", good, "-new", good, "-traffic", traffic, "-format", "pdf"}, 2, `-format "pdf": want text, json or html`},
		{[]string{"-old", good, "-new", good, "-traffic", traffic, "extra"}, 2, "unexpected arguments"},
		{[]string{"-old", good, "-new", writeRules(t, "domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n"), "-traffic", traffic}, 1, "(-new)"},
		{[]string{"-old", good, "-new", good, "-traffic", traffic + ".missing"}, 1, "-traffic: open"},
		{[]string{"-old", good, "-new", good, "-traffic", traffic}, 1, "line 2: not a JSON object of traffic"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tt.args, &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("replay %q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}

// TestReplayCommandNothingOrTruncated: traffic with no request is a
// warning and exit code 3 (the report still written, saying so), never a
// silent "no change"; an incomplete last line is skipped with a warning
// and the rest replayed.
func TestReplayCommandNothingOrTruncated(t *testing.T) {
	rules := writeRules(t, userRules3)
	const line = `{"time":"2026-01-01T00:00:00Z","domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`
	for _, tt := range []struct {
		name, traffic string
		code          int
		stdout        []string
		stderr        []string
	}{
		{"empty", "", 3, []string{"No request replayed: the traffic holds none"}, []string{"no request replayed", "exit_code=3"}},
		{"only skipped lines", `{"start_time":"2026-01-01T00:00:00Z","ratelimit":null}` + "\n", 3,
			[]string{"No request replayed", "1 access-log line without rate-limit metadata skipped"}, []string{"no request replayed"}},
		{"only refused requests", `{"time":"2026-01-01T00:00:00Z","domain":"","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}` + "\n" + `{"time":"2026-01-01T00:00:01Z","domain":"rl","descriptors":[]}` + "\n", 3,
			[]string{"Replayed 2 requests", "refused as invalid: 2 old, 2 new"}, []string{"no request decided", "exit_code=3"}},
		{"truncated last line", line + "\n" + line[:30], 0,
			[]string{"Replayed 1 request from 2026-01-01T00:00:00Z to 2026-01-01T00:00:00Z", "an incomplete last line skipped", "Busiest counters (1 seen;"},
			[]string{"has no newline and is not JSON", "requests=1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			traffic := filepath.Join(t.TempDir(), "t.jsonl")
			if err := os.WriteFile(traffic, []byte(tt.traffic), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"-old", rules, "-new", rules, "-traffic", traffic}, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tt.code, stderr.String())
			}
			for _, w := range tt.stdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("report lacks %q:\n%s", w, stdout.String())
				}
			}
			for _, w := range tt.stderr {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

// TestReplayCommandSeveralFiles: -traffic given several times, or as a
// glob, replays the files merged by time, as one file sorted; a file out
// of order beyond -reorder stops the replay with exit code 1, naming the
// file and line and saying what to do; a file given twice or a glob
// matching nothing is refused.
func TestReplayCommandSeveralFiles(t *testing.T) {
	oldDir, newDir := writeRules(t, userRules3), writeRules(t, userRules1)
	dir := t.TempDir()
	line := func(sec int, user string) string {
		return `{"time":"2026-01-01T00:00:` + fmt.Sprintf("%02d", sec) + `.000000Z","domain":"rl","descriptors":[{"entries":[{"key":"user","value":"` + user + `"}]}]}` + "\n"
	}
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(strings.Join(lines, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Replica a saw alice at 0 s and 2 s, replica b at 1 s and 3 s; one
	// file holds both, out of order.
	a := write("a.jsonl", line(0, "alice"), line(2, "alice"))
	b := write("b.jsonl", line(1, "alice"), line(3, "alice"))
	sorted := write("sorted.txt", line(0, "alice"), line(1, "alice"), line(2, "alice"), line(3, "alice"))
	both := write("both.txt", line(0, "alice"), line(2, "alice"), line(1, "alice"), line(3, "alice"))
	replay := func(args ...string) (string, string, int) {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"-old", oldDir, "-new", newDir, "-format", "json"}, args...), &stdout, &stderr)
		return stdout.String(), stderr.String(), code
	}
	want, stderr, code := replay("-traffic", sorted)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, stderr)
	}
	// What differs is where the requests came from: the files, and how
	// many were put back in order.
	strip := regexp.MustCompile(`(?s)"reordered": \d+,\n\s*"traffic": \[.*?\],\n\s*`)
	for _, args := range [][]string{
		{"-traffic", a, "-traffic", b},
		{"-traffic", filepath.Join(dir, "*.jsonl")},
		{"-traffic", both},
	} {
		got, stderr, code := replay(args...)
		if code != 0 || strip.ReplaceAllString(got, "") != strip.ReplaceAllString(want, "") {
			t.Errorf("replay %q: exit %d, report\n%s\nwant as the sorted file's\n%s\n%s", args, code, got, want, stderr)
		}
	}
	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"-traffic", both, "-reorder", "1"}, 1, []string{
			"both.txt: line 3 (2026-01-01T00:00:01.000000Z) is older than line 2 (2026-01-01T00:00:02.000000Z)",
			"give each capture as its own -traffic, since they are merged by time", "LC_ALL=C sort -o FILE FILE", "raise -reorder"}},
		{[]string{"-traffic", a, "-traffic", a}, 1, []string{"a.jsonl: given twice"}},
		{[]string{"-traffic", filepath.Join(dir, "*.none")}, 1, []string{"*.none: matches no file"}},
		{[]string{"-traffic", a, "-reorder", "0"}, 2, []string{"-reorder 0: want at least 1"}},
	} {
		_, stderr, code := replay(tt.args...)
		for _, w := range tt.want {
			if code != tt.code || !strings.Contains(stderr, w) {
				t.Errorf("replay %q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, w)
			}
		}
	}
}

// TestReplayHelp: `floodgate replay -h` prints the text users know, held in
// testdata/replay-help.golden (taken from the binary before the command
// moved into internal/replay, then into a program of its own).
func TestReplayHelp(t *testing.T) {
	want, err := os.ReadFile("testdata/replay-help.golden")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("replay -h: exit %d, stderr %q", code, stderr.String())
	}
	if got := stdout.String() + stderr.String(); got != string(want) {
		os.WriteFile("testdata/replay-help.got", []byte(got), 0o644)
		t.Errorf("replay -h differs from testdata/replay-help.golden (written to testdata/replay-help.got)")
	}
}

func TestOtherBuild(t *testing.T) {
	const a, b = "v1.2.3 commit 0123abc go1.26.8", "v1.2.4 commit 4567def go1.26.8"
	for _, tc := range []struct {
		parent, own string
		want        bool
	}{
		{a, a, false},
		{a, b, true},
		{"v1.2.3 commit 0123abc go1.25.0", a, false}, // another toolchain, the same source
		{"(devel) commit 4567def+dirty go1.26.8", a, false},
		{a, "(devel) commit 4567def+dirty go1.26.8", false},
		{"", a, false}, // not run by floodgate
		{"(devel) commit unknown go1.26.8", a, false},
		{a, "(devel) commit unknown go1.26.8", false},
	} {
		if got := otherBuild(tc.parent, tc.own); got != tc.want {
			t.Errorf("otherBuild(%q, %q) = %v, want %v", tc.parent, tc.own, got, tc.want)
		}
	}
}

// TestWarnsOfAnotherBuild: built with a stamped version, as the image
// builds it, the program warns when floodgate's build, in its environment,
// is another one, and not when it is its own.
func TestWarnsOfAnotherBuild(t *testing.T) {
	bin := buildProgram(t)
	own := "v9.9.9 commit 0123abc " + runtime.Version()
	for _, tc := range []struct {
		parent string
		warns  bool
	}{
		{"v9.9.8 commit 4567def go1.0", true},
		{own, false},
		{"v9.9.9 commit 0123abc go1.0", false},
		{"", false},
	} {
		cmd := exec.Command(bin, "-h")
		cmd.Env = append(os.Environ(), buildinfo.ParentEnv+"="+tc.parent)
		out, err := cmd.CombinedOutput()
		if warned := strings.Contains(string(out), "another build than the floodgate that runs it"); err != nil || warned != tc.warns {
			t.Errorf("run by floodgate %q: warned %v (%v), want %v:\n%s", tc.parent, warned, err, tc.warns, out)
		}
	}
}

// buildProgram builds this program with the version v9.9.9 and the
// commit 0123abc stamped, as the image stamps it, and returns its path.
func buildProgram(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "floodgate-replay")
	const pkg = "github.com/floodgate/floodgate/internal/buildinfo"
	build := exec.Command("go", "build", "-ldflags", "-X "+pkg+".stampedVersion=v9.9.9 -X "+pkg+".stampedCommit=0123abc", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestSecondSignalEndsTheReport: while the report is being written (here
// to a pipe nobody reads any more), the first SIGINT cannot stop it; the
// next one ends the process.
func TestSecondSignalEndsTheReport(t *testing.T) {
	bin := buildProgram(t)
	var traffic strings.Builder
	for i := range 5000 {
		fmt.Fprintf(&traffic, `{"time":"2026-01-01T00:00:%02d.%06dZ","domain":"rl","descriptors":[{"entries":[{"key":"user","value":"u%d"}]}]}`+"\n", i/100%60, i, i)
	}
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(path, []byte(traffic.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rules := writeRules(t, userRules1)
	cmd := exec.Command(bin, "-old", rules, "-new", rules, "-traffic", path, "-format", "html", "-top", "5000") // a report of about 800 KB
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if _, err := out.Read(make([]byte, 1)); err != nil { // the report has begun
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGINT {
				t.Errorf("the replay ended with %v, want killed by SIGINT", err)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("SIGINT after SIGINT, the replay still writes its report")
		}
	}
}
