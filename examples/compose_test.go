package examples_test

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// compose is the part of docker-compose.yml the tests read.
type compose struct {
	Name     string
	Services map[string]composeService
}

type composeService struct {
	Image     string
	Build     string
	Command   []string
	Volumes   []string
	Ports     []string
	DependsOn yaml.Node `yaml:"depends_on"`
	// Healthcheck is not checked: it runs in the image (redis-cli).
	Healthcheck yaml.Node
}

// composeFile is the demo's compose file, at the repository root.
const composeFile = "docker-compose.yml"

func loadCompose(t testing.TB) *compose {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, composeFile))
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return &c
}

// mount is one short-syntax volume: a host path mounted in a container.
type mount struct{ host, container string }

func (s composeService) mounts() []mount {
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		out = append(out, mount{host: parts[0], container: parts[1]})
	}
	return out
}

// mounted returns the host path (relative to the repository) mounted at a
// container path, or "".
func (s composeService) mounted(container string) string {
	for _, m := range s.mounts() {
		if m.container == container {
			return m.host
		}
	}
	return ""
}

// published returns the container ports the service publishes.
func (s composeService) published() []string {
	var out []string
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		out = append(out, parts[len(parts)-1])
	}
	return out
}

func (s composeService) dependsOn() []string {
	var out []string
	switch s.DependsOn.Kind {
	case yaml.SequenceNode:
		for _, n := range s.DependsOn.Content {
			out = append(out, n.Value)
		}
	case yaml.MappingNode:
		for i := 0; i < len(s.DependsOn.Content); i += 2 {
			out = append(out, s.DependsOn.Content[i].Value)
		}
	}
	return out
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
	fg, ok := c.Services["floodgate"]
	if !ok {
		t.Fatal("no floodgate service")
	}
	fgFlags := floodgateFlags(t, fg.Command)
	fgHTTP, fgGRPC := port(t, fgFlags["http-addr"]), port(t, fgFlags["grpc-addr"])

	t.Run("every mounted path and build context exists", func(t *testing.T) {
		for name, s := range c.Services {
			for _, m := range s.mounts() {
				if _, err := os.Stat(filepath.Join(repoRoot, m.host)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, m.host, err)
				}
			}
			if s.Build != "" {
				if _, err := os.Stat(filepath.Join(repoRoot, s.Build, "Dockerfile")); err != nil {
					t.Errorf("service %s builds %s: %v", name, s.Build, err)
				}
			}
			for _, dep := range s.dependsOn() {
				if _, ok := c.Services[dep]; !ok {
					t.Errorf("service %s depends on %q, which is not a service", name, dep)
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
		for _, m := range fg.mounts() {
			copies[m.container] = m.host
		}
		args := append(mapPaths(fg.Command, copies, repoRoot), "-check")
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
		redis, ok := c.Services[host]
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
			s, ok := c.Services[e.service]
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
		s := c.Services["prometheus"]
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
func composeCommand(c *compose, args []string) error {
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
