package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/envoytest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// The README's commands are in fenced blocks:
//
//   - ```sh blocks hold commands whose output is not shown;
//   - ```console blocks hold "$ command" lines, each followed by what it
//     prints.
//
// TestReadmeCommands runs them in order against the real binary, with the
// real Envoy in front running examples/envoy*.yaml, and compares what they
// print. Commands that need Docker or Kubernetes are checked against the
// files they use.

// readmeCommand is one command of the README and what it prints.
type readmeCommand struct {
	line int
	text string
	// want is the expected output, one element per line; nil in sh blocks.
	want []string
}

type readmeBlock struct {
	line    int
	lang    string
	section string
	cmds    []readmeCommand
}

// parseReadme reads the sh and console blocks of a Markdown file
// (readMarkdown).
func parseReadme(t testing.TB, path string) []readmeBlock {
	t.Helper()
	var blocks []readmeBlock
	for _, mb := range readMarkdown(t, path).blocks {
		if mb.lang != "sh" && mb.lang != "console" {
			continue
		}
		b := readmeBlock{line: mb.line, lang: mb.lang, section: mb.section}
		lines := mb.lines
		for i := 0; i < len(lines); i++ {
			l := lines[i]
			switch {
			case b.lang == "sh":
				if strings.TrimSpace(l) == "" || strings.HasPrefix(strings.TrimSpace(l), "#") {
					continue
				}
				c := readmeCommand{line: mb.line + 1 + i}
				c.text, i = joinContinued(lines, i)
				c.text = stripComment(c.text)
				b.cmds = append(b.cmds, c)
			case strings.HasPrefix(l, "$ "):
				c := readmeCommand{line: mb.line + 1 + i, want: []string{}}
				lines[i] = strings.TrimPrefix(l, "$ ")
				c.text, i = joinContinued(lines, i)
				b.cmds = append(b.cmds, c)
			case len(b.cmds) == 0:
				t.Fatalf("%s:%d: output before any $ command", path, mb.line+1+i)
			default:
				last := &b.cmds[len(b.cmds)-1]
				last.want = append(last.want, l)
			}
		}
		blocks = append(blocks, b)
	}
	return blocks
}

// stripComment drops a trailing shell comment (a # after a blank, outside
// quotes).
func stripComment(cmd string) string {
	var quote rune
	for i, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && i > 0 && (cmd[i-1] == ' ' || cmd[i-1] == '\t'):
			return strings.TrimRight(cmd[:i], " \t")
		}
	}
	return cmd
}

// joinContinued joins a command continued with trailing backslashes.
func joinContinued(lines []string, i int) (string, int) {
	var b strings.Builder
	for {
		l := lines[i]
		if !strings.HasSuffix(l, "\\") {
			b.WriteString(l)
			return b.String(), i
		}
		b.WriteString(strings.TrimSuffix(l, "\\"))
		b.WriteString(" ")
		i++
	}
}

// goRunServer is how the README runs the server; the tests run the binary
// the Dockerfile builds instead.
const goRunServer = "go run ./cmd/server"

// goRunReplay is how the README runs floodgate replay's program
// (cmd/replay); the tests run the binary harness.Binary builds next to
// the server's.
const goRunReplay = "go run ./cmd/replay"

// serverCommands are the ways the README runs floodgate: go run, or the
// binary that make build writes, on the PATH as floodgate.
var serverCommands = []string{goRunServer, "floodgate"}

// floodgateArgs returns the arguments of a command that runs floodgate.
func floodgateArgs(cmd string) ([]string, bool) {
	for _, c := range serverCommands {
		if cmd == c || strings.HasPrefix(cmd, c+" ") {
			return strings.Fields(strings.TrimPrefix(cmd, c)), true
		}
	}
	return nil, false
}

// readmeGrpcurl is how the README runs grpcurl: the examples module's tool
// (go.mod's tool directive), with nothing to install.
const readmeGrpcurl = "go -C examples tool grpcurl"

// The README's addresses and what serves them in the tests.
const (
	readmeHTTP     = "localhost:8080"
	readmeGRPC     = "localhost:8081"
	readmeEnvoy    = "localhost:10000"
	readmeEnvoyTCP = "localhost:10001"
)

var localAddrRE = regexp.MustCompile(`(localhost|127\.0\.0\.1):\d+`)

// commandKind says how a README command is checked.
type commandKind int

