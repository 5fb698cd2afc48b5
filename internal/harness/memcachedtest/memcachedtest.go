// Package memcachedtest starts private memcached processes for tests, as
// package redistest does for redis-server: it is the Memcached part of the
// harness (see package harness). Each server listens on free loopback
// ports, keeps nothing on disk, and is stopped when the test ends. A test
// that starts one is in the processes tier (harness.Require): skipped
// without the tag, failed with the install hint when memcached is missing.
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
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// Server is one running memcached process owned by a test.
type Server struct {
	// Addr is host:port of the server's plain port, e.g. "127.0.0.1:40123",
	// which the test's own commands (Do) use.
	Addr string
	// TLSAddr is host:port of the server's TLS port for servers started
	// with StartTLS; empty otherwise.
	TLSAddr string

	t    testing.TB
	bin  string
	args []string
	log  string
	proc *harness.Process
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
	bin := harness.Require(t, "memcached")
	for attempt := 1; ; attempt++ {
		s := newServer(t, bin, files, extra)
		err := s.launch()
		if err == nil {
			t.Cleanup(s.Stop)
			return s
		}
		// Another process took a port between FreePort and the listen.
		if attempt == harness.PortAttempts || !harness.PortTaken(s.Log()) {
			t.Fatalf("memcachedtest: %v", err)
		}
	}
}

// newServer returns a server of bin on free ports, with TLS when files is
// not nil, not started.
func newServer(t testing.TB, bin string, files *TLSFiles, extra []string) *Server {
	s := &Server{t: t, bin: bin, log: filepath.Join(t.TempDir(), "memcached.log")}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t)))
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
		s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t)))
		opts := "ssl_chain_cert=" + files.CertFile + ",ssl_key=" + files.KeyFile
		if files.ClientCAFile != "" {
			opts += ",ssl_ca_cert=" + files.ClientCAFile + ",ssl_verify_mode=2"
		}
		s.args = append(s.args, "-Z", "-o", opts, "-l", "notls:"+s.Addr, "-l", s.TLSAddr)
	}
	s.args = append(s.args, extra...)
	return s
}

// launch starts the process, its output in the log file, and waits until
// it answers; on an error the process is stopped.
func (s *Server) launch() error {
	logf, err := os.Create(s.log)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if s.proc, err = harness.StartProcess("memcached", cmd); err != nil {
		return err
	}
	err = harness.WaitReady(context.Background(), s.proc, 10*time.Second, func(context.Context) error {
		reply, err := Do(s.Addr, "version")
		if err == nil && !strings.HasPrefix(reply, "VERSION ") {
			err = fmt.Errorf("version answered %q", reply)
		}
		return err
	})
	if err != nil {
		s.Stop()
		return fmt.Errorf("memcached on %s: %w\nlog:\n%s", s.Addr, err, s.Log())
	}
	return nil
}

// Stop kills the server and waits for it to exit. It is safe to call more
// than once.
func (s *Server) Stop() { s.proc.Stop(0) }

// Restart stops the server and starts it again, empty, on the same ports.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	if err := s.launch(); err != nil {
		s.t.Fatalf("memcachedtest: restart: %v", err)
	}
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
