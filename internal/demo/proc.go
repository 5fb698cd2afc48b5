//go:build unix

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
)

// proc is one process the demo started.
type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{} // closed once the process has exited and been reaped
	err       error         // why it exited, once done is closed
}

// group owns the demo's processes: it starts them in a process group of
// their own each, so that Ctrl-C reaches only the demo, which stops them in
// reverse order.
type group struct {
	procs    []*proc
	exited   chan *proc // each process that exits before stop
	mu       sync.Mutex
	stopping bool
}

// start runs bin with args, its output in dir/name.log (floodgate's on
// stderr too, where its reloads and refused edits show).
func (g *group) start(dir, name, bin string, args ...string) (*proc, error) {
	p := &proc{name: name, log: filepath.Join(dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	// Closed once the process is reaped: Wait copies floodgate's output to
	// it until then.
	var w io.Writer = f
	if name == "floodgate" {
		w = io.MultiWriter(f, os.Stderr)
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	g.procs = append(g.procs, p)
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
		g.mu.Lock()
		defer g.mu.Unlock()
		if !g.stopping {
			g.exited <- p
		}
	}()
	return p, nil
}

// stop ends every process, last started first, with SIGTERM, and with
// SIGKILL any that has not exited 15 s later. It returns once all have
// exited.
func (g *group) stop() {
	g.mu.Lock()
	g.stopping = true
	g.mu.Unlock()
	for i := len(g.procs) - 1; i >= 0; i-- {
		p := g.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			fmt.Fprintf(os.Stderr, "demo: %s did not stop within 15s of SIGTERM: killing it\n", p.name)
			p.cmd.Process.Kill()
			<-p.done
		}
	}
}

// waitFor polls check until it succeeds; it fails when p exits, ctx ends
// or a minute passes (Envoy's first start on a slow machine takes seconds).
func waitFor(ctx context.Context, p *proc, check func() error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v): see %s:\n%s", p.name, p.err, p.log, tail(p.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within a minute: %w; see %s", p.name, err, p.log)
		}
	}
}

// tail returns the end of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return string(b)
}

// rewriteAddresses replaces every socket_address of an Envoy bootstrap
// (listeners, admin, cluster endpoints) by the address its host:port maps
// to, and returns the admin's new address. An address the map lacks is an
// error: the demo knows them all.
func rewriteAddresses(bootstrap []byte, to map[string]string) ([]byte, string, error) {
	var root map[string]any
	if err := yaml.Unmarshal(bootstrap, &root); err != nil {
		return nil, "", err
	}
	if err := moveAddresses(root, to); err != nil {
		return nil, "", err
	}
	admin, _ := root["admin"].(map[string]any)
	sa, _ := dig(admin, "address", "socket_address").(map[string]any)
	if sa == nil {
		return nil, "", errors.New("no admin address")
	}
	out, err := yaml.Marshal(root)
	return out, net.JoinHostPort(fmt.Sprint(sa["address"]), fmt.Sprint(sa["port_value"])), err
}

// moveAddresses rewrites the socket_address maps found anywhere under v.
func moveAddresses(v any, to map[string]string) error {
	switch x := v.(type) {
	case map[string]any:
		if sa, ok := x["socket_address"].(map[string]any); ok {
			from := net.JoinHostPort(fmt.Sprint(sa["address"]), fmt.Sprint(sa["port_value"]))
			addr, ok := to[from]
			if !ok {
				return fmt.Errorf("socket_address %s: not an address of the demo", from)
			}
			p, err := strconv.Atoi(port(addr))
			if err != nil {
				return fmt.Errorf("%s: port: %w", addr, err)
			}
			sa["address"], sa["port_value"] = host(addr), p
		}
		// In key order, so that of several unknown addresses the error
		// names the same one every time.
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := moveAddresses(x[k], to); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := moveAddresses(e, to); err != nil {
				return err
			}
		}
	}
	return nil
}

// dig walks nested maps by key.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func host(addr string) string { h, _, _ := net.SplitHostPort(addr); return h }
func port(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }

// redisPing sends PING and wants PONG.
func redisPing(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("redis answered %q to PING", line)
	}
	return nil
}

var client = &http.Client{Timeout: 2 * time.Second}

// httpGet wants 200 from url; it returns the body.
func httpGet(url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func httpOK(url string) error { _, err := httpGet(url); return err }

// floodgateHealthy wants Envoy ready, with its health check seeing floodgate
// at grpc healthy.
func floodgateHealthy(admin, grpc string) error {
	if err := httpOK("http://" + admin + "/ready"); err != nil {
		return err
	}
	clusters, err := httpGet("http://" + admin + "/clusters")
	if err != nil {
		return err
	}
	if !strings.Contains(clusters, "floodgate::"+grpc+"::health_flags::healthy") {
		return errors.New("Envoy does not see floodgate healthy yet")
	}
	return nil
}
