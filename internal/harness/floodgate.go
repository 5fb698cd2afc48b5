package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/testlog"
)

// Options says how to run floodgate.
type Options struct {
	// Bin is the binary. StartFloodgate needs it (see Build); Start and
	// Run use Binary's when it is "".
	Bin string
	// Args are the flags besides the listen addresses, which
	// StartFloodgate adds unless EnvAddrs is set.
	Args []string
	// Env is the whole environment of the process. Nil means an empty
	// one, so that no variable of the caller's (REDIS_URL, say) changes
	// what runs; pass os.Environ() to inherit the caller's.
	Env []string
	// Dir is the working directory. Start and Run make a temporary one
	// when it is ""; StartFloodgate runs floodgate in the caller's.
	Dir string
	// EnvAddrs passes the listen addresses as the reference server's
	// variables (GRPC_HOST, GRPC_PORT, HOST, PORT, DEBUG_HOST, DEBUG_PORT)
	// instead of flags.
	EnvAddrs bool
	// Unready returns as soon as /healthcheck answers, whatever it says,
	// instead of once it answers OK: for a server whose health follows a
	// store that is down.
	Unready bool
	// NoWait returns as soon as the process has started, without waiting
	// for /healthcheck: for a test that watches how a server starts (the
	// reference exits when Redis does not answer).
	NoWait bool
}

// startTimeout bounds the wait for a started floodgate's /healthcheck. It
// is the time to start on a busy machine, not a measure: a start that
// takes longer fails.
const startTimeout = 30 * time.Second

// Floodgate is a floodgate process started by StartFloodgate or Start.
type Floodgate struct {
	*Process
	// GRPCAddr, HTTPAddr and DebugAddr are the host:port of the gRPC, the
	// HTTP and the debug listener, on 127.0.0.1.
	GRPCAddr, HTTPAddr, DebugAddr string
	// Logs holds what the process has written, stdout and stderr
	// interleaved.
	Logs *testlog.Buffer
	// Conn is a gRPC client connection to GRPCAddr, and RLS Envoy's rate
	// limit service on it, for a test: Start sets them and closes Conn
	// when the test ends. StartFloodgate leaves them nil; its caller dials
	// what it needs.
	Conn *grpc.ClientConn
	RLS  pb.RateLimitServiceClient

	listens []string // what readiness checks it holds (listenAddrs)
}

// StartFloodgate runs floodgate as o says on free loopback ports and
// returns once its /healthcheck answers 200 OK (with o.Unready, once it
// answers at all; with o.NoWait, at once). A port that another process takes between FreeAddr and
// floodgate's listen gets floodgate new ports, up to three times. The
// caller stops it (Stop).
func StartFloodgate(ctx context.Context, o Options) (*Floodgate, error) {
	if o.Bin == "" {
		return nil, errNoBinary
	}
	for attempt := 1; ; attempt++ {
		f, err := launch(ctx, o)
		if err == nil {
			return f, nil
		}
		if f == nil || attempt == PortAttempts || !PortTaken(f.Logs.String()) {
			return nil, err
		}
	}
}

