// Package memcachedtest starts private memcached processes for tests, as
// package redistest does for redis-server. Each server listens on free
// loopback ports, keeps nothing on disk, and is stopped when the test ends.
// A machine without memcached fails the test with the install hint instead
// of skipping it: a skipped Memcached test proves nothing.
//
// It also serves DNS SRV records on loopback (see DNS), so that resolving
// MEMCACHE_SRV is tested through Go's real resolver.
package memcachedtest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/redistest"
)

// InstallHint is what a test prints when memcached is missing.
const InstallHint = "memcached not found in PATH: install it with `apt-get install -y memcached` (Debian/Ubuntu) or `brew install memcached` (macOS)"

// Server is one running memcached process owned by a test.
type Server struct {
	// Addr is host:port of the server's plain port, e.g. "127.0.0.1:40123",
	// which the test's own commands (Do) use.
	Addr string
	// TLSAddr is host:port of the server's TLS port for servers started
	// with StartTLS; empty otherwise.
	TLSAddr string

	t    testing.TB
	args []string
	log  string
	stop func() // kills the process and waits for it, once
}

// TLSFiles are the PEM files a server started with StartTLS serves TLS
// with.
type TLSFiles struct {
	// CertFile and KeyFile are the server's certificate chain and key.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require a client
	// certificate signed by a CA in it (ssl_verify_mode 2); otherwise
	// clients need none.
	ClientCAFile string
}

// Start starts a memcached on a free port with the given extra arguments
// (e.g. "-m", "1") and returns when it answers. It is stopped when the test
// ends.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return start(t, nil, extra)
}

// StartTLS is Start for a server that also serves TLS with files, on
// TLSAddr; Addr stays plain.
func StartTLS(t testing.TB, files TLSFiles, extra ...string) *Server {
	t.Helper()
	return start(t, &files, extra)
}

func start(t testing.TB, files *TLSFiles, extra []string) *Server {
	t.Helper()
	bin := LookPath(t)
	s := &Server{t: t, log: filepath.Join(t.TempDir(), "memcached.log")}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
	// Two threads: the machine running the tests is small, and the tests
	// start several servers.
	s.args = []string{"-U", "0", "-t", "2", "-m", "64"}
	if os.Geteuid() == 0 {
		// memcached refuses to run as root unless told which user to be.
		s.args = append(s.args, "-u", "root")
	}
	if files == nil {
		s.args = append(s.args, "-l", s.Addr)
	} else {
		s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(redistest.FreePort(t)))
		opts := "ssl_chain_cert=" + files.CertFile + ",ssl_key=" + files.KeyFile
		if files.ClientCAFile != "" {
			opts += ",ssl_ca_cert=" + files.ClientCAFile + ",ssl_verify_mode=2"
		}
		s.args = append(s.args, "-Z", "-o", opts, "-l", "notls:"+s.Addr, "-l", s.TLSAddr)
	}
	s.start(bin, extra)
	t.Cleanup(s.Stop)
	return s
}

// start runs bin with the server's arguments and extra, and waits until it
// answers.
func (s *Server) start(bin string, extra []string) {
	s.t.Helper()
	s.args = append(s.args, extra...)
	logf, err := os.Create(s.log)
	if err != nil {
		s.t.Fatalf("memcachedtest: %v", err)
	}
	defer logf.Close()
	// Canceling the command's context kills the process; stop does that
	// once and waits for the process to be gone.
	ctx, kill := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		kill()
		s.t.Fatalf("memcachedtest: start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.stop = sync.OnceFunc(func() {
		kill()
		<-exited
	})
	if err := WaitReady(s.Addr, 10*time.Second); err != nil {
		s.Stop()
		s.t.Fatalf("memcachedtest: memcached on %s: %v\nlog:\n%s", s.Addr, err, s.Log())
	}
}

// Stop kills the server and waits for it to exit. It is safe to call more
// than once.
func (s *Server) Stop() { s.stop() }

// Restart stops the server and starts it again, empty, on the same ports.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start(LookPath(s.t), nil)
}

// Log returns what the server wrote, for failure messages.
func (s *Server) Log() string {
	b, _ := os.ReadFile(s.log)
	return string(b)
}

// Do sends one text-protocol command (without its "\r\n"; a storage
// command's data block follows after "\r\n") over a fresh connection and
// returns the reply's lines up to and including its last one, joined by
// "\n": "STORED", "42", "VALUE k 0 1\nx\nEND". An error reply (ERROR,
// CLIENT_ERROR, SERVER_ERROR) becomes an error.
func (s *Server) Do(cmd string) (string, error) { return Do(s.Addr, cmd) }

// Get returns the value of key, and whether it exists, read over the plain
// port without the code under test.
func (s *Server) Get(key string) (string, bool, error) {
	reply, err := s.Do("get " + key)
	if err != nil || reply == "END" {
		return "", false, err
	}
	lines := strings.Split(reply, "\n")
	if len(lines) != 3 {
		return "", false, fmt.Errorf("memcachedtest: get %s: unexpected reply %q", key, reply)
	}
	return lines[1], true, nil
}

// LookPath finds memcached or fails the test with InstallHint.
func LookPath(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("memcached")
	if err != nil {
		t.Fatalf("memcached: %s", InstallHint)
	}
	return p
}

// WaitReady polls addr with "version" until it answers or timeout passes.
func WaitReady(addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		reply, err := Do(addr, "version")
		if err == nil && strings.HasPrefix(reply, "VERSION ") {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %v: %v", timeout, err)
		case <-tick.C:
		}
	}
}

// Do sends one command to addr as Server.Do does.
func Do(addr, cmd string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimSuffix(line, "\r\n")
		lines = append(lines, line)
		switch {
		case line == "ERROR" || strings.HasPrefix(line, "CLIENT_ERROR") || strings.HasPrefix(line, "SERVER_ERROR"):
			return "", fmt.Errorf("memcached: %s", line)
		case strings.HasPrefix(line, "VALUE "):
			// A retrieval: lines up to END.
		case len(lines) == 1 || line == "END":
			return strings.Join(lines, "\n"), nil
		}
	}
}
