// Package redistest starts private redis-server processes for tests: a single
// node, or a Redis Cluster of several masters (see cluster.go). Each server
// listens on a free loopback port, keeps nothing on disk, and is stopped when
// the test ends. A machine without redis-server fails the test with the
// install hint instead of skipping it: a skipped Redis test proves nothing.
package redistest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// InstallHint is what a test prints when redis-server or redis-cli is missing.
const InstallHint = "redis-server not found in PATH: install it with `apt-get install -y redis-server redis-tools` (Debian/Ubuntu) or `brew install redis` (macOS)"

// Server is one running redis-server process owned by a test.
type Server struct {
	// Addr is host:port of the server, e.g. "127.0.0.1:40123".
	Addr string
	// Dir is the server's private working directory.
	Dir string
	// TLSAddr is host:port of the server's TLS port, for servers started
	// with TLS (see StartTLS); empty otherwise. Addr stays plain, for the
	// test's own commands (Do).
	TLSAddr string

	t    testing.TB
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a redis-server on a free port with the given extra
// configuration directives (e.g. "--maxmemory", "10mb") and returns when it
// answers PING. It is stopped when the test ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startNode(t, nil, FreePort(t), extra)
}

// StartTLS is Start for a server that also serves TLS as tls says, on
// TLSAddr.
func StartTLS(t testing.TB, tls *TLS, extra ...string) *Server {
	t.Helper()
	return startNode(t, tls, FreePort(t), extra)
}

// startNode starts a redis-server on port, with TLS when tls is not nil,
// stopped when the test ends.
func startNode(t testing.TB, tls *TLS, port int, extra []string) *Server {
	t.Helper()
	bin := LookPath(t, "redis-server")
	s := &Server{t: t, Dir: t.TempDir()}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s.args = []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.Dir,
		"--logfile", filepath.Join(s.Dir, "redis.log"),
	}
	if tls != nil {
		tlsPort := FreePort(t)
		s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
		s.args = append(s.args, tls.args(t, tlsPort)...)
	}
	s.args = append(s.args, extra...)
	s.start(bin)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(bin string) {
	s.t.Helper()
	s.cmd = exec.Command(bin, s.args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", bin, err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	if err := WaitReady(s.Addr, 10*time.Second); err != nil {
		s.Stop()
		s.t.Fatalf("redistest: redis-server on %s: %v\nlog:\n%s", s.Addr, err, s.Log())
	}
}

// Stop kills the server (SIGKILL: no graceful save) and waits for it to exit.
// It is safe to call more than once.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Restart stops the server and starts it again, empty, on the same port.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start(LookPath(s.t, "redis-server"))
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

// LookPath finds a Redis binary or fails the test with InstallHint.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %s", name, InstallHint)
	}
	return p
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

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
