package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverPackage is the floodgate binary's package, built when -server-bin
// is not given.
const serverPackage = "github.com/floodgate/floodgate/cmd/server"

// process is a child process the tool started and must stop: the private
// redis-server or floodgate.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string // file receiving the process's stdout and stderr
	done chan struct{}
}

// startProcess starts bin with args, output to logFile, in this process's
// environment plus env ("NAME=value" each).
func startProcess(name, bin string, args []string, logFile string, env ...string) (*process, error) {
	out, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, bin, err)
	}
	p := &process{name: name, cmd: cmd, log: logFile, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// pid is the process id, for /proc readings.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// logTail returns the end of the process's output, for error messages.
func (p *process) logTail() string {
	b, _ := os.ReadFile(p.log)
	const keep = 4000
	if len(b) > keep {
		b = b[len(b)-keep:]
	}
	return strings.TrimSpace(string(b))
}

// stop ends the process: SIGTERM, then SIGKILL if it has not exited
// within grace.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startRedis starts a private redis-server on a free loopback port, keeping
// nothing on disk, and returns when it answers PING.
func startRedis(ctx context.Context, dir string) (*process, string, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, "", errors.New("redis-server not found in PATH: install it (apt-get install -y redis-server redis-tools, or brew install redis) or pass -redis-addr")
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := startProcess("redis-server", bin, []string{
		"--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir,
	}, filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, "", err
	}
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	err = waitFor(ctx, p, 10*time.Second, func(ctx context.Context) error { return client.Ping(ctx).Err() })
	if err != nil {
		p.stop(time.Second)
		return nil, "", fmt.Errorf("redis-server on %s: %w\n%s", addr, err, p.logTail())
	}
	return p, addr, nil
}

// buildServer builds the floodgate binary into dir with the go tool, with
// the tags of the Makefile's and the Dockerfile's builds; it must run
// inside the floodgate module (go run ./cmd/bench does).
func buildServer(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "floodgate")
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "vtprotobuf", "-o", bin, serverPackage)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s (run inside the floodgate module, or pass -server-bin): %w\n%s", serverPackage, err, out)
	}
	return bin, nil
}

// server is the floodgate under test as the tool reaches it.
type server struct {
	grpcAddr  string
	debugAddr string // "" when unknown: no profiles
	pid       int    // 0 when unknown: no CPU or RSS figures
}

// serverDefaults are the flags the tool starts floodgate with, before
// -server-args. Store failures answer UNAVAILABLE, so that the tool counts
// them as errors instead of mistaking fail-open answers for decisions; the
// store deadline is long, so that a saturated server shows its queues as
// latency instead of failing the requests that wait in them.
var serverDefaults = []string{"-failure-mode", "unavailable", "-redis-deadline", "1s", "-log-level", "warn"}

// startServer starts floodgate with the rules at config and counters in
// the Redis at redisAddr (in memory when redisAddr is ""), on free loopback
// ports, with serverDefaults and then extra flags, and returns when its
// /healthcheck answers 200. Its output goes to floodgate.log in dir, so
// that each server the tool starts needs its own dir.
func startServer(ctx context.Context, bin, config, redisAddr, dir string, extra []string) (*process, server, error) {
	var addrs [3]string
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return nil, server{}, err
		}
		addrs[i] = a
	}
	grpcAddr, httpAddr, debugAddr := addrs[0], addrs[1], addrs[2]
	args := []string{"-config", config, "-grpc-addr", grpcAddr, "-http-addr", httpAddr, "-debug-addr", debugAddr}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	args = append(args, serverDefaults...)
	p, err := startProcess("floodgate", bin, append(args, extra...), filepath.Join(dir, "floodgate.log"))
	if err != nil {
		return nil, server{}, err
	}
	err = waitFor(ctx, p, 30*time.Second, answers200("http://"+httpAddr+"/healthcheck"))
	if err != nil {
		p.stop(5 * time.Second)
		return nil, server{}, fmt.Errorf("floodgate: %w\n%s", err, p.logTail())
	}
	return p, server{grpcAddr: grpcAddr, debugAddr: debugAddr, pid: p.pid()}, nil
}

// answers200 is a readiness check for waitFor: a GET of url answers 200.
func answers200(url string) func(context.Context) error {
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: %s", url, resp.Status)
		}
		return nil
	}
}

// waitFor polls ready until it succeeds, p exits, ctx ends or timeout
// passes.
func waitFor(ctx context.Context, p *process, timeout time.Duration, ready func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		attempt, cancel := context.WithTimeout(ctx, time.Second)
		err := ready(attempt)
		cancel()
		switch {
		case err == nil:
			return nil
		case p.exited():
			return fmt.Errorf("exited (%v) before it was ready", p.cmd.ProcessState)
		case ctx.Err() != nil:
			return ctx.Err()
		case time.Now().After(deadline):
			return fmt.Errorf("not ready after %v: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