// launch starts floodgate once on free ports and waits until it is
// healthy. When the process ran but did not become healthy, it returns
// the stopped process with the error, for its logs.
func launch(ctx context.Context, o Options) (*Floodgate, error) {
	f := &Floodgate{Logs: &testlog.Buffer{}}
	var err error
	for _, a := range []*string{&f.GRPCAddr, &f.HTTPAddr, &f.DebugAddr} {
		if *a, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	args, env := o.Args, append([]string{}, o.Env...)
	if o.EnvAddrs {
		env = append(env, addrVars("GRPC_", f.GRPCAddr)...)
		env = append(env, addrVars("", f.HTTPAddr)...)
		env = append(env, addrVars("DEBUG_", f.DebugAddr)...)
	} else {
		args = append([]string{"-grpc-addr", f.GRPCAddr, "-http-addr", f.HTTPAddr, "-debug-addr", f.DebugAddr}, args...)
	}
	f.listens = listenAddrs(args, f.GRPCAddr, f.HTTPAddr)
	cmd := exec.Command(o.Bin, args...)
	cmd.Env, cmd.Dir = env, o.Dir
	cmd.Stdout, cmd.Stderr = f.Logs, f.Logs
	if f.Process, err = StartProcess("floodgate", cmd); err != nil {
		return nil, err
	}
	if o.NoWait {
		return f, nil
	}
	if err := WaitReady(ctx, f.Process, startTimeout, f.healthy(o.Unready)); err != nil {
		f.Stop(0)
		return f, fmt.Errorf("floodgate %s: %w\n%s", strings.Join(args, " "), err, f.Logs)
	}
	return f, nil
}

// listenAddrs returns the gRPC and HTTP addresses floodgate listens on
// with args: those given, unless args give others (the last of a flag
// wins), leaving out a port the system picks (":0") and a listener turned
// off ("").
func listenAddrs(args []string, grpcAddr, httpAddr string) []string {
	var addrs []string
	for flag, addr := range map[string]string{"grpc-addr": grpcAddr, "http-addr": httpAddr} {
		for i, a := range args {
			name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
			switch {
			case !strings.HasPrefix(a, "-") || name != flag:
			case hasValue:
				addr = value
			case i+1 < len(args):
				addr = args[i+1]
			}
		}
		if _, port, err := net.SplitHostPort(addr); err == nil && port != "0" {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// addrVars returns the reference server's variables for a listen address:
// prefix+"HOST" and prefix+"PORT".
func addrVars(prefix, addr string) []string {
	host, port, _ := net.SplitHostPort(addr)
	return []string{prefix + "HOST=" + host, prefix + "PORT=" + port}
}

// healthy is WaitReady's check of /healthcheck: 200 "OK", or any answer
// when anyAnswer is set, from a process that holds both its gRPC and HTTP
// ports. A port another program took between FreeAddr and the listen
// stops the process (it logs "address already in use", and
// StartFloodgate tries other ports); until it does, that program's
// answers must not pass for the process's.
func (f *Floodgate) healthy(anyAnswer bool) func(context.Context) error {
	return func(ctx context.Context) error {
		for _, addr := range f.listens {
			if ok, err := f.Process.ListensOn(addr); err != nil || !ok {
				return fmt.Errorf("%s: not listening on %s (%v)", f.Process.Name(), addr, err)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.HTTPAddr+"/healthcheck", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || anyAnswer {
			return err
		}
		if resp.StatusCode != http.StatusOK || string(body) != "OK" {
			return fmt.Errorf("/healthcheck: %s %q", resp.Status, body)
		}
		return nil
	}
}

// Start is StartFloodgate for a test: the binary is Binary's unless o.Bin
// names one, the working directory a temporary one unless o.Dir names one,
// and Conn and RLS are set. The process is killed (no graceful shutdown)
// and Conn closed when t ends. It fails t when floodgate does not start,
// and requires the processes tier (see Require).
func Start(t testing.TB, o Options) *Floodgate {
	t.Helper()
	o = forTest(t, o)
	f, err := StartFloodgate(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Stop(0) })
	f.Conn, err = grpc.NewClient(f.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Conn.Close() })
	f.RLS = pb.NewRateLimitServiceClient(f.Conn)
	return f
}

// forTest fills in what Start and Run leave to the test: the binary and
// the working directory.
func forTest(t testing.TB, o Options) Options {
	t.Helper()
	if o.Bin == "" {
		o.Bin = Binary(t)
	} else {
		Require(t, o.Bin)
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	return o
}

// runTimeout bounds Run: a run that takes longer hangs.
const runTimeout = time.Minute

// Run runs floodgate to completion, as -check, -explain, replay and a
// failed start do, with o's Bin, Args, Env and Dir (see Start), and
// returns its combined output and exit code. It fails t when the binary
// cannot run or runs longer than a minute.
func Run(t testing.TB, o Options) (output string, code int) {
	t.Helper()
	o = forTest(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, o.Bin, o.Args...)
	cmd.Env, cmd.Dir = append([]string{}, o.Env...), o.Dir
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("floodgate %s: still running after %v\n%s", strings.Join(o.Args, " "), runTimeout, out)
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("floodgate %s: %v\n%s", strings.Join(o.Args, " "), err, out)
	}
	return string(out), 0
}
