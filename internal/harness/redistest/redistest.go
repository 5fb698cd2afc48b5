// Package redistest starts private redis-server processes: a single node,
// one serving TLS too (tls.go), a Sentinel group (sentinel.go) or a Redis
// Cluster (cluster.go). It is the Redis part of the harness (see package
// harness): each server listens on free loopback ports, keeps nothing on
// disk, and is stopped when its test ends. A test that starts one is in
// the processes tier (harness.Require): skipped without the tag, failed
// with the install hint when redis-server is missing.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// Server is one running redis-server process.
type Server struct {
	// Addr is host:port of the server, e.g. "127.0.0.1:40123".
	Addr string
	// Dir is the server's private working directory.
	Dir string
	// TLSAddr is host:port of the server's TLS port, for servers started
	// with TLS (see StartTLS); empty otherwise. Addr stays plain, for the
	// test's own commands (Do).
	TLSAddr string

	t    testing.TB // nil for a server of Run's
	bin  string
	args []string
	proc *harness.Process
}

// Start starts a redis-server on a free port with the given extra
// configuration directives (e.g. "--maxmemory", "10mb") and returns when it
// answers PING. It is stopped when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startNode(t, nil, extra)
}

// StartTLS is Start for a server that also serves TLS as tls says, on
// TLSAddr.
func StartTLS(t testing.TB, tls *TLS, extra ...string) *Server {
	t.Helper()
	return startNode(t, tls, extra)
}

// Run starts a redis-server as Start does, with its files in dir, for a
// program that is not a test (cmd/bench): it does not look at the tier,
// and the caller stops the server (Stop). Restart, Freeze and Thaw are for
// the servers of tests.
func Run(dir string, extra ...string) (*Server, error) {
	bin, err := harness.Find("redis-server")
	if err != nil {
		return nil, err
	}
	addr, err := harness.FreeAddr()
	if err != nil {
		return nil, err
	}
	s := newServer(bin, dir, addr)
	s.args = append(s.args, extra...)
	return s, s.launch()
}

// startNode starts a redis-server on a free port, with TLS when tls is
// not nil, stopped when the test ends; with cluster mode in extra, its
// cluster bus on a free port too. A port another process takes before the
// server listens gets it new ports, up to three times.
func startNode(t testing.TB, tls *TLS, extra []string) *Server {
	t.Helper()
	bin := harness.Require(t, "redis-server")
	for attempt := 1; ; attempt++ {
		s := newServer(bin, t.TempDir(), net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t))))
		s.t = t
		if slices.Contains(extra, "--cluster-enabled") {
			// The bus port is given, not left at port+10000: with TLS the
			// bus would sit at the TLS port+10000, which nothing checked
			// was free, and one node's bus could take another's TLS port.
			s.args = append(s.args, "--cluster-port", strconv.Itoa(harness.FreePort(t)),
				"--cluster-config-file", filepath.Join(s.Dir, "nodes.conf"))
		}
		if tls != nil {
			tlsPort := harness.FreePort(t)
			s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
			s.args = append(s.args, tls.args(t, tlsPort)...)
		}
		s.args = append(s.args, extra...)
		err := s.launch()
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		if attempt == harness.PortAttempts || !harness.PortTaken(s.Log()) {
			t.Fatalf("redistest: %v", err)
		}
	}
}

// newServer returns a server of bin listening on addr with its files in
// dir, not started.
func newServer(bin, dir, addr string) *Server {
	_, port, _ := net.SplitHostPort(addr)
	return &Server{Addr: addr, Dir: dir, bin: bin, args: []string{
		"--port", port,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	}}
}

// launch starts the process and waits until it answers PING; on an error
// the process is stopped.
func (s *Server) launch() error {
	p, err := harness.StartProcess("redis-server", exec.Command(s.bin, s.args...))
	if err != nil {
		return err
	}
	s.proc = p
	err = harness.WaitReady(context.Background(), p, 10*time.Second, func(context.Context) error {
		reply, err := Do(s.Addr, "PING")
		if err == nil && reply != "PONG" {
			err = fmt.Errorf("PING answered %q", reply)
		}
		return err
	})
	if err != nil {
		s.Stop()
		return fmt.Errorf("redis-server on %s: %w\nlog:\n%s", s.Addr, err, s.Log())
	}
	return nil
}

// Stop kills the server (SIGKILL: no graceful save) and waits for it to exit.
// It is safe to call more than once.
func (s *Server) Stop() {
	if s.proc != nil {
		s.proc.Stop(0)
	}
}

// Restart stops the server and starts it again, empty, on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.launch(); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Log returns the server's log file, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	return string(b)
}

// Do sends one command over a fresh connection and returns the reply as
// text, for test set-up that should not depend on the code under test.
func (s *Server) Do(args ...string) (string, error) {
	return Do(s.Addr, args...)
}

// Pid is the server's process id, for its CPU and memory in /proc; 0
// before it has started.
func (s *Server) Pid() int {
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid()
}

// running reports whether the server's process runs.
func (s *Server) running() bool { return s.proc != nil && !s.proc.Exited() }

// WaitReady polls addr with PING until it answers PONG or timeout passes.
func WaitReady(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		var reply string
		if reply, err = Do(addr, "PING"); err == nil && reply == "PONG" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: %v", timeout, err)
}

// Do sends one RESP command to addr and returns a simple reply as text:
// status and bulk strings as they are, integers in decimal, arrays joined
// by newlines. An error reply becomes an error.
func Do(addr string, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(conn))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", fmt.Errorf("empty reply")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, _ := strconv.Atoi(line[1:])
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}
