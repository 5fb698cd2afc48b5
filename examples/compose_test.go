package examples_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"gopkg.in/yaml.v3"
)

// docker-compose.yml is loaded by compose-go, the loader of `docker
// compose`: its schema refuses unknown keys and wrong types, and its
// consistency checks refuse references to services that do not exist.

// composeFile is the demo's compose file, at the repository root.
const composeFile = "docker-compose.yml"

// loadComposeFile loads a compose file as `docker compose -f file
// --project-directory dir` does, without the process's environment.
func loadComposeFile(file, dir string) (*types.Project, error) {
	opts, err := cli.NewProjectOptions([]string{file}, cli.WithWorkingDirectory(dir), cli.WithResolvedPaths(true))
	if err != nil {
		return nil, err
	}
	return opts.LoadProject(context.Background())
}

// compose is the demo's project as compose-go loads it.
type compose struct {
	*types.Project
}

func loadCompose(t testing.TB) compose {
	t.Helper()
	p, err := loadComposeFile(filepath.Join(repoRoot, composeFile), repoRoot)
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return compose{p}
}

// service is one service of the project.
type service struct {
	types.ServiceConfig
	dir string // the project's directory, which bind mounts are relative to
}

func (c compose) service(name string) (service, bool) {
	s, ok := c.Services[name]
	return service{s, c.WorkingDir}, ok
}

// mounted returns the host path (relative to the project's directory)
// bind-mounted at a container path, or "".
func (s service) mounted(container string) string {
	for _, v := range s.Volumes {
		if v.Type == types.VolumeTypeBind && v.Target == container {
			rel, err := filepath.Rel(s.dir, v.Source)
			if err != nil {
				return v.Source
			}
			return rel
		}
	}
	return ""
}

// published returns the container ports the service publishes.
func (s service) published() []string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, strconv.Itoa(int(p.Target)))
	}
	return out
}

func (s service) dependsOn() []string {
	return slices.Sorted(maps.Keys(s.DependsOn))
}

// brokenComposeFiles are edits of docker-compose.yml that compose-go must
// refuse, with what its error says.
var brokenComposeFiles = []struct {
	name, old, new, want string
}{
	{"a key Compose does not know", "depends_on: [floodgate, backend]", "depend_on: [floodgate, backend]", "services.envoy.depend_on"},
	{"a dependency on no service", "depends_on: [floodgate, envoy]", "depends_on: [floodgate, envoi]", `depends on undefined service "envoi"`},
	{"a port that is not a number", `"127.0.0.1:9090:9090"`, `"127.0.0.1:9090:90x0"`, "invalid containerPort: 90x0"},
	{"a value of the wrong type", "retries: 15", "retries: fifteen", "services.redis.healthcheck.retries: failed to cast to expected type"},
}

