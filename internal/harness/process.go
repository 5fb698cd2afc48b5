package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Process is a program started by StartProcess, watched until it exits.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartProcess starts cmd, whose arguments, environment, directory and
// output the caller has set, and watches for its exit. name names the
// program in messages ("redis-server"). The caller stops it (Stop).
func StartProcess(name string, cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", name, cmd.Path, err)
	}
	p := &Process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Name is the name StartProcess was given.
func (p *Process) Name() string { return p.name }

// Pid is the process ID, for /proc readings and signals.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// State is how the process ended; nil while it runs.
func (p *Process) State() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.cmd.ProcessState
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %v: %w", p.name, sig, err)
	}
	return nil
}

// Stop ends the process and waits for it: SIGTERM, then SIGKILL when it
// has not exited within grace; a grace of 0 kills it at once (no graceful
// shutdown, as a crash). It does nothing to a process that has exited, so
// it is safe to call more than once.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	if grace > 0 {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Wait waits up to timeout for the process to exit by itself and returns
// its exit code; the error says it still runs.
func (p *Process) Wait(timeout time.Duration) (int, error) {
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(timeout):
		return -1, fmt.Errorf("%s still running after %v", p.name, timeout)
	}
}

// WaitReady calls ready until it returns nil, each call with a deadline of
// a second, and then returns nil. It returns an error instead when p exits
// first, when ctx ends, or when timeout passes; the last one wraps ready's
// last error.
func WaitReady(ctx context.Context, p *Process, timeout time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		err := ready(attempt)
		cancel()
		switch {
		case err == nil:
			return nil
		case p.Exited():
			return fmt.Errorf("%s exited (%v) before it was ready: %w", p.name, p.cmd.ProcessState, err)
		case ctx.Err() != nil:
			return fmt.Errorf("%s: %w", p.name, ctx.Err())
		case time.Now().After(deadline):
			return fmt.Errorf("%s not ready after %v: %w", p.name, timeout, err)
		}
		select {
		case <-p.done:
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// PortAttempts is how many times the starters here try free ports: a port
// another process takes between FreeAddr and the listen gets new ones.
const PortAttempts = 3

// PortTaken reports whether a process's output, or an error, says that a
// port it was given was taken: Go's "address already in use", Redis's and
// memcached's "Address already in use".
func PortTaken(output string) bool {
	return strings.Contains(strings.ToLower(output), "address already in use")
}

// FreeAddr returns a host:port of 127.0.0.1 that was free a moment ago.
// Another process may take it before the caller listens on it; the
// starters here try again when that happens.
func FreeAddr() (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// FreePort is FreeAddr's port, for a test; it fails t when there is none.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