const (
	// kindShell runs in bash against the test's server and Envoys.
	kindShell commandKind = iota
	// kindServer starts the server: the test starts it instead.
	kindServer
	// kindStructural needs Docker, Kubernetes or a long test run: it is
	// checked against the files it uses.
	kindStructural
)

func classify(cmd string) commandKind {
	fields := strings.Fields(cmd)
	args, ok := floodgateArgs(cmd)
	switch {
	case ok && !slices.ContainsFunc(args, isCommand):
		return kindServer
	case len(fields) > 0 && (fields[0] == "docker" || fields[0] == "kubectl" || fields[0] == "kind" || fields[0] == "make" || fields[0] == "helm"):
		return kindStructural
	}
	return kindShell
}

// isCommand reports whether a floodgate argument makes it do something
// else than serve, and exit.
func isCommand(arg string) bool {
	switch strings.TrimLeft(arg, "-") {
	case "check", "explain", "version", "h", "help", "replay", "counters":
		return true
	}
	return false
}

func TestReadmeCommands(t *testing.T) {
	blocks := parseReadme(t, filepath.Join(repoRoot, "README.md"))
	var n int
	for _, b := range blocks {
		n += len(b.cmds)
	}
	if n == 0 {
		t.Fatal("README.md has no sh or console block")
	}

	// The first five minutes: the server, then what to ask it, all without
	// Docker; the tests in a section of their own.
	t.Run("quick start", func(t *testing.T) {
		var cmds, dev []string
		for _, b := range blocks {
			for _, c := range b.cmds {
				switch b.section {
				case "Quick start":
					cmds = append(cmds, c.text)
					if classify(c.text) == kindStructural {
						t.Errorf("README.md:%d: %s: the quick start needs no Docker, Kubernetes or make", c.line, c.text)
					}
				case "Developing":
					dev = append(dev, c.text)
				}
			}
		}
		if len(cmds) == 0 || cmds[0] != goRunServer {
			t.Fatalf("the Quick start commands are %q: want %q first", cmds, goRunServer)
		}
		quick := strings.Join(cmds, "\n")
		for _, want := range []string{readmeHTTP + "/json", readmeHTTP + "/rlconfig", readmeHTTP + "/metrics", readmeGrpcurl + " -plaintext localhost:8081 list", "/ShouldRateLimit"} {
			if !strings.Contains(quick, want) {
				t.Errorf("the Quick start has no command with %s", want)
			}
		}
		if !slices.Contains(dev, "make test") {
			t.Errorf("the Developing commands are %q: want make test", dev)
		}
	})

	t.Run("commands checked against files", func(t *testing.T) {
		c := loadCompose(t)
		for _, b := range blocks {
			for _, cmd := range b.cmds {
				switch classify(cmd.text) {
				case kindStructural:
					if err := checkStructural(t, c, cmd.text); err != nil {
						t.Errorf("README.md:%d: %s: %v", cmd.line, cmd.text, err)
					}
				case kindServer:
					// Only flags, which the binary knows.
					args, _ := floodgateArgs(cmd.text)
					floodgateFlags(t, args)
				}
			}
		}
	})

	// As docker-compose.yml runs it: counters in Redis.
	t.Run("with docker compose", func(t *testing.T) {
		redis := redistest.Start(t)
		runReadme(t, blocks, "-redis", redis.Addr)
	})

	// As the quick start runs it: go run ./cmd/server, counters in memory.
	t.Run("without docker", func(t *testing.T) {
		runReadme(t, blocks)
	})
}

