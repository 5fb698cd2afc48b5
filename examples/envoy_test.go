package examples_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/envoytest"
)

// The Envoy configurations of examples/ are checked by the real Envoy
// (internal/envoytest): `envoy --mode validate` loads each one whole, and
// the tests of envoy_examples_test.go run each one on the loopback, in
// front of floodgate and a test backend, and send requests through it.
// Only their listen addresses and cluster endpoints are rewritten for that.

const (
	envoyHTTPFile = "envoy.yaml"
	envoyTCPFile  = "envoy-tcp.yaml"
	envoyRLQSFile = "envoy-rlqs.yaml"
)

// envoyRelease returns the release of the Envoy the tests run, e.g.
// "1.40" for 1.40.0.
func envoyRelease(t testing.TB) string {
	t.Helper()
	out, err := exec.Command(harness.Require(t, "envoy"), "--version").Output()
	m := regexp.MustCompile(`/(\d+\.\d+)\.\d+/`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("envoy --version: %v: %q", err, out)
	}
	return string(m[1])
}

// readEnvoyConfig returns an Envoy configuration of examples/ as shipped
// and as generic YAML.
func readEnvoyConfig(t testing.TB, file string) ([]byte, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return raw, doc
}

// dig walks generic YAML or JSON (an Envoy configuration, an Istio
// object's fields) by map keys (strings) and list indexes (ints).
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// str returns the scalar at path as text, "" when there is none.
func str(v any, path ...any) string {
	switch x := dig(v, path...).(type) {
	case string:
		return x
	case int, int64, float64, bool:
		return fmt.Sprint(x)
	}
	return ""
}

func list(v any, path ...any) []any {
	l, _ := dig(v, path...).([]any)
	return l
}

