// Package test holds floodgate's end-to-end tests: they build the binary
// once, run it as a process on free ports (with a private redis-server from
// internal/redistest, or on the in-memory store) and drive it over gRPC and
// HTTP as Envoy and operators do.
package test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/redistest"
)

// binary is the floodgate binary built by TestMain.
var binary string

// repoRoot is the module root (the parent of this directory).
var repoRoot string

func TestMain(m *testing.M) {
	os.Exit(buildAndRun(m))
}

func buildAndRun(m *testing.M) int {
	dir, err := os.MkdirTemp("", "floodgate-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = filepath.Dir(wd)
	binary = filepath.Join(dir, "floodgate")
	// Built without -race even under go test -race: the binary is the
	// subject, not the test, and a race build is several times slower.
	// Built with the tags of the Makefile's and the Dockerfile's builds.
	build := exec.Command("go", "build", "-tags", "vtprotobuf", "-o", binary, "./cmd/server")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building floodgate: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// backend is where a server keeps its counters.
type backend struct {
	name string
	// args starts what the backend needs and returns the flags for it.
	args func(t *testing.T) (flags []string, redis *redistest.Server)
}

// backends runs a test against Redis and the in-memory twin.
var backends = []backend{
	{"redis", func(t *testing.T) ([]string, *redistest.Server) {
		r := redistest.Start(t)
		return []string{"-redis", r.Addr}, r
	}},
	{"memory", func(t *testing.T) ([]string, *redistest.Server) { return nil, nil }},
}

// proc is a running floodgate process.
type proc struct {
	t                           *testing.T
	cmd                         *exec.Cmd
	grpcAddr, httpAddr, dbgAddr string
	logs                        *testlog.Buffer
	done                        chan struct{}
	conn                        *grpc.ClientConn
	rls                         pb.RateLimitServiceClient
}

// options of a process.
type options struct {
	args []string // flags besides the listen addresses
	env  []string // the whole environment (nothing is inherited)
	dir  string   // working directory; default a temp dir
	// envAddrs passes the listen addresses as the reference server's
	// variables instead of flags.
	envAddrs bool
	// unready waits only for /healthcheck to answer, not for it to be OK,
	// for a process whose health may follow a store that is down.
	unready bool
}

// start runs floodgate on free ports and waits until /healthcheck is OK.
// The process is stopped when the test ends. A port taken by another
// process between FreePort and floodgate's listen (tests run in parallel)
// gets new ports, up to three times.
func start(t *testing.T, o options) *proc {
	t.Helper()
	var p *proc
	for attempt := 1; ; attempt++ {
		var exited bool
		p, exited = launch(t, o)
		if !exited {
			break
		}
		if attempt == 3 || !strings.Contains(p.logs.String(), "address already in use") {
			t.Fatalf("floodgate exited before serving (%v):\n%s", p.cmd.ProcessState, p.logs)
		}
	}
	conn, err := grpc.NewClient(p.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.conn = conn
	p.rls = pb.NewRateLimitServiceClient(conn)
	return p
}

// launch starts floodgate once on free ports and waits until /healthcheck
// is OK; exited reports that it ended before serving instead.
func launch(t *testing.T, o options) (p *proc, exited bool) {
	t.Helper()
	p = &proc{t: t, logs: &testlog.Buffer{}, done: make(chan struct{})}
	gp, hp, dp := redistest.FreePort(t), redistest.FreePort(t), redistest.FreePort(t)
	p.grpcAddr = "127.0.0.1:" + strconv.Itoa(gp)
	p.httpAddr = "127.0.0.1:" + strconv.Itoa(hp)
	p.dbgAddr = "127.0.0.1:" + strconv.Itoa(dp)
	args := o.args
	env := o.env
	if o.envAddrs {
		env = append(env, "HOST=127.0.0.1", "PORT="+strconv.Itoa(hp), "GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(gp),
			"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(dp))
	} else {
		args = append([]string{"-grpc-addr", p.grpcAddr, "-http-addr", p.httpAddr, "-debug-addr", p.dbgAddr}, args...)
	}
	p.cmd = exec.Command(binary, args...)
	p.cmd.Env = env
	if p.cmd.Env == nil {
		p.cmd.Env = []string{}
	}
	p.cmd.Dir = o.dir
	if p.cmd.Dir == "" {
		p.cmd.Dir = t.TempDir()
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start floodgate: %v", err)
	}
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)

	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-p.done:
			return p, true
		default:
		}
		if code, _ := p.httpGet("/healthcheck"); code == http.StatusOK || o.unready && code != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("floodgate not healthy after 15s:\n%s", p.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return p, false
}

// kill stops the process if it still runs.
func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Kill()
		<-p.done
	}
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		p.t.Fatalf("floodgate still running after %v:\n%s", timeout, p.logs)
		return -1
	}
}

// call sends a ShouldRateLimit.
func (p *proc) call(req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.rls.ShouldRateLimit(ctx, req)
}

// mustCall sends a ShouldRateLimit that must succeed.
func (p *proc) mustCall(req *pb.RateLimitRequest) *pb.RateLimitResponse {
	p.t.Helper()
	resp, err := p.call(req)
	if err != nil {
		p.t.Fatalf("ShouldRateLimit(%v): %v\nlogs:\n%s", req, err, p.logs)
	}
	return resp
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func (p *proc) httpGet(path string) (int, string) {
	return get("http://" + p.httpAddr + path)
}

func get(url string) (int, string) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (p *proc) postJSON(body string) (int, string) {
	resp, err := httpClient.Post("http://"+p.httpAddr+"/json", "application/json", strings.NewReader(body))
	if err != nil {
		p.t.Fatalf("POST /json: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// metric returns the value of the series of /metrics whose line starts
// with series (name and labels exactly as exposed), or -1 when absent.
func (p *proc) metric(series string) float64 {
	p.t.Helper()
	code, body := p.httpGet("/metrics")
	if code != http.StatusOK {
		p.t.Fatalf("/metrics: %d %s", code, body)
	}
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				p.t.Fatalf("metric line %q: %v", line, err)
			}
			return v
		}
	}
	return -1
}

// metricSum sums the series of the metric name whose labels include each
// of want (`mode="deny"`); with no want, all of them. 0 when there is none.
func (p *proc) metricSum(name string, want ...string) float64 {
	p.t.Helper()
	code, body := p.httpGet("/metrics")
	if code != http.StatusOK {
		p.t.Fatalf("/metrics: %d %s", code, body)
	}
	sum := 0.0
lines:
	for _, line := range strings.Split(body, "\n") {
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		for _, w := range want {
			if !strings.Contains(series[len(name):], w) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			p.t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// writeRules writes files (name -> YAML) into dir, atomically each (write
// then rename), as editors and ConfigMap updates do.
func writeRules(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// eventually retries f until it returns "" or timeout passes, then fails
// with f's last complaint.
func eventually(t *testing.T, timeout time.Duration, f func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
