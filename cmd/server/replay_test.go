package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
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

	replayOnPath(t)
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

// replayOnPath builds cmd/replay as replayProgram into a directory that
// PATH then starts with, for the test's `floodgate replay`.
func replayOnPath(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	if err := harness.BuildCommand(context.Background(), "./cmd/replay", filepath.Join(dir, replayProgram)); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// TestReplayRunsItsProgram: `floodgate replay` runs floodgate-replay with
// its arguments, standard input and output, and exits with its code; with
// no such program it says how to get one.
func TestReplayRunsItsProgram(t *testing.T) {
	path := os.Getenv("PATH")
	t.Setenv("PATH", t.TempDir())
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", "-h"}, envOf(), &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "replay is the floodgate-replay program, found neither next to floodgate nor on PATH") ||
		!strings.Contains(stderr.String(), "go run ./cmd/replay") {
		t.Errorf("without the program: exit %d, stderr %q; want 1 and how to build it", code, stderr.String())
	}

	t.Setenv("PATH", path)
	replayOnPath(t)
	rules := writeRules(t, userRules3)
	stdin, err := os.CreateTemp(t.TempDir(), "traffic")
	if err != nil {
		t.Fatal(err)
	}
	stdin.WriteString(`{"time":"2026-01-01T00:00:00Z","domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}` + "\n")
	stdin.Seek(0, 0)
	defer func(saved *os.File) { os.Stdin = saved }(os.Stdin)
	os.Stdin = stdin
	for _, tt := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"-old", rules, "-new", rules, "-traffic", "-"}, 0, "Replayed 1 request", ""},
		{[]string{"-old", rules}, 2, "", "-old, -new and -traffic are required"},
	} {
		stdout.Reset()
		stderr.Reset()
		code := run(context.Background(), append([]string{"replay"}, tt.args...), envOf(), &stdout, &stderr)
		if code != tt.code || !strings.Contains(stdout.String(), tt.stdout) || !strings.Contains(stderr.String(), tt.errs) {
			t.Errorf("replay %q: exit %d, stdout %q, stderr %q; want %d, %q and %q", tt.args, code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.errs)
		}
	}
}
