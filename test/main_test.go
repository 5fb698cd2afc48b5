// Package test holds floodgate's end-to-end tests: they run the binary as a
// process on free ports, started by internal/harness (with a private
// redis-server from its redistest, or on the in-memory store), and drive it
// over gRPC and HTTP as Envoy and operators do. Every test here starts
// processes: they run with -tags processes (make test sets it) and are
// skipped without it.
package test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// repoRoot is the module root (the parent of this directory), absolute:
// the processes run in directories of their own.
var repoRoot = func() string {
	root, err := filepath.Abs("..")
	if err != nil {
		panic(err)
	}
	return root
}()

// TestMain removes the binary the harness builds for the tests.
func TestMain(m *testing.M) {
	os.Exit(harness.Main(m))
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

// proc is a running floodgate process and the test that started it.
type proc struct {
	*harness.Floodgate
	t *testing.T
}

// options of a process, as harness.Options: args besides the listen
// addresses; env the whole environment (nothing is inherited); dir the
// working directory (default a temp dir); envAddrs the listen addresses as
// the reference server's variables; unready waits only for /healthcheck to
// answer, not for it to be OK.
type options struct {
	args     []string
	env      []string
	dir      string
	envAddrs bool
	unready  bool
}

// start runs floodgate on free ports and waits until /healthcheck is OK
// (see harness.Start). The process is killed when the test ends.
func start(t *testing.T, o options) *proc {
	t.Helper()
	f := harness.Start(t, harness.Options{Args: o.args, Env: o.env, Dir: o.dir, EnvAddrs: o.envAddrs, Unready: o.unready})
	return &proc{Floodgate: f, t: t}
}

// kill stops the process at once (SIGKILL) if it still runs.
func (p *proc) kill() { p.Stop(0) }

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) {
	if err := p.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	code, err := p.Wait(timeout)
	if err != nil {
		p.t.Fatalf("%v:\n%s", err, p.Logs)
	}
	return code
}

// call sends a ShouldRateLimit.
func (p *proc) call(req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.RLS.ShouldRateLimit(ctx, req)
}

// mustCall sends a ShouldRateLimit that must succeed.
func (p *proc) mustCall(req *pb.RateLimitRequest) *pb.RateLimitResponse {
	p.t.Helper()
	resp, err := p.call(req)
	if err != nil {
		p.t.Fatalf("ShouldRateLimit(%v): %v\nlogs:\n%s", req, err, p.Logs)
	}
	return resp
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func (p *proc) httpGet(path string) (int, string) {
	return get("http://" + p.HTTPAddr + path)
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
	resp, err := httpClient.Post("http://"+p.HTTPAddr+"/json", "application/json", strings.NewReader(body))
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
// then rename), as editors and ConfigMap updates do. Each is written
// beside dir first: inside it, where a dot file is a rule file as for the
// reference server, a reload could read it half written.
func writeRules(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		f, err := os.CreateTemp(filepath.Dir(dir), "rules-*.tmp")
		if err != nil {
			t.Fatal(err)
		}
		tmp := f.Name()
		f.Close()
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