// stringMap returns the map at path with its values as text.
func stringMap(v any, path ...any) map[string]string {
	out := map[string]string{}
	m, _ := dig(v, path...).(map[string]any)
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// socketPort is the port_value of an address.socket_address.
func socketPort(v any) string { return str(v, "address", "socket_address", "port_value") }

// envoyListenerPorts returns the port of each static listener, by name.
func envoyListenerPorts(doc map[string]any) map[string]string {
	out := map[string]string{}
	for _, l := range list(doc, "static_resources", "listeners") {
		out[str(l, "name")] = socketPort(l)
	}
	return out
}

// envoyClusters returns the endpoints (host:port) of each static cluster,
// by name.
func envoyClusters(doc map[string]any) map[string][]string {
	out := map[string][]string{}
	for _, c := range list(doc, "static_resources", "clusters") {
		name := str(c, "name")
		out[name] = []string{}
		for _, le := range list(c, "load_assignment", "endpoints") {
			for _, ep := range list(le, "lb_endpoints") {
				sa := dig(ep, "endpoint", "address", "socket_address")
				out[name] = append(out[name], net.JoinHostPort(str(sa, "address"), str(sa, "port_value")))
			}
		}
	}
	return out
}

// rateLimitFilters returns the typed_config of every ratelimit filter,
// HTTP or network, anywhere in v.
func rateLimitFilters(v any) []map[string]any {
	var out []map[string]any
	switch x := v.(type) {
	case map[string]any:
		if typ, _ := x["@type"].(string); strings.HasSuffix(typ, ".ratelimit.v3.RateLimit") {
			out = append(out, x)
		}
		for _, e := range x {
			out = append(out, rateLimitFilters(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, rateLimitFilters(e)...)
		}
	}
	return out
}

// shippedEnvoyConfig is one Envoy configuration the repository ships, as a
// bootstrap Envoy loads, and a deliberately broken copy of it.
type shippedEnvoyConfig struct {
	name string
	// file is the file the configuration comes from, under examples/.
	file string
	// bootstrap turns the file's text into an Envoy bootstrap.
	bootstrap func(t *testing.T, text string) []byte
	// breakOld is replaced by breakNew in the file's text for the broken
	// copy: a mistake Envoy must refuse.
	breakOld, breakNew string
}

// shippedEnvoyConfigs lists every Envoy configuration of the repository:
// the Envoy examples (docker-compose.yml mounts the first two; the RLQS
// one is run by test/rlqs_test.go), and the
// gateway's configuration with the patches of each Istio EnvoyFilter.
func shippedEnvoyConfigs(t *testing.T) []shippedEnvoyConfig {
	asIs := func(_ *testing.T, text string) []byte { return []byte(text) }
	configs := []shippedEnvoyConfig{
		{"HTTP example", envoyHTTPFile, asIs,
			// An enum value Envoy does not know, inside the ratelimit
			// filter's typed_config.
			"enable_x_ratelimit_headers: DRAFT_VERSION_03", "enable_x_ratelimit_headers: DRAFT_VERSION_3"},
		{"TCP example", envoyTCPFile, asIs,
			// A substitution operator Envoy does not know.
			"%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%", "%DOWNSTREAM_REMOTE_ADDR%"},
		{"RLQS example", envoyRLQSFile, asIs,
			// A blanket rule Envoy does not know, in the quota filter's
			// bucket settings.
			"blanket_rule: ALLOW_ALL", "blanket_rule: ALLOW_SOME"},
	}
	breaks := map[string][2]string{
		// An empty domain, which the filter's own constraints refuse.
		"floodgate-ratelimit-filter": {"domain: demo", `domain: ""`},
		// A per-route option Envoy does not know.
		"floodgate-ratelimit-actions": {"vh_rate_limits: INCLUDE", "vh_rate_limits: INCLUDES"},
	}
	for _, m := range loadManifests(t, istioDir) {
		if m.kind != "EnvoyFilter" {
			continue
		}
		b, ok := breaks[m.name]
		if !ok {
			t.Errorf("EnvoyFilter %s: no broken copy for it in shippedEnvoyConfigs", m.name)
			continue
		}
		configs = append(configs, shippedEnvoyConfig{"Istio EnvoyFilter " + m.name, filepath.Join(istioDir, m.file),
			istioBootstrap(m.file, m.name), b[0], b[1]})
	}
	return configs
}

// TestEnvoyValidates runs `envoy --mode validate` on every Envoy
// configuration the repository ships, and on a broken copy of each, which
// it must refuse: proof that the check can fail. It also checks what Envoy
// cannot know: each ratelimit filter's timeout leaves floodgate's store
// deadline room to answer.
func TestEnvoyValidates(t *testing.T) {
	deadline, err := time.ParseDuration(flagDefaults(t)["redis-deadline"])
	if err != nil {
		t.Fatal(err)
	}
	configs := shippedEnvoyConfigs(t)
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			raw, err := os.ReadFile(c.file)
			if err != nil {
				t.Fatal(err)
			}
			text := string(raw)
			good := c.bootstrap(t, text)
			if out, err := validate(t, good); err != nil {
				t.Errorf("Envoy refuses %s: %v\n%s", c.file, err, out)
			}
			if !strings.Contains(text, c.breakOld) {
				t.Fatalf("%s has no %q to break", c.file, c.breakOld)
			}
			broken := c.bootstrap(t, strings.Replace(text, c.breakOld, c.breakNew, 1))
			if bytes.Equal(broken, good) {
				t.Fatalf("replacing %q in %s does not change the configuration", c.breakOld, c.file)
			}
			out, err := validate(t, broken)
			if err == nil {
				t.Errorf("Envoy accepts %s with %q replaced by %q", c.file, c.breakOld, c.breakNew)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			t.Logf("with %q, Envoy says: %s", c.breakNew, lines[len(lines)-1])

			var doc map[string]any
			if err := yaml.Unmarshal(good, &doc); err != nil {
				t.Fatal(err)
			}
			for _, f := range rateLimitFilters(doc) {
				// Longer than floodgate's -redis-deadline, so that its
				// failure policy answers when Redis is slow; short enough
				// to bound what an unreachable floodgate adds.
				timeout, err := time.ParseDuration(str(f, "timeout"))
				if err != nil || timeout <= deadline || timeout > time.Second {
					t.Errorf("ratelimit filter timeout %q: want more than floodgate's -redis-deadline (%v) and at most 1s", str(f, "timeout"), deadline)
				}
			}
		})
	}

	t.Run("docker-compose.yml mounts only configurations validated here", func(t *testing.T) {
		var files []string
		for _, c := range configs {
			files = append(files, filepath.Join("examples", c.file))
		}
		n := 0
		c := loadCompose(t)
		for name := range c.Services {
			s, _ := c.service(name)
			if !strings.HasPrefix(s.Image, "envoyproxy/envoy:") {
				continue
			}
			n++
			if m := filepath.Clean(s.mounted(envoyConfigPath)); !slices.Contains(files, m) {
				t.Errorf("service %s runs %s, which this test does not validate", name, m)
			}
		}
		if n == 0 {
			t.Error("docker-compose.yml runs no Envoy")
		}
	})
}

// validate writes a bootstrap to a file and runs `envoy --mode validate` on it.
func validate(t *testing.T, bootstrap []byte) (string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, bootstrap, 0o644); err != nil {
		t.Fatal(err)
	}
	return envoytest.Validate(t, path)
}
