package examples_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/settings"
)

// repoRoot is the module root, relative to this package's directory.
const repoRoot = ".."

// tempRoot holds what the tests share across the package (the demo's
// binary).
var tempRoot string

// TestMain makes tempRoot, and removes it and the binary the harness
// builds when the tests end.
func TestMain(m *testing.M) {
	var err error
	tempRoot, err = os.MkdirTemp("", "floodgate-examples-")
	if err != nil {
		panic(err)
	}
	code := harness.Main(m)
	os.RemoveAll(tempRoot)
	os.Exit(code)
}

// floodgateBinary returns the server binary, built once per test run by
// the harness (harness.Binary).
func floodgateBinary(t testing.TB) string {
	t.Helper()
	return harness.Binary(t)
}

// binaryFlag is one flag of the binary as its -h prints it.
type binaryFlag struct {
	def     string
	boolean bool // printed without a value type
}

// binaryFlags returns every flag of the binary, as its -h prints them:
// settings.PrintFlags writes them, in this process, so that the checks of
// command lines need no binary.
func binaryFlags(t testing.TB) map[string]binaryFlag {
	t.Helper()
	var out bytes.Buffer
	settings.PrintFlags(&out)
	flags := map[string]binaryFlag{}
	var name string
	nameRE := regexp.MustCompile(`^  -([a-z-]+)( [a-z]+)?$`)
	defRE := regexp.MustCompile(`\(default "?([^")]*)"?\)$`)
	for _, line := range strings.Split(out.String(), "\n") {
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
		t.Fatalf("could not read the flags from floodgate -h:\n%s", out.String())
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
	*harness.Floodgate
	// Dir is the working directory; its config/ is a copy of the
	// repository's rules, which the test may edit.
	Dir string
}

// startFloodgate runs the binary in a fresh directory holding a copy of
// config/, on free local ports, with extra flags (e.g. -redis), in this
// process's environment, and waits until /healthcheck answers OK
// (harness.Start). It is stopped with SIGTERM when the test ends.
func startFloodgate(t testing.TB, extra ...string) *floodgateProc {
	t.Helper()
	p := &floodgateProc{Dir: t.TempDir()}
	copyDir(t, filepath.Join(repoRoot, "config"), filepath.Join(p.Dir, "config"))
	args := append([]string{"-config", "config", "-log-format", "json"}, extra...)
	p.Floodgate = harness.Start(t, harness.Options{Args: args, Env: os.Environ(), Dir: p.Dir})
	// Before the harness's kill, which then finds the process gone.
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process with SIGTERM, as Kubernetes and Docker do, and
// fails the test when it does not exit cleanly.
func (p *floodgateProc) stop(t testing.TB) {
	if p.Exited() {
		return
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Errorf("%v", err)
		return
	}
	code, err := p.Wait(20 * time.Second)
	switch {
	case err != nil:
		t.Errorf("floodgate did not stop within 20s of SIGTERM:\n%s", p.Logs)
	case code != 0:
		t.Errorf("floodgate exited with %v after SIGTERM:\n%s", p.State(), p.Logs)
	}
}

// postJSON sends a RateLimitRequest to /json and returns the status and body.
func (p *floodgateProc) postJSON(ctx context.Context, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.HTTPAddr+"/json", bytes.NewReader(body))
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

// runFloodgate runs the binary to completion (e.g. -check) in dir, in this
// process's environment, and returns its combined output and exit code.
func runFloodgate(t testing.TB, dir string, args ...string) (string, int) {
	t.Helper()
	return harness.Run(t, harness.Options{Args: args, Env: os.Environ(), Dir: dir})
}
