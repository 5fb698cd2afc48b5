package examples_test

import (
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/floodgate/floodgate/internal/harness"
)

// The Dockerfile is read by BuildKit's own parser and instructions
// packages, as `docker build` reads it; docker_context_test.go matches
// .dockerignore as the build context is made.

// dockerfile is a Dockerfile as BuildKit reads it: its stages, each with
// its typed instructions.
type dockerfile struct {
	stages []instructions.Stage
}

// parseDockerfile reads the Dockerfile at p; see parseDockerfileBytes.
func parseDockerfile(p string) (*dockerfile, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	df, err := parseDockerfileBytes(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return df, nil
}

// parseDockerfileBytes parses a Dockerfile with BuildKit's parser and
// turns its nodes into instructions, with BuildKit's linter on: a parse
// error, an instruction BuildKit refuses, or a warning of the parser or
// of the rules the linter checks while parsing (what `docker build
// --check` reports for them) is an error.
func parseDockerfileBytes(data []byte) (*dockerfile, error) {
	res, err := parser.Parse(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var warnings []string
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil {
			line = w.Location.Start.Line
		}
		warnings = append(warnings, fmt.Sprintf("line %d: %s", line, w.Short))
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, _, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		warnings = append(warnings, fmt.Sprintf("line %d: %s: %s", line, rule, msg))
	}})
	stages, _, err := instructions.Parse(res.AST, lint)
	if err != nil {
		return nil, err
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("BuildKit warns: %s", strings.Join(warnings, "; "))
	}
	if len(stages) == 0 {
		return nil, errors.New("no FROM")
	}
	return &dockerfile{stages: stages}, nil
}