// runReadme runs the blocks in order against a fresh server started with
// the README's own server flags plus extra, with the real Envoy in front
// running examples/envoy.yaml and examples/envoy-tcp.yaml as shipped.
func runReadme(t *testing.T, blocks []readmeBlock, extra ...string) {
	harness.Require(t, "curl")
	harness.Require(t, "bash")
	// Built before any server starts, so that no command waits for it.
	buildGrpcurl(t)
	// The server as the quick start runs it.
	var serverArgs []string
	for _, b := range blocks {
		for _, c := range b.cmds {
			if b.section == "Quick start" && classify(c.text) == kindServer {
				serverArgs, _ = floodgateArgs(c.text)
			}
		}
	}
	p := startFloodgate(t, append(serverArgs, extra...)...)
	backend := startBackend(t)
	httpEnvoy := startExample(t, envoyHTTPFile, p.GRPCAddr, backend)
	tcpEnvoy := startExample(t, envoyTCPFile, p.GRPCAddr, backend)
	env := newShellEnv(t, p.Dir, map[string]string{
		readmeHTTP:     p.HTTPAddr,
		readmeGRPC:     p.GRPCAddr,
		readmeEnvoy:    httpEnvoy.Listener("http"),
		readmeEnvoyTCP: tcpEnvoy.Listener("tcp"),
	})
	ran := 0
	for _, b := range blocks {
		ran += env.runBlock(b)
	}
	if ran == 0 {
		t.Error("no README command ran")
	}
	env.grpcurlRefusesBrokenCopies(blocks)
	// Envoy's health check found floodgate, and every call got floodgate's
	// answer in time: none failed open, which would have let through what
	// the README shows refused.
	for _, e := range []struct {
		envoy  *envoytest.Envoy
		prefix string
	}{{httpEnvoy, "cluster.backend.ratelimit."}, {tcpEnvoy, "ratelimit.tcp_demo."}} {
		if h, err := e.envoy.HostHealth("floodgate"); err != nil || len(h) != 1 || h[p.GRPCAddr] != "healthy" {
			t.Errorf("Envoy's view of the floodgate cluster: %v %v, want %s healthy", h, err, p.GRPCAddr)
		}
		stats, err := e.envoy.Counters(e.prefix)
		if err != nil {
			t.Fatal(err)
		}
		if stats[e.prefix+"error"] != 0 || stats[e.prefix+"over_limit"] == 0 {
			t.Errorf("Envoy's %s* counters: %v: want over_limit answers and no error", e.prefix, stats)
		}
	}
	if t.Failed() {
		t.Logf("floodgate's log:\n%s", p.Logs)
	}
}

// checkStructural checks a command that cannot run here against the files
// it names.
func checkStructural(t *testing.T, c compose, cmd string) error {
	f := strings.Fields(cmd)
	switch f[0] {
	case "make":
		data, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
		if err != nil {
			return err
		}
		for _, target := range f[1:] {
			if v, _, ok := strings.Cut(target, "="); ok {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(v) + ` *[?:]?=`).Match(data) {
					return fmt.Errorf("the Makefile sets no variable %q", v)
				}
				continue
			}
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:`).Match(data) {
				return fmt.Errorf("the Makefile has no target %q", target)
			}
		}
		return nil
	case "docker":
		if len(f) > 1 && f[1] == "compose" {
			return composeCommand(c, f)
		}
		if len(f) > 1 && f[1] == "build" {
			tag := flagValue(f, "-t")
			if tag != c.Services["floodgate"].Image {
				return fmt.Errorf("builds %q; docker-compose.yml's floodgate image is %q", tag, c.Services["floodgate"].Image)
			}
			if _, err := os.Stat(filepath.Join(repoRoot, f[len(f)-1], "Dockerfile")); err != nil {
				return err
			}
			return nil
		}
	case "helm":
		// TestHelm renders the chart; here, that the command names it.
		if len(f) >= 4 && f[1] == "install" {
			if _, err := os.Stat(filepath.Join(repoRoot, f[3], "Chart.yaml")); err != nil {
				return err
			}
			return nil
		}
	case "kind":
		if len(f) == 4 && f[1] == "load" && f[2] == "docker-image" {
			if img := kubernetesImage(t); f[3] != img {
				return fmt.Errorf("loads %q, the Deployment runs %q", f[3], img)
			}
			return nil
		}
	case "kubectl":
		if len(f) >= 4 && f[1] == "apply" && (f[2] == "-k" || f[2] == "-f") {
			dir := filepath.Join(repoRoot, f[3])
			want := "kustomization.yaml"
			if f[2] == "-f" {
				want = ""
			}
			if _, err := os.Stat(filepath.Join(dir, want)); err != nil {
				return err
			}
			return nil
		}
		if len(f) >= 2 && (f[1] == "get" || f[1] == "logs" || f[1] == "port-forward" || f[1] == "rollout" || f[1] == "-n") {
			return checkKubectlNames(t, f)
		}
	}
	return fmt.Errorf("no check for this command: run it in a test or .ci/run")
}

// flagValue returns the value after name in args.
func flagValue(args []string, name string) string {
	if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
		return args[i+1]
	}
	return ""
}
