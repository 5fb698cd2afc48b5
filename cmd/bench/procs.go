package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/testlog"
)

// child is a process the tool started and must stop: floodgate, the gRPC
// floor or the server of -reloads, with what it has written. Redis and
// Envoy are the harness's own types.
type child struct {
	*harness.Process
	logs fmt.Stringer
}

// startChild starts bin with args, in this process's environment plus env
// ("NAME=value" each), keeping its output for logTail.
func startChild(name, bin string, args []string, env ...string) (*child, error) {
	logs := &testlog.Buffer{}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logs, logs
	p, err := harness.StartProcess(name, cmd)
	if err != nil {
		return nil, err
	}
	return &child{Process: p, logs: logs}, nil
}

// logTail returns the end of the child's output, for error messages.
func (c *child) logTail() string {
	s := c.logs.String()
	const keep = 4000
	if len(s) > keep {
		s = s[len(s)-keep:]
	}
	return strings.TrimSpace(s)
}

// server is the floodgate under test as the tool reaches it.
type server struct {
	grpcAddr  string
	debugAddr string // "" when unknown: no profiles
	httpAddr  string // "" when unknown: no /metrics
	pid       int    // 0 when unknown: no CPU or RSS figures
}

// serverDefaults are the flags the tool starts floodgate with, before
// -server-args. Store failures answer UNAVAILABLE, so that the tool counts
// them as errors instead of mistaking fail-open answers for decisions; the
// store deadline is long, so that a saturated server shows its queues as
// latency instead of failing the requests that wait in them.
var serverDefaults = []string{"-failure-mode", "unavailable", "-redis-deadline", "1s", "-log-level", "warn"}

// startServer starts floodgate (the binary bin) with the rules at config
// and counters in the Redis at redisAddr (in memory when redisAddr is ""),
// on free loopback ports, with serverDefaults and then extra flags, and
// returns when its /healthcheck answers OK (harness.StartFloodgate).
func startServer(ctx context.Context, bin, config, redisAddr string, extra []string) (*child, server, error) {
	args := []string{"-config", config}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	args = append(append(args, serverDefaults...), extra...)
	f, err := harness.StartFloodgate(ctx, harness.Options{Bin: bin, Args: args, Env: os.Environ()})
	if err != nil {
		return nil, server{}, err
	}
	return &child{Process: f.Process, logs: f.Logs}, server{grpcAddr: f.GRPCAddr, debugAddr: f.DebugAddr, httpAddr: f.HTTPAddr, pid: f.Pid()}, nil
}

// stopList is what a mode must stop or remove of what it started.
type stopList []func()

// add adds f, to run before those added earlier.
func (s *stopList) add(f func()) { *s = append(*s, f) }

// run runs them, the last added first.
func (s *stopList) run() {
	for i := len(*s) - 1; i >= 0; i-- {
		(*s)[i]()
	}
}

// setUp provides what the modes need and the options may leave out: a
// private redis-server in dir when needRedis and -redis-addr is empty, and
// when needServer a floodgate binary built into dir when -server-bin is
// empty. What it starts, it adds a stop for to stops.
func setUp(ctx context.Context, o *options, dir string, needRedis, needServer bool, log io.Writer, stops *stopList) (redisAddr, serverBin string, err error) {
	redisAddr, serverBin = o.redisAddr, o.serverBin
	if redisAddr == "" && needRedis {
		rd, err := redistest.Run(dir)
		if err != nil {
			return "", "", fmt.Errorf("%w (or pass -redis-addr)", err)
		}
		stops.add(rd.Stop)
		redisAddr = rd.Addr
		fmt.Fprintf(log, "bench: redis-server on %s\n", rd.Addr)
	}
	if serverBin == "" && needServer {
		fmt.Fprintln(log, "bench: go build ./cmd/server")
		serverBin = filepath.Join(dir, "floodgate")
		if err = harness.Build(ctx, serverBin); err != nil {
			return "", "", fmt.Errorf("%w (or pass -server-bin)", err)
		}
	}
	return redisAddr, serverBin, nil
}
