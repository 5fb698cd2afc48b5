package examples_test

import (
	"bufio"
	"debug/elf"
	"encoding/json"
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
)

// dockerfile is a parsed Dockerfile: its instructions, by stage.
type dockerfile struct {
	stages []*dockerStage
}

type dockerStage struct {
	from, name string
	instrs     []dockerInstr
}

type dockerInstr struct {
	cmd  string // upper case
	args string
	line int
}

// parseDockerfile reads instructions, joining continuation lines and
// dropping comments.
func parseDockerfile(p string) (*dockerfile, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	df := &dockerfile{}
	sc := bufio.NewScanner(f)
	var cur strings.Builder
	start, n := 0, 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = n
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		cur.Reset()
		in := dockerInstr{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args), line: start}
		if in.cmd == "FROM" {
			fields := strings.Fields(in.args)
			st := &dockerStage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			df.stages = append(df.stages, st)
			continue
		}
		if len(df.stages) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			return nil, fmt.Errorf("%s:%d: %s before FROM", p, start, in.cmd)
		}
		st := df.stages[len(df.stages)-1]
		st.instrs = append(st.instrs, in)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(df.stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM", p)
	}
	return df, nil
}

func (s *dockerStage) all(cmd string) []dockerInstr {
	var out []dockerInstr
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// last returns the last instruction cmd of the stage, as Docker applies it.
func (s *dockerStage) last(cmd string) (dockerInstr, bool) {
	all := s.all(cmd)
	if len(all) == 0 {
		return dockerInstr{}, false
	}
	return all[len(all)-1], true
}

// goBuild returns the RUN command that builds the server and the output
// path it names.
func (df *dockerfile) goBuild() (cmd, out string, err error) {
	outRE := regexp.MustCompile(`-o\s+(\S+)`)
	for _, st := range df.stages {
		for _, in := range st.all("RUN") {
			if strings.Contains(in.args, "go build") && strings.Contains(in.args, "./cmd/server") {
				m := outRE.FindStringSubmatch(in.args)
				if m == nil {
					return "", "", fmt.Errorf("Dockerfile:%d: go build without -o", in.line)
				}
				return in.args, m[1], nil
			}
		}
	}
	return "", "", fmt.Errorf("Dockerfile: no RUN go build ... ./cmd/server")
}

// execForm parses a JSON exec form such as ["a", "b"].
func execForm(t *testing.T, in dockerInstr) []string {
	t.Helper()
	var v []string
	if err := json.Unmarshal([]byte(in.args), &v); err != nil {
		t.Fatalf("Dockerfile:%d: %s %s: want the exec form [\"...\"] (signals reach the process only then): %v", in.line, in.cmd, in.args, err)
	}
	return v
}

// smallBases are final images with nothing but what a static binary needs.
var smallBases = regexp.MustCompile(`^(scratch|gcr\.io/distroless/static(-debian\d+)?(:[a-z0-9.-]+)?)$`)

func TestDockerfile(t *testing.T) {
	df, err := parseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if len(df.stages) < 2 {
		t.Fatalf("want a multi-stage build, found %d stage", len(df.stages))
	}
	final := df.stages[len(df.stages)-1]

	t.Run("static binary", func(t *testing.T) {
		cmd, _, err := df.goBuild()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(cmd, "CGO_ENABLED=0") {
			t.Errorf("the build command does not set CGO_ENABLED=0: %s", cmd)
		}
		f, err := elf.Open(floodgateBinary(t))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
				t.Errorf("the binary built by the Dockerfile's command is dynamically linked (%v): it cannot run on %s", p.Type, final.from)
			}
		}
	})

	t.Run("small final image", func(t *testing.T) {
		if !smallBases.MatchString(final.from) {
			t.Errorf("final stage FROM %s: want scratch or a distroless static image", final.from)
		}
		if final.all("RUN") != nil {
			t.Errorf("the final stage runs commands; a static image has no shell")
		}
	})

	t.Run("non-root user", func(t *testing.T) {
		u, ok := final.last("USER")
		if !ok {
			t.Fatal("the final stage sets no USER: the server would run as root")
		}
		user, _, _ := strings.Cut(u.args, ":")
		if user == "0" || user == "root" || user == "" {
			t.Errorf("Dockerfile:%d: USER %s is root", u.line, u.args)
		}
		if !regexp.MustCompile(`^\d+$`).MatchString(user) {
			// Kubernetes' runAsNonRoot can only verify a numeric user.
			t.Errorf("Dockerfile:%d: USER %s: want a numeric uid", u.line, u.args)
		}
	})

	t.Run("exposed ports are the ones the server opens to the network", func(t *testing.T) {
		var exposed []string
		for _, in := range final.all("EXPOSE") {
			exposed = append(exposed, strings.Fields(in.args)...)
		}
		// The addresses the image's command line listens on (the flags'
		// defaults unless it sets them). A listener on loopback cannot be
		// reached from outside the container: exposing its port would
		// promise what it does not do.
		var args []string
		if ep, ok := final.last("ENTRYPOINT"); ok {
			args = append(args, execForm(t, ep)[1:]...)
		}
		if cmd, ok := final.last("CMD"); ok {
			args = append(args, execForm(t, cmd)...)
		}
		addrs := floodgateFlags(t, args)
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
	_, out, _ := df.goBuild()
	var binDests []string
	copies := map[string]string{} // destination -> source in the context
	for _, in := range final.all("COPY") {
		f := strings.Fields(in.args)
		src, dst := f[len(f)-2], f[len(f)-1]
		if strings.HasPrefix(f[0], "--from=") {
			if src == out {
				binDests = append(binDests, dst)
			}
			continue
		}
		copies[dst] = src
	}
	context, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	imageEnv := map[string]string{}
	for _, in := range final.all("ENV") {
		k, v, ok := strings.Cut(in.args, "=")
		if !ok || strings.ContainsAny(k, " \t") {
			t.Fatalf("Dockerfile:%d: ENV %s: want the KEY=value form", in.line, in.args)
		}
		imageEnv[k] = strings.Trim(v, `"`)
	}
	// imageRun runs the image's command line (its ENTRYPOINT, CMD and
	// ENV, the image's paths mapped back to the build context) with more
	// arguments and variables, and returns what it prints and its exit code.
	imageRun := func(t *testing.T, more []string, env ...string) (string, int) {
		t.Helper()
		ep, ok := final.last("ENTRYPOINT")
		if !ok {
			t.Fatal("no ENTRYPOINT")
		}
		args := execForm(t, ep)[1:]
		if cmd, ok := final.last("CMD"); ok {
			args = append(args, execForm(t, cmd)...)
		}
		args = append(mapPaths(args, copies, context), more...)
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
		ep, ok := final.last("ENTRYPOINT")
		if !ok {
			t.Fatal("no ENTRYPOINT")
		}
		if entry := execForm(t, ep); !slices.Contains(binDests, entry[0]) {
			t.Errorf("ENTRYPOINT %v does not run the binary copied to %v", entry, binDests)
		}
		// The image alone serves its demo rules.
		text, code := imageRun(t, []string{"-check"})
		if code != 0 || !strings.Contains(text, "domain demo") {
			t.Errorf("the image's command line with -check exits %d, want 0 and the demo rules:\n%s", code, text)
		}
	})

	t.Run("a drop-in for the reference server's image", func(t *testing.T) {
		// Manifests written for envoyproxy/ratelimit run /bin/ratelimit.
		if !slices.Contains(binDests, "/bin/ratelimit") {
			t.Errorf("/bin/ratelimit is not the built binary (copies of %s: %v)", out, binDests)
		}
		// A flag in CMD would win over RUNTIME_ROOT and the like: the
		// reference's variables must decide.
		if cmd, ok := final.last("CMD"); ok {
			for _, a := range execForm(t, cmd) {
				if strings.HasPrefix(a, "-") {
					t.Errorf("Dockerfile:%d: CMD passes %s, which would win over the reference server's variables", cmd.line, a)
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
		ignore := readDockerignore(t, filepath.Join(repoRoot, ".dockerignore"))
		var need []string
		for _, st := range df.stages {
			for _, in := range st.all("COPY") {
				f := strings.Fields(in.args)
				if strings.HasPrefix(f[0], "--from=") {
					continue
				}
				for _, src := range f[:len(f)-1] {
					if src != "." {
						need = append(need, path.Clean(src))
					}
				}
			}
		}
		// Every Go file the server is built from.
		list := exec.Command("go", "list", "-deps", "-f", `{{if not .Standard}}{{.Dir}}{{end}}`, "./cmd/server")
		list.Dir = repoRoot
		out, err := list.Output()
		if err != nil {
			t.Fatalf("go list: %v", err)
		}
		abs, _ := filepath.Abs(repoRoot)
		for _, dir := range strings.Fields(string(out)) {
			if rel, err := filepath.Rel(abs, dir); err == nil && !strings.HasPrefix(rel, "..") {
				need = append(need, filepath.ToSlash(rel)+"/x.go")
			}
		}
		for _, p := range need {
			if pat := ignore.excludes(p); pat != "" {
				t.Errorf(".dockerignore pattern %q excludes %s, which the build needs", pat, p)
			}
		}
		// And what must stay out: the repository and local binaries.
		for _, p := range []string{".git/config", "server", "bin/floodgate"} {
			if ignore.excludes(p) == "" {
				t.Errorf(".dockerignore lets %s into the build context", p)
			}
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

// dockerignore is a parsed .dockerignore, in Docker's matching rules:
// paths relative to the context root, * and ? within a path element, **
// across elements, a match on a directory excluding what is below.
type dockerignore struct {
	patterns []string
	res      []*regexp.Regexp
}

func readDockerignore(t *testing.T, p string) *dockerignore {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	di := &dockerignore{}
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			t.Fatalf(".dockerignore: exceptions (%s) are not modelled by this test", line)
		}
		pat := strings.TrimPrefix(path.Clean(line), "/")
		var re strings.Builder
		re.WriteString("^")
		for i := 0; i < len(pat); i++ {
			switch c := pat[i]; {
			case strings.HasPrefix(pat[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(pat[i:], "**"):
				re.WriteString(".*")
				i++
			case c == '*':
				re.WriteString("[^/]*")
			case c == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(string(c)))
			}
		}
		re.WriteString("$")
		di.patterns = append(di.patterns, line)
		di.res = append(di.res, regexp.MustCompile(re.String()))
	}
	return di
}

// excludes returns the pattern that keeps p (or a directory above it) out
// of the context, or "".
func (di *dockerignore) excludes(p string) string {
	for q := p; q != "." && q != "/"; q = path.Dir(q) {
		for i, re := range di.res {
			if re.MatchString(q) {
				return di.patterns[i]
			}
		}
	}
	return ""
}
