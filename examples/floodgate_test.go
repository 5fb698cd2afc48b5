package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/floodgate/floodgate/internal/testlog"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// repoRoot is the module root, relative to this package's directory.
const repoRoot = ".."

// tempRoot holds what the tests share across the package (the binary).
var tempRoot string

func TestMain(m *testing.M) {
	var err error
	tempRoot, err = os.MkdirTemp("", "floodgate-examples-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(tempRoot)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// floodgateBinary returns the server binary, built once per test run by the
// Dockerfile's own build command, so that the image's binary is the one the
// examples are checked against.
func floodgateBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
		if err != nil {
			buildErr = err
			return
		}
		cmd, out, err := df.goBuild()
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(tempRoot, "floodgate")
		script := strings.Replace(cmd, out, buildPath, 1)
		c := exec.Command("sh", "-c", script)
		c.Dir = repoRoot
		// The build arguments Docker passes are empty outside buildx: the
		// host's platform.
		c.Env = append(os.Environ(), "TARGETOS=", "TARGETARCH=")
		if b, err := c.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("the Dockerfile's build command failed: %s: %v\n%s", script, err, b)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// binaryFlag is one flag of the binary as its -h prints it.
type binaryFlag struct {
	def     string
	boolean bool // printed without a value type
}

// binaryFlags returns every flag of the binary, as its -h prints them.
func binaryFlags(t testing.TB) map[string]binaryFlag {
	t.Helper()
	out, _ := exec.Command(floodgateBinary(t), "-h").CombinedOutput()
	flags := map[string]binaryFlag{}
	var name string
	nameRE := regexp.MustCompile(`^  -([a-z-]+)( [a-z]+)?$`)
	defRE := regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := nameRE.FindStringSubmatch(line); m != nil {
			name = m[1]
			flags[name] = binaryFlag{boolean: m[2] == ""}
			continue
		}
		if m := defRE.FindStringSubmatch(line); m != nil && name != "" {
			f := flags[name]
			f.def = m[1]
			flags[name] = f
		}
	}
	if len(flags) < 10 {
		t.Fatalf("could not read the flags from floodgate -h:\n%s", out)
	}
	return flags
}

// flagDefaults returns the default value of every flag of the binary.
func flagDefaults(t testing.TB) map[string]string {
	t.Helper()
	defaults := map[string]string{}
	for name, f := range binaryFlags(t) {
		defaults[name] = f.def
	}
	return defaults
}

// copyDir copies the regular files of a directory tree.
func copyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// floodgateProc is a running floodgate process.
type floodgateProc struct {
	// Dir is the working directory; its config/ is a copy of the
	// repository's rules, which the test may edit.
	Dir        string
	GRPC, HTTP string // listening addresses
	cmd        *exec.Cmd
	logs       *testlog.Buffer
}

// startFloodgate runs the binary in a fresh directory holding a copy of
// config/, on free local ports, with extra flags (e.g. -redis), and waits
// until /healthcheck answers OK. It is stopped with SIGTERM when the test
// ends.
func startFloodgate(t testing.TB, extra ...string) *floodgateProc {
	t.Helper()
	p := &floodgateProc{Dir: t.TempDir(), logs: &testlog.Buffer{}}
	copyDir(t, filepath.Join(repoRoot, "config"), filepath.Join(p.Dir, "config"))
	args := append([]string{"-config", "config",
		"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", "",
		"-log-format", "json"}, extra...)
	p.cmd = exec.Command(floodgateBinary(t), args...)
	p.cmd.Dir = p.Dir
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	addrs := make(chan [2]string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sent := false
		for sc.Scan() {
			line := sc.Bytes()
			p.logs.Write(append(line, '\n'))
			var rec struct{ Msg, GRPC, HTTP string }
			if !sent && json.Unmarshal(line, &rec) == nil && rec.Msg == "serving" {
				addrs <- [2]string{rec.GRPC, rec.HTTP}
				sent = true
			}
		}
		close(addrs)
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case a, ok := <-addrs:
		if !ok {
			p.cmd.Wait()
			t.Fatalf("floodgate %s exited before serving:\n%s", strings.Join(args, " "), p.logs)
		}
		p.GRPC, p.HTTP = a[0], a[1]
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate did not start within 30s:\n%s", p.logs)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + p.HTTP + "/healthcheck")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && string(body) == "OK" {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("floodgate /healthcheck not OK within 10s (%v):\n%s", err, p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process with SIGTERM, as Kubernetes and Docker do, and
// fails the test when it does not exit cleanly.
func (p *floodgateProc) stop(t testing.TB) {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("floodgate exited with %v after SIGTERM:\n%s", err, p.logs)
		}
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
		t.Errorf("floodgate did not stop within 20s of SIGTERM:\n%s", p.logs)
	}
}

// postJSON sends a RateLimitRequest to /json and returns the status and body.
func (p *floodgateProc) postJSON(ctx context.Context, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.HTTP+"/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// runFloodgate runs the binary to completion (e.g. -check) in dir and
// returns its combined output and exit code.
func runFloodgate(t testing.TB, dir string, args ...string) (string, int) {
	t.Helper()
	// Built first: the first call builds the binary, which the deadline
	// of the run is not for.
	bin := floodgateBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("floodgate %s: %v", strings.Join(args, " "), err)
	}
	return string(out), 0
}
