package examples_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// shellEnv runs README commands with the test's addresses.
type shellEnv struct {
	t     *testing.T
	dir   string
	bin   string // floodgateBinary
	path  string // first on the PATH: bin as floodgate
	addrs map[string]string
}

// newShellEnv runs the README's commands in dir, as from the repository's
// root: examples/ there is the repository's (a link), for go -C examples
// tool grpcurl, and floodgate on the PATH is the binary, as make build and
// the README's export make it.
func newShellEnv(t *testing.T, dir string, addrs map[string]string) *shellEnv {
	e := &shellEnv{t: t, dir: dir, bin: floodgateBinary(t), path: t.TempDir(), addrs: addrs}
	examples, err := filepath.Abs(filepath.Join(repoRoot, "examples"))
	if err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{filepath.Join(dir, "examples"): examples, filepath.Join(e.path, "floodgate"): e.bin} {
		if err := os.Symlink(target, link); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// runBlock runs the shell commands of a block and compares their output;
// it returns the number of commands run. A block whose output is only HTTP
// status codes depends on how fast its requests go: when it does not match,
// it is run again once the per-second limits it touched have refilled (a
// bucket of 20 refilling 10 per second is full again after 2 s).
func (e *shellEnv) runBlock(b readmeBlock) int {
	e.t.Helper()
	ran := 0
	for try := 0; ; try++ {
		var problems []string
		ran = 0
		for _, c := range b.cmds {
			if classify(c.text) != kindShell {
				continue
			}
			ran++
			started := time.Now()
			out, err := e.run(c.text)
			took := time.Since(started)
			if err != nil {
				problems = append(problems, fmt.Sprintf("README.md:%d: %s: %v\n%s", c.line, c.text, err, out))
				continue
			}
			if c.want == nil {
				continue
			}
			if !sameOutput(out, c.want) && !refilledDuring(out, c.want, took) {
				problems = append(problems, fmt.Sprintf("README.md:%d: %s\nprints:\n%s\nthe README says:\n%s",
					c.line, c.text, compactJSONLines(out), strings.Join(c.want, "\n")))
			}
		}
		if len(problems) == 0 {
			return ran
		}
		if try < 2 && b.onlyStatusCodes() {
			e.t.Logf("README.md:%d: output differs, running the block again after its limits refill:\n%s", b.line, strings.Join(problems, "\n"))
			time.Sleep(3 * time.Second)
			continue
		}
		for _, p := range problems {
			e.t.Error(p)
		}
		return ran
	}
}

// demoRefillPerSecond is how fast the demo's per-address bucket refills
// (config/demo.yaml: 10 per second, a burst of 20).
const demoRefillPerSecond = 10

// refilledDuring reports whether out, lines of HTTP status codes, is the
// README's want but for requests refused there that passed here, no more
// of them than the demo's bucket refilled while the command ran (took): on
// a busy machine a burst takes long enough to earn a token or two back.
func refilledDuring(out string, want []string, took time.Duration) bool {
	got := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(got) != len(want) {
		return false
	}
	earned := int(took.Seconds()*demoRefillPerSecond) + 1
	for i := range got {
		g, w := strings.Fields(got[i]), strings.Fields(want[i])
		if len(g) != len(w) || !statusCodesRE.MatchString(strings.TrimSpace(want[i])) {
			return false
		}
		for j := range g {
			switch {
			case g[j] == w[j]:
			case g[j] == "200" && earned > 0:
				earned--
			default:
				return false
			}
		}
	}
	return true
}

var statusCodesRE = regexp.MustCompile(`^(\d{3} ?)+$`)

// onlyStatusCodes reports whether every output line of the block is a list
// of HTTP status codes.
func (b readmeBlock) onlyStatusCodes() bool {
	any := false
	for _, c := range b.cmds {
		for _, l := range c.want {
			if !statusCodesRE.MatchString(strings.TrimSpace(l)) {
				return false
			}
			any = true
		}
	}
	return any
}

// run runs one command in bash, in the server's directory, with the
// README's addresses replaced by the test's, go run by the binary, and
// the binary first on the PATH as floodgate.
func (e *shellEnv) run(cmd string) (string, error) {
	var unknown []string
	script := localAddrRE.ReplaceAllStringFunc(cmd, func(a string) string {
		a = strings.Replace(a, "127.0.0.1", "localhost", 1)
		if r, ok := e.addrs[a]; ok {
			return r
		}
		unknown = append(unknown, a)
		return a
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("uses %v, which no part of the demo serves in the tests", unknown)
	}
	script = strings.ReplaceAll(script, goRunServer, e.bin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script)
	c.Dir = e.dir
	c.Env = append(os.Environ(), "PATH="+e.path+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	return strings.ReplaceAll(out.String(), e.bin, goRunServer), err
}

var (
	grpcurlOnce sync.Once
	grpcurlErr  error
)

// buildGrpcurl has the go command build grpcurl, this module's tool, once
// per test run, as the README's first go -C examples tool grpcurl would:
// the README's grpcurl commands then run as written, through grpcurl's own
// flags, reflection client and output format, without waiting for a
// build while a server runs.
func buildGrpcurl(t testing.TB) {
	t.Helper()
	goBin := harness.Require(t, "go")
	grpcurlOnce.Do(func() {
		out, err := exec.Command(goBin, "-C", filepath.Join(repoRoot, "examples"), "tool", "grpcurl", "-version").CombinedOutput()
		if err != nil {
			grpcurlErr = fmt.Errorf("go tool grpcurl: %v\n%s", err, out)
		}
	})
	if grpcurlErr != nil {
		t.Fatal(grpcurlErr)
	}
}

// brokenGrpcurlCommands are edits of the README's grpcurl call that
// grpcurl must refuse, with what it says.
var brokenGrpcurlCommands = []struct {
	name, old, new, want string
}{
	{"a method the service lacks", "/ShouldRateLimit", "/ShouldRateLimt", "does not include a method named \"ShouldRateLimt\""},
	{"a field the request lacks", `"domain":`, `"domian":`, "has no known field named domian"},
	{"TLS to a plaintext port", "tool grpcurl -plaintext ", "tool grpcurl ", "first record does not look like a TLS handshake"},
}

// grpcurlRefusesBrokenCopies runs broken copies of the README's grpcurl
// calls (those with -d), which grpcurl must refuse: proof that running
// them checks something.
func (e *shellEnv) grpcurlRefusesBrokenCopies(blocks []readmeBlock) {
	e.t.Helper()
	n := 0
	for _, bl := range blocks {
		for _, c := range bl.cmds {
			if !strings.HasPrefix(c.text, readmeGrpcurl+" ") || !strings.Contains(c.text, " -d ") {
				continue
			}
			n++
			for _, b := range brokenGrpcurlCommands {
				if !strings.Contains(c.text, b.old) {
					e.t.Fatalf("README.md:%d: %s: no %q to break", c.line, c.text, b.old)
				}
				cmd := strings.Replace(c.text, b.old, b.new, 1)
				out, err := e.run(cmd)
				if err == nil || !strings.Contains(out, b.want) {
					e.t.Errorf("%s: %s: %v, want a failure mentioning %q:\n%s", b.name, cmd, err, b.want, out)
					continue
				}
				e.t.Logf("%s: grpcurl says: %s", b.name, strings.TrimSpace(out))
			}
		}
	}
	if n == 0 {
		e.t.Error("the README has no grpcurl call with -d")
	}
}

// sameOutput compares what a command printed with what the README shows:
// line by line as normalizeOutput makes them, or, when the README shows
// one JSON value over several lines (grpcurl's output), as JSON values.
func sameOutput(out string, want []string) bool {
	shown := strings.Join(want, "\n")
	if len(want) > 1 && strings.HasPrefix(shown, "{") {
		var w, g any
		if json.Unmarshal([]byte(shown), &w) == nil {
			return json.Unmarshal([]byte(out), &g) == nil && reflect.DeepEqual(scrub(g), scrub(w))
		}
	}
	return slices.Equal(normalizeOutput(out), normalizeOutput(shown))
}

// timeRE finds the timestamps, which change from run to run.
var (
	timeRE = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
)

// normalizeOutput splits output into lines without trailing blanks, with
// JSON objects re-encoded canonically (protojson varies its spacing) and
// the values that change from run to run (durations until reset,
// timestamps) replaced by placeholders.
func normalizeOutput(s string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(strings.TrimRight(s, "\n")))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// curl -D prints headers with CRLF.
		l := strings.TrimRight(sc.Text(), " \t\r")
		if strings.HasPrefix(l, "{") {
			dec := json.NewDecoder(strings.NewReader(l))
			var v any
			if err := dec.Decode(&v); err == nil {
				var b bytes.Buffer
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				enc.Encode(scrub(v))
				l = strings.TrimSuffix(b.String(), "\n") + l[dec.InputOffset():]
			}
		}
		out = append(out, timeRE.ReplaceAllString(l, "<time>"))
	}
	return out
}

// compactJSONLines removes the spacing protojson varies from the JSON
// objects of output, keeping their key order, so that the output can be
// pasted into the README.
func compactJSONLines(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(l))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			continue
		}
		var b bytes.Buffer
		if json.Compact(&b, raw) == nil {
			lines[i] = b.String() + l[dec.InputOffset():]
		}
	}
	return strings.Join(lines, "\n")
}

// scrub replaces durationUntilReset values, which depend on when a
// command runs.
func scrub(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "durationUntilReset" {
				x[k] = "<duration>"
				continue
			}
			x[k] = scrub(e)
		}
	case []any:
		for i := range x {
			x[i] = scrub(x[i])
		}
	}
	return v
}
