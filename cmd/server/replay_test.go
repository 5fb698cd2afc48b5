package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/testlog"
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

// TestCaptureThenReplayCommand: a server run with -capture records what it
// serves (over /json here), and `floodgate replay` of that file finds
// what the server answered, and what an edit would change.
func TestCaptureThenReplayCommand(t *testing.T) {
	oldDir, newDir := writeRules(t, userRules3), writeRules(t, userRules1)
	traffic := filepath.Join(t.TempDir(), "traffic.jsonl")
	logs := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-config", oldDir, "-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", "",
			"-capture", traffic}, envOf(), io.Discard, logs)
	}()
	serving := regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)`)
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the server did not start:\n%s", logs)
		}
		m = serving.FindStringSubmatch(logs.String())
	}
	// Within one minute (unless the test straddles one, in which case the
	// live answers below say so and the replay must agree all the same):
	// alice 4 times, bob once.
	var live []string
	for _, u := range []string{"alice", "alice", "alice", "alice", "bob"} {
		live = append(live, get(t, "POST", "http://"+m[2]+"/json", `{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"`+u+`"}]}]}`))
	}
	liveDenied := 0
	for _, a := range live {
		if strings.Contains(a, `"overallCode":"OVER_LIMIT"`) {
			liveDenied++
		}
	}
	if metrics := get(t, "GET", "http://"+m[2]+"/metrics", ""); !strings.Contains(metrics, `floodgate_capture_lines_total{outcome="dropped"} 0`) {
		t.Errorf("/metrics lacks the capture's counts")
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d:\n%s", code, logs)
	}
	if !strings.Contains(logs.String(), "written=5") {
		t.Errorf("the server does not log the 5 lines written:\n%s", logs)
	}

	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "-old", oldDir, "-new", newDir, "-traffic", traffic, "-format", "json"},
		envOf(), &stdout, &stderr); code != 0 {
		t.Fatalf("replay exit %d:\n%s", code, stderr.String())
	}
	var rep struct {
		Requests int
		Old, New struct{ Allowed, Denied int }
		Changed  struct{ Total int }
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout.String())
	}
	if rep.Requests != 5 || rep.Old.Denied != liveDenied || rep.Old.Allowed != 5-liveDenied {
		t.Errorf("replay of the old rules: %+v; the server denied %d of 5", rep, liveDenied)
	}
	// At 1 a minute, when all five fell in one minute: alice 1 of 4, bob 1.
	if liveDenied == 1 && (rep.New.Allowed != 2 || rep.New.Denied != 3 || rep.Changed.Total != 2) {
		t.Errorf("replay of the new rules: %+v; want 2 allowed, 3 denied, 2 changed", rep)
	}
}

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
		code := run(context.Background(), append([]string{"replay"}, tt.args...), envOf(), &stdout, &stderr)
		if code != tt.code || !strings.Contains(stderr.String(), tt.want) {
			t.Errorf("replay %q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr.String(), tt.code, tt.want)
		}
	}
}

func TestCaptureFlagErrors(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-capture-sample", "0.5"}, "need -capture"},
		{[]string{"-capture", "x", "-capture-sample", "2"}, "-capture-sample 2: want a share in (0, 1]"},
		{[]string{"-capture", "x", "-capture-max-bytes", "-1"}, "-capture-max-bytes -1: must not be negative"},
	} {
		if _, err := settings.Load(tt.args, envOf()); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: got %v, want %q", tt.args, err, tt.want)
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
			code := run(context.Background(), []string{"replay", "-old", rules, "-new", rules, "-traffic", traffic}, envOf(), &stdout, &stderr)
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
		code := run(context.Background(), append([]string{"replay", "-old", oldDir, "-new", newDir, "-format", "json"}, args...), envOf(), &stdout, &stderr)
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
// moved into internal/replay).
func TestReplayHelp(t *testing.T) {
	want, err := os.ReadFile("testdata/replay-help.golden")
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "-h"}, envOf(), &stdout, &stderr); code != 0 {
		t.Fatalf("replay -h: exit %d, stderr %q", code, stderr.String())
	}
	if got := stdout.String() + stderr.String(); got != string(want) {
		os.WriteFile("testdata/replay-help.got", []byte(got), 0o644)
		t.Errorf("replay -h differs from testdata/replay-help.golden (written to testdata/replay-help.got)")
	}
}
