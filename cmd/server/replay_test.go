package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/buildinfo"
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

	stdout, stderr, code := runBinary(t, harness.Binary(t), nil, "replay", "-old", oldDir, "-new", newDir, "-traffic", traffic, "-format", "json")
	if code != 0 {
		t.Fatalf("replay exit %d:\n%s", code, stderr)
	}
	var rep struct {
		Requests int
		Old, New struct{ Allowed, Denied int }
		Changed  struct{ Total int }
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v:\n%s", err, stdout)
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

// TestMain removes the binaries harness.Binary builds.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
}

// runBinary runs bin with args and stdin (nil: none), with this test's
// environment, and returns its stdout, stderr and exit code.
func runBinary(t *testing.T, bin string, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &stdout, &stderr
	err := cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return stdout.String(), stderr.String(), exit.ExitCode()
	}
	if err != nil {
		t.Fatalf("%s %q: %v", bin, args, err)
	}
	return stdout.String(), stderr.String(), 0
}

// TestReplayRunsItsProgram: `floodgate replay` becomes floodgate-replay,
// found next to floodgate or on PATH: the same process (its signals and
// exit status the replay's), its arguments, streams, and the garbage
// collector's settings of the server; with no such program it says how to
// get one.
func TestReplayRunsItsProgram(t *testing.T) {
	bin := harness.Binary(t)
	rules := writeRules(t, userRules3)
	line := `{"time":"2026-01-01T00:00:00Z","domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}` + "\n"
	stdout, stderr, code := runBinary(t, bin, strings.NewReader(line), "replay", "-old", rules, "-new", rules, "-traffic", "-")
	if code != 0 || !strings.Contains(stdout, "Replayed 1 request") {
		t.Errorf("replay of stdin: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if _, stderr, code := runBinary(t, bin, nil, "replay", "-old", rules); code != 2 || !strings.Contains(stderr, "-old, -new and -traffic are required") {
		t.Errorf("replay -old alone: exit %d, stderr %q; want 2 and the replay's message", code, stderr)
	}

	// The process becomes the replay (so signals reach it, and its exit
	// status is this process's), with the server's GOGC; Ctrl-C ends it
	// though its input is held open.
	cmd := exec.Command(bin, "replay", "-old", rules, "-new", rules, "-traffic", "-")
	cmd.Env = append(os.Environ(), buildinfo.ParentEnv+"=v0.0.1 commit stale go1.0") // replaced, not kept
	in, err := cmd.StdinPipe()                                                       // held open: the replay waits for its input
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	replayErr := &testlog.Buffer{}
	cmd.Stderr = replayErr
	p, err := harness.StartProcess("floodgate replay", cmd)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(0)
	became := func(context.Context) error {
		if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid())); filepath.Base(target) != replayProgram {
			return fmt.Errorf("process %d runs %q, not %s", p.Pid(), target, replayProgram)
		}
		return nil
	}
	if err := harness.WaitReady(context.Background(), p, 30*time.Second, became); err != nil {
		t.Fatal(err)
	}
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", p.Pid()))
	if want := fmt.Sprintf("GOGC=%d\x00", defaultGOGC); err != nil || os.Getenv("GOGC") == "" && !bytes.Contains(environ, []byte(want)) {
		t.Errorf("the replay's environment lacks the server's %q (%v)", want, err)
	}
	build, _, _ := runBinary(t, bin, nil, "-version")
	build = strings.TrimPrefix(strings.TrimSpace(build), "floodgate ")
	if want := buildinfo.ParentEnv + "=" + build + "\x00"; !bytes.Contains(environ, []byte(want)) || bytes.Contains(environ, []byte("commit stale")) {
		t.Errorf("the replay's environment lacks floodgate's build %q, or keeps the one floodgate was given", want)
	}
	// Signalled once it reads stdin, past main's signal handling.
	if err := harness.WaitReady(context.Background(), p, 30*time.Second, readsStdin(p.Pid())); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code, err := p.Wait(30 * time.Second); err != nil || code != 1 || !strings.Contains(replayErr.String(), "interrupted before the end of the traffic") {
		t.Errorf("Ctrl-C while stdin is open: exit %d (%v), stderr %q; want 1 and the interruption named", code, err, replayErr)
	}

	// No program next to floodgate nor on PATH; then one on PATH, past a
	// file next to floodgate that cannot run.
	alone := t.TempDir()
	copyFile(t, bin, filepath.Join(alone, "floodgate"), 0o755)
	t.Setenv("PATH", t.TempDir())
	if _, stderr, code := runBinary(t, filepath.Join(alone, "floodgate"), nil, "replay", "-h"); code != 1 ||
		!strings.Contains(stderr, "replay is the floodgate-replay program, found neither next to floodgate nor on PATH") ||
		!strings.Contains(stderr, "go build -o "+filepath.Join(alone, replayProgram)) {
		t.Errorf("without the program: exit %d, stderr %q; want 1 and how to build it", code, stderr)
	}
	copyFile(t, filepath.Join(filepath.Dir(bin), replayProgram), filepath.Join(alone, replayProgram), 0o644)
	t.Setenv("PATH", filepath.Dir(bin))
	if stdout, stderr, code := runBinary(t, filepath.Join(alone, "floodgate"), nil, "replay", "-h"); code != 0 || !strings.Contains(stdout, "Usage: floodgate replay") {
		t.Errorf("with a program on PATH and one next to floodgate that cannot run: exit %d, stderr %q", code, stderr)
	}
}

// readsStdin reports, as WaitReady's check, whether a thread of process
// pid waits in read(2) on file descriptor 0 (Linux's /proc).
func readsStdin(pid int) func(context.Context) error {
	return func(context.Context) error {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/syscall", pid))
		for _, task := range tasks {
			if b, err := os.ReadFile(task); err == nil && strings.HasPrefix(string(b), fmt.Sprintf("%d 0x0 ", syscall.SYS_READ)) {
				return nil
			}
		}
		return fmt.Errorf("no thread of process %d reads stdin", pid)
	}
}

// copyFile copies src to dst with mode perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, perm); err != nil {
		t.Fatal(err)
	}
}