// commands returns the instructions of type T (*instructions.CopyCommand,
// ...) of a stage, in order.
func commands[T instructions.Command](s instructions.Stage) []T {
	var out []T
	for _, c := range s.Commands {
		if v, ok := c.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// last returns the last instruction of type T of a stage, the one Docker
// applies.
func last[T instructions.Command](s instructions.Stage) (T, bool) {
	all := commands[T](s)
	if len(all) == 0 {
		var zero T
		return zero, false
	}
	return all[len(all)-1], true
}

// line is an instruction's first line in the Dockerfile.
func line(c instructions.Command) int {
	if loc := c.Location(); len(loc) > 0 {
		return loc[0].Start.Line
	}
	return 0
}

// goBuild returns the RUN command that builds the command in pkg
// ("./cmd/server") and the output path it names.
func (df *dockerfile) goBuild(pkg string) (cmd, out string, err error) {
	outRE := regexp.MustCompile(`-o\s+(\S+)`)
	for _, st := range df.stages {
		for _, run := range commands[*instructions.RunCommand](st) {
			script := strings.Join(run.CmdLine, " ")
			if !run.PrependShell || !strings.Contains(script, "go build") || !strings.HasSuffix(script, " "+pkg) {
				continue
			}
			m := outRE.FindStringSubmatch(script)
			if m == nil {
				return "", "", fmt.Errorf("Dockerfile:%d: go build without -o", line(run))
			}
			return script, m[1], nil
		}
	}
	return "", "", fmt.Errorf("Dockerfile: no RUN go build ... %s", pkg)
}

// buildWords returns the Dockerfile's build command as the shell runs it:
// the variables it sets ("CGO_ENABLED=0") and the go command's words, with
// the build arguments expanded as Docker passes them outside buildx
// (empty: the host's platform), and args ("VERSION=v1.2.3") as given.
func buildWords(script string, args ...string) (env, words []string, err error) {
	all, err := shell.NewLex('\\').ProcessWords(script, shell.EnvsFromSlice(append([]string{"TARGETOS=", "TARGETARCH="}, args...)))
	if err != nil {
		return nil, nil, fmt.Errorf("Dockerfile: the build command %q: %w", script, err)
	}
	for len(all) > 0 && strings.Contains(all[0], "=") {
		env, all = append(env, all[0]), all[1:]
	}
	return env, all, nil
}

// sameBuild reports how the Dockerfile's build command of pkg differs
// from the harness's, which builds the binaries every test runs
// (harness.Build): the same variables and flags, link flags and output
// aside; nil when they agree.
func sameBuild(script, pkg string) error {
	env, words, err := buildWords(script)
	if err != nil {
		return err
	}
	var flags []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		switch {
		case w == "-o" || w == "-ldflags":
			i++ // and its value
		case strings.HasPrefix(w, "-ldflags="):
		default:
			flags = append(flags, w)
		}
	}
	want := append(append([]string{"go", "build"}, harness.BuildFlags()...), pkg)
	var errs []error
	if !slices.Equal(flags, want) {
		errs = append(errs, fmt.Errorf("the Dockerfile builds with %q, the tests' binary with %q (internal/harness.BuildFlags): the tests would check another binary than the image's", flags, want))
	}
	for _, v := range harness.BuildEnv() {
		if !slices.Contains(env, v) {
			errs = append(errs, fmt.Errorf("the Dockerfile's build command does not set %s, which the tests' binary is built with (internal/harness.BuildEnv): %q", v, script))
		}
	}
	return errors.Join(errs...)
}

// stampedVersion builds floodgate as the harness does (and so the image),
// with the link flags ldflags, and returns what its -version prints.
func stampedVersion(t *testing.T, ldflags string) string {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "floodgate")
	args := append(append([]string{"build"}, harness.BuildFlags()...), "-ldflags", ldflags, "-o", bin, "./cmd/server")
	build := exec.Command("go", args...)
	build.Dir, build.Env = root, append(os.Environ(), harness.BuildEnv()...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -ldflags %q: %v\n%s", ldflags, err, out)
	}
	out, err := exec.Command(bin, "-version").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// linkFlags returns the -ldflags value of the build command script, with
// the build arguments args.
func linkFlags(t *testing.T, script string, args ...string) string {
	t.Helper()
	_, words, err := buildWords(script, args...)
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range words {
		if v, ok := strings.CutPrefix(w, "-ldflags="); ok {
			return v
		}
		if w == "-ldflags" && i+1 < len(words) {
			return words[i+1]
		}
	}
	return ""
}

// execForm returns the arguments of an ENTRYPOINT or CMD in the exec form
// ["a", "b"], and fails the test on the shell form, which runs the
// process under sh, where signals do not reach it.
func execForm(t *testing.T, c instructions.Command, cl instructions.ShellDependantCmdLine) []string {
	t.Helper()
	if cl.PrependShell {
		t.Fatalf("Dockerfile:%d: %s: want the exec form [\"...\"] (signals reach the process only then)", line(c), c.Name())
	}
	return cl.CmdLine
}

// smallBases are final images with nothing but what a static binary needs.
var smallBases = regexp.MustCompile(`^(scratch|gcr\.io/distroless/static(-debian\d+)?(:[a-z0-9.-]+)?)$`)

// brokenDockerfiles are edits of the Dockerfile that BuildKit refuses or
// warns about.
var brokenDockerfiles = []struct {
	name, old, new, want string
}{
	{"an unknown instruction", "EXPOSE 8080 8081", "EXPOSES 8080 8081", "unknown instruction: EXPOSES"},
	{"a flag COPY does not take", "COPY --from=build /out/floodgate /bin/ratelimit", "COPY --form=build /out/floodgate /bin/ratelimit", "unknown flag: --form"},
	{"FROM and AS in different cases", "AS build", "as build", "FromAsCasing"},
	{"an empty continuation line", "RUN go mod download", "RUN go mod \\\n\n download", "Empty continuation line"},
	{"ENV without a value", "ENV FLOODGATE_DEFAULT_CONFIG=/etc/floodgate/config", "ENV FLOODGATE_DEFAULT_CONFIG", "ENV must have two arguments"},
}

func TestDockerfile(t *testing.T) {
	dfPath := filepath.Join(repoRoot, "Dockerfile")
	df, err := parseDockerfile(dfPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(df.stages) < 2 {
		t.Fatalf("want a multi-stage build, found %d stage", len(df.stages))
	}
	final := df.stages[len(df.stages)-1]

	t.Run("BuildKit refuses broken copies", func(t *testing.T) {
		data, err := os.ReadFile(dfPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range brokenDockerfiles {
			if !bytes.Contains(data, []byte(b.old)) {
				t.Fatalf("%s: the Dockerfile has no %q to break", b.name, b.old)
			}
			_, err := parseDockerfileBytes(bytes.Replace(data, []byte(b.old), []byte(b.new), 1))
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: the Dockerfile with %q replaced by %q: %v, want an error with %q", b.name, b.old, b.new, err, b.want)
				continue
			}
			t.Logf("%s: %v", b.name, err)
		}
	})

	t.Run("the tests run the binary the image ships", func(t *testing.T) {
		cmd, _, err := df.goBuild("./cmd/server")
		if err != nil {
			t.Fatal(err)
		}
		if err := sameBuild(cmd, "./cmd/server"); err != nil {
			t.Error(err)
		}
		// And a changed flag is seen.
		for _, broken := range []string{
			strings.Replace(cmd, "CGO_ENABLED=0 ", "", 1),
			strings.Replace(cmd, "-tags timetzdata,vtprotobuf", "-tags timetzdata", 1),
			strings.Replace(cmd, "-trimpath ", "-race ", 1),
		} {
			if broken == cmd || sameBuild(broken, "./cmd/server") == nil {
				t.Errorf("a changed build command passes, or the Dockerfile's changed: %s", broken)
			}
		}
	})

	t.Run("static binary", func(t *testing.T) {
		f, err := elf.Open(floodgateBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("the binary, built as the Dockerfile builds it, is dynamically linked (%v): it cannot run on %s", p.Type, final.BaseName)
			}
		}
	})

	t.Run("answers encoded by generated code", func(t *testing.T) {
		// The vtprotobuf tag compiles go-control-plane's encoders, which
		// internal/server's codec uses; without it answers go by reflection.
		info, err := buildinfo.ReadFile(floodgateBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range info.Settings {
			if s.Key == "-tags" && slices.Contains(strings.Split(s.Value, ","), "vtprotobuf") {
				return
			}
		}
		t.Errorf("the binary, built as the Dockerfile builds it, lacks the vtprotobuf build tag (settings %v)", info.Settings)
	})

	t.Run("small final image", func(t *testing.T) {
		if !smallBases.MatchString(final.BaseName) {
			t.Errorf("final stage FROM %s: want scratch or a distroless static image", final.BaseName)
		}
		if commands[*instructions.RunCommand](final) != nil {
			t.Errorf("the final stage runs commands; a static image has no shell")
		}
	})

	t.Run("non-root user", func(t *testing.T) {
		u, ok := last[*instructions.UserCommand](final)
		if !ok {
			t.Fatal("the final stage sets no USER: the server would run as root")
		}
		user, _, _ := strings.Cut(u.User, ":")
		if user == "0" || user == "root" || user == "" {
			t.Errorf("Dockerfile:%d: USER %s is root", line(u), u.User)
		}
		if !regexp.MustCompile(`^\d+$`).MatchString(user) {
			// Kubernetes' runAsNonRoot can only verify a numeric user.
			t.Errorf("Dockerfile:%d: USER %s: want a numeric uid", line(u), u.User)
		}
	})

	// imageArgs is the image's command line after the program: its
	// ENTRYPOINT's arguments, then CMD.
	imageArgs := func(t *testing.T) []string {
		t.Helper()
		ep, ok := last[*instructions.EntrypointCommand](final)
		if !ok {
			t.Fatal("no ENTRYPOINT")
		}
		args := execForm(t, ep, ep.ShellDependantCmdLine)[1:]
		if cmd, ok := last[*instructions.CmdCommand](final); ok {
			args = append(args, execForm(t, cmd, cmd.ShellDependantCmdLine)...)
		}
		return args
	}

	t.Run("exposed ports are the ones the server opens to the network", func(t *testing.T) {
		var exposed []string
		for _, e := range commands[*instructions.ExposeCommand](final) {
			exposed = append(exposed, e.Ports...)
		}
		// The addresses the image's command line listens on (the flags'
		// defaults unless it sets them). A listener on loopback cannot be
		// reached from outside the container: exposing its port would
		// promise what it does not do.
		addrs := floodgateFlags(t, imageArgs(t))
		var want, loopback []string
		for _, f := range []string{"http-addr", "grpc-addr", "debug-addr"} {
			if addrs[f] == "" {
				continue // disabled
			}
			host, port, err := net.SplitHostPort(addrs[f])
			if err != nil {
				t.Fatalf("-%s %q: %v", f, addrs[f], err)
			}
			if isLoopback(host) {
				loopback = append(loopback, port)
				continue
			}
			want = append(want, port)
		}
		slices.Sort(exposed)
		slices.Sort(want)
		if !slices.Equal(exposed, want) {
			t.Errorf("EXPOSE %v, but the image's server listens beyond loopback on %v (on loopback only: %v)", exposed, want, loopback)
		}
	})

	// The binary's paths in the image, the context's copies by
	// destination, and the image's environment.
	serverCmd, out, _ := df.goBuild("./cmd/server")
	replayCmd, replayOut, replayErr := df.goBuild("./cmd/replay")
	var binDests, replayDests []string
	copies := map[string]string{} // destination -> source in the context
	for _, c := range commands[*instructions.CopyCommand](final) {
		for _, src := range c.SourcePaths {
			if c.From != "" {
				switch src {
				case out:
					binDests = append(binDests, c.DestPath)
				case replayOut:
					replayDests = append(replayDests, c.DestPath)
				}
				continue
			}
			copies[c.DestPath] = src
		}
	}
	context, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	// ENV values as BuildKit expands them (quotes removed, earlier
	// variables substituted).
	imageEnv := map[string]string{}
	lex := shell.NewLex('\\')
	for _, e := range commands[*instructions.EnvCommand](final) {
		for _, kv := range e.Env {
			var env []string
			for k, v := range imageEnv {
				env = append(env, k+"="+v)
			}
			v, _, err := lex.ProcessWord(kv.Value, shell.EnvsFromSlice(env))
			if err != nil {
				t.Fatalf("Dockerfile:%d: ENV %s: %v", line(e), kv.Key, err)
			}
			imageEnv[kv.Key] = v
		}
	}
	// imageRun runs the image's command line (its ENTRYPOINT, CMD and
	// ENV, the image's paths mapped back to the build context) with more
	// arguments and variables, and returns what it prints and its exit code.
	imageRun := func(t *testing.T, more []string, env ...string) (string, int) {
		t.Helper()
		args := append(mapPaths(imageArgs(t), copies, context), more...)
		c := exec.Command(floodgateBinary(t), args...)
		c.Dir = t.TempDir()
		c.Env = []string{"PATH=" + os.Getenv("PATH")}
		for k, v := range imageEnv {
			c.Env = append(c.Env, k+"="+mapPaths([]string{v}, copies, context)[0])
		}
		c.Env = append(c.Env, env...)
		b, err := c.CombinedOutput()
		code := 0
		if err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) {
				t.Fatalf("floodgate %s: %v", strings.Join(args, " "), err)
			}
			code = exit.ExitCode()
		}
		return string(b), code
	}

	t.Run("entrypoint runs the built binary with valid rules", func(t *testing.T) {
		if len(binDests) == 0 {
			t.Fatalf("the final stage does not copy the build's %s", out)
		}
		ep, ok := last[*instructions.EntrypointCommand](final)
		if !ok {
			t.Fatal("no ENTRYPOINT")
		}
		if entry := execForm(t, ep, ep.ShellDependantCmdLine); !slices.Contains(binDests, entry[0]) {
			t.Errorf("ENTRYPOINT %v does not run the binary copied to %v", entry, binDests)
		}
		// The image alone serves its demo rules.
		text, code := imageRun(t, []string{"-check"})
		if code != 0 || !strings.Contains(text, "domain demo") {
			t.Errorf("the image's command line with -check exits %d, want 0 and the demo rules:\n%s", code, text)
		}
	})

	t.Run("floodgate replay finds its program", func(t *testing.T) {
		// `floodgate replay` runs floodgate-replay from the directory of
		// the binary it was started as, or from PATH.
		if replayErr != nil {
			t.Fatal(replayErr)
		}
		if err := sameBuild(replayCmd, "./cmd/replay"); err != nil {
			t.Error(err)
		}
		// Stamped alike, so that the replay knows floodgate's build for
		// its own (internal/buildinfo), and the stamp takes: linked with
		// those flags, floodgate prints the version and commit given.
		stamp := []string{"VERSION=v1.2.3-stamp", "COMMIT=0123abc"}
		a, b := linkFlags(t, serverCmd, stamp...), linkFlags(t, replayCmd, stamp...)
		if a != b {
			t.Errorf("floodgate is linked with %q, floodgate-replay with %q: want the same", a, b)
		}
		if got := stampedVersion(t, a); !strings.HasPrefix(got, "floodgate v1.2.3-stamp commit 0123abc ") {
			t.Errorf("linked with the Dockerfile's %q, floodgate -version prints %q: the stamp does not take", a, got)
		}
		ep, ok := last[*instructions.EntrypointCommand](final)
		if !ok {
			t.Fatal("no ENTRYPOINT")
		}
		want := path.Join(path.Dir(execForm(t, ep, ep.ShellDependantCmdLine)[0]), harness.ReplayProgram)
		if !slices.Contains(replayDests, want) {
			t.Errorf("the final stage copies the build's %s to %v, not to %s, next to the ENTRYPOINT", replayOut, replayDests, want)
		}
	})

	t.Run("a drop-in for the reference server's image", func(t *testing.T) {
		// Manifests written for envoyproxy/ratelimit run /bin/ratelimit.
		if !slices.Contains(binDests, "/bin/ratelimit") {
			t.Errorf("/bin/ratelimit is not the built binary (copies of %s: %v)", out, binDests)
		}
		// A flag in CMD would win over RUNTIME_ROOT and the like: the
		// reference's variables must decide.
		if cmd, ok := last[*instructions.CmdCommand](final); ok {
			for _, a := range execForm(t, cmd, cmd.ShellDependantCmdLine) {
				if strings.HasPrefix(a, "-") {
					t.Errorf("Dockerfile:%d: CMD passes %s, which would win over the reference server's variables", line(cmd), a)
				}
			}
		}
		// With the reference's variables, their rules are served, not the
		// demo's.
		root := t.TempDir()
		dir := filepath.Join(root, "ratelimit", "config")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		rule := "domain: migrated\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
		if err := os.WriteFile(filepath.Join(dir, "r.yaml"), []byte(rule), 0o644); err != nil {
			t.Fatal(err)
		}
		text, code := imageRun(t, []string{"-check"}, "RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit")
		if code != 0 || !strings.Contains(text, "domain migrated") || strings.Contains(text, "domain demo") {
			t.Errorf("with RUNTIME_ROOT and RUNTIME_SUBDIRECTORY, the image's -check exits %d, want 0 and domain migrated only:\n%s", code, text)
		}
	})

	t.Run("build context keeps what the build needs", func(t *testing.T) {
		ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
		if err != nil {
			t.Fatal(err)
		}
		if err := checkBuildContext(df, ignore); err != nil {
			t.Fatal(err)
		}
		for _, b := range brokenDockerignores {
			if !bytes.Contains(ignore, []byte(b.old)) {
				t.Fatalf("%s: .dockerignore has no %q to break", b.name, b.old)
			}
			err := checkBuildContext(df, bytes.Replace(ignore, []byte(b.old), []byte(b.new), 1))
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: .dockerignore with %q replaced by %q: %v, want an error with %q", b.name, b.old, b.new, err, b.want)
				continue
			}
			t.Logf("%s: %v", b.name, err)
		}
	})
}

// isLoopback reports whether a listen address's host accepts connections
// from the local machine only: "localhost" or a loopback IP. An empty host
// listens on every interface.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// mapPaths rewrites arguments that are, or are below, a copied destination
// to the source in the build context.
func mapPaths(args []string, copies map[string]string, context string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = a
		for dst, src := range copies {
			if a == dst || strings.HasPrefix(a, dst+"/") {
				out[i] = filepath.Join(context, src, strings.TrimPrefix(a, dst))
			}
		}
	}
	return out
}