// floodgateFlags parses a floodgate command line with the binary's flag
// names and defaults (from -h), so that the tests read the addresses the
// server would use.
func floodgateFlags(t testing.TB, args []string) map[string]string {
	t.Helper()
	fs := flag.NewFlagSet("floodgate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vals := map[string]*string{}
	for name, f := range binaryFlags(t) {
		if f.boolean {
			fs.Bool(name, f.def == "true", "")
			continue
		}
		vals[name] = fs.String(name, f.def, "")
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("floodgate %s: %v", strings.Join(args, " "), err)
	}
	out := map[string]string{}
	for name, v := range vals {
		out[name] = *v
	}
	return out
}

func port(t testing.TB, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

// envoyConfigPath is where the official Envoy image reads its config
// (its default command is envoy -c /etc/envoy/envoy.yaml).
const envoyConfigPath = "/etc/envoy/envoy.yaml"

// prometheusConfigPath is where the official Prometheus image reads its
// config.
const prometheusConfigPath = "/etc/prometheus/prometheus.yml"

func TestCompose(t *testing.T) {
	c := loadCompose(t)
	fg, ok := c.service("floodgate")
	if !ok {
		t.Fatal("no floodgate service")
	}
	fgFlags := floodgateFlags(t, fg.Command)
	fgHTTP, fgGRPC := port(t, fgFlags["http-addr"]), port(t, fgFlags["grpc-addr"])

	t.Run("compose-go refuses broken copies", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(repoRoot, composeFile))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range brokenComposeFiles {
			if !strings.Contains(string(data), b.old) {
				t.Fatalf("%s: %s has no %q to break", b.name, composeFile, b.old)
			}
			path := filepath.Join(t.TempDir(), composeFile)
			if err := os.WriteFile(path, []byte(strings.Replace(string(data), b.old, b.new, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := loadComposeFile(path, repoRoot)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: %s with %q replaced by %q: %v, want an error with %q", b.name, composeFile, b.old, b.new, err, b.want)
				continue
			}
			t.Logf("%s: compose-go says: %v", b.name, err)
		}
	})

	t.Run("every mounted path and build context exists", func(t *testing.T) {
		for name, s := range c.Services {
			for _, v := range s.Volumes {
				if _, err := os.Stat(v.Source); v.Type == types.VolumeTypeBind && err != nil {
					t.Errorf("service %s mounts %s: %v", name, v.Source, err)
				}
			}
			if s.Build != nil {
				if _, err := os.Stat(filepath.Join(s.Build.Context, s.Build.Dockerfile)); err != nil {
					t.Errorf("service %s builds %s: %v", name, s.Build.Context, err)
				}
			}
		}
	})

	t.Run("floodgate's command line passes -check", func(t *testing.T) {
		dir := fgFlags["config"]
		host := fg.mounted(dir)
		if host == "" {
			t.Fatalf("-config %s is not a mounted directory", dir)
		}
		if fi, err := os.Stat(filepath.Join(repoRoot, host)); err != nil || !fi.IsDir() {
			// A mounted file is not replaced when an editor swaps it, so
			// live edits would not be seen: mount the directory.
			t.Fatalf("-config %s is mounted from %s, which is not a directory (%v)", dir, host, err)
		}
		copies := map[string]string{}
		for _, v := range fg.Volumes {
			copies[v.Target] = v.Source
		}
		args := append(mapPaths(fg.Command, copies, ""), "-check")
		out, code := runFloodgate(t, ".", args...)
		if code != 0 || !strings.Contains(out, ": OK: ") {
			t.Errorf("floodgate %s exits %d:\n%s", strings.Join(args, " "), code, out)
		}
	})

	t.Run("floodgate publishes its ports and reaches redis", func(t *testing.T) {
		pub := fg.published()
		for _, p := range []string{fgHTTP, fgGRPC} {
			if !slices.Contains(pub, p) {
				t.Errorf("floodgate publishes %v, not its port %s", pub, p)
			}
		}
		// A published port must be one floodgate listens on beyond the
		// container's loopback (the debug listener's default), or Docker
		// forwards connections to nothing.
		reachable := map[string]bool{}
		for _, f := range []string{"http-addr", "grpc-addr", "debug-addr"} {
			if fgFlags[f] == "" {
				continue
			}
			host, p, err := net.SplitHostPort(fgFlags[f])
			if err != nil {
				t.Fatalf("-%s %q: %v", f, fgFlags[f], err)
			}
			if !isLoopback(host) {
				reachable[p] = true
			}
		}
		for _, p := range pub {
			if !reachable[p] {
				t.Errorf("floodgate publishes port %s, on which it listens only on the container's loopback or not at all", p)
			}
		}
		host, rport, err := net.SplitHostPort(fgFlags["redis"])
		if err != nil {
			t.Fatalf("-redis %q: want host:port: %v", fgFlags["redis"], err)
		}
		redis, ok := c.service(host)
		if !ok {
			t.Fatalf("-redis %s: no service %q", fgFlags["redis"], host)
		}
		want := "6379"
		if i := slices.Index(redis.Command, "--port"); i >= 0 {
			want = redis.Command[i+1]
		}
		if rport != want {
			t.Errorf("-redis port %s, redis listens on %s", rport, want)
		}
		if !slices.Contains(fg.dependsOn(), host) {
			t.Errorf("floodgate does not depend on %s", host)
		}
	})

	envoyMinor := envoyRelease(t)
	for _, e := range []struct{ service, file string }{
		{"envoy", envoyHTTPFile},
		{"envoy-tcp", envoyTCPFile},
	} {
		t.Run(e.service+" runs "+e.file+" and reaches its clusters", func(t *testing.T) {
			s, ok := c.service(e.service)
			if !ok {
				t.Fatalf("no %s service", e.service)
			}
			if got, want := filepath.Clean(s.mounted(envoyConfigPath)), filepath.Join("examples", e.file); got != want {
				t.Fatalf("%s mounts %s at %s, want %s", e.service, got, envoyConfigPath, want)
			}
			_, doc := readEnvoyConfig(t, e.file)
			ports := envoyListenerPorts(doc)
			pub := s.published()
			for _, p := range pub {
				if p != socketPort(doc["admin"]) && !slices.Contains(slices.Collect(maps.Values(ports)), p) {
					t.Errorf("%s publishes port %s, on which %s listens to nothing", e.service, p, e.file)
				}
			}
			for name, p := range ports {
				if !slices.Contains(pub, p) {
					t.Errorf("%s does not publish listener %s's port %s", e.service, name, p)
				}
			}
			for name, addrs := range envoyClusters(doc) {
				for _, addr := range addrs {
					host, p, _ := net.SplitHostPort(addr)
					if _, ok := c.Services[host]; !ok {
						t.Errorf("cluster %s sends to %s: no service %q", name, addr, host)
					}
					if host == "floodgate" && p != fgGRPC {
						t.Errorf("cluster %s sends to %s, floodgate's gRPC port is %s", name, addr, fgGRPC)
					}
					if !slices.Contains(s.dependsOn(), host) {
						t.Errorf("%s does not depend on %s", e.service, host)
					}
				}
			}
			// The image is the Envoy release the tests validate and run
			// the file with.
			tag, _ := strings.CutPrefix(s.Image, "envoyproxy/envoy:v")
			if tag != envoyMinor && !strings.HasPrefix(tag, envoyMinor+".") && !strings.HasPrefix(tag, envoyMinor+"-") {
				t.Errorf("%s runs %s; the tests run Envoy %s: want envoyproxy/envoy:v%s-latest", e.service, s.Image, envoyMinor, envoyMinor)
			}
		})
	}

	t.Run("prometheus scrapes floodgate", func(t *testing.T) {
		s, _ := c.service("prometheus")
		host := s.mounted(prometheusConfigPath)
		if host == "" {
			t.Fatalf("prometheus mounts nothing at %s", prometheusConfigPath)
		}
		data, err := os.ReadFile(filepath.Join(repoRoot, host))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			ScrapeConfigs []struct {
				JobName       string                       `yaml:"job_name"`
				MetricsPath   string                       `yaml:"metrics_path"`
				StaticConfigs []struct{ Targets []string } `yaml:"static_configs"`
			} `yaml:"scrape_configs"`
		}
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("%s: %v", host, err)
		}
		scraped := map[string]string{}
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				for _, target := range st.Targets {
					scraped[target] = sc.MetricsPath
				}
			}
		}
		want := net.JoinHostPort("floodgate", fgHTTP)
		if scraped[want] != "/metrics" {
			t.Errorf("%s scrapes %v; want %s/metrics (floodgate's HTTP port)", host, scraped, want)
		}
		_, doc := readEnvoyConfig(t, envoyHTTPFile)
		envoyAdmin := socketPort(doc["admin"])
		for target := range scraped {
			h, p, _ := net.SplitHostPort(target)
			switch {
			case h == "floodgate" && p == fgHTTP, h == "envoy" && p == envoyAdmin:
			default:
				t.Errorf("%s scrapes %s, which is neither floodgate's HTTP port nor Envoy's admin port", host, target)
			}
		}
	})
}

// composeCommand checks a `docker compose ...` command of the README: a
// known subcommand, and services that exist.
func composeCommand(c compose, args []string) error {
	if len(args) < 3 || args[0] != "docker" || args[1] != "compose" {
		return fmt.Errorf("not a docker compose command")
	}
	sub, rest := args[2], args[3:]
	known := map[string]bool{"up": true, "down": true, "logs": true, "ps": true, "restart": true, "stop": true, "start": true, "exec": true, "kill": true, "pull": true, "build": true}
	if !known[sub] {
		return fmt.Errorf("unknown subcommand %q", sub)
	}
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if strings.HasPrefix(a, "-") {
			continue
		}
		if _, ok := c.Services[a]; !ok {
			return fmt.Errorf("no service %q in %s", a, composeFile)
		}
		if sub == "exec" {
			break // what follows is the command run in the container
		}
	}
	return nil
}
