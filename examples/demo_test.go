package examples_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/testlog"
)

// demoFlags are the demo's address flags with the addresses it listens on
// by default: the compose file's ports, which the README's commands use.
var demoFlags = []struct{ flag, addr, readme string }{
	{"http", "127.0.0.1:8080", readmeHTTP},
	{"grpc", "127.0.0.1:8081", readmeGRPC},
	{"envoy", "127.0.0.1:10000", readmeEnvoy},
	{"envoy-tcp", "127.0.0.1:10001", readmeEnvoyTCP},
	{"envoy-admin", "127.0.0.1:9901", ""},
	{"envoy-tcp-admin", "127.0.0.1:9902", ""},
	{"redis", "127.0.0.1:16379", ""},
	{"backend", "127.0.0.1:10080", ""},
}

// TestReadmeDemo runs `make demo`'s program (internal/demo), with the
// repository's config/ and examples/envoy*.yaml, then the README's commands
// against it in order, as TestReadmeCommands does against parts it starts
// itself; then it stops the demo with SIGINT, as Ctrl-C does, and checks
// that every process the demo started is gone and every port closed.
//
// The demo listens on the README's ports when they are all free; on a
// machine where something holds one, it runs on free ports instead and the
// commands' addresses are moved there.
func TestReadmeDemo(t *testing.T) {
	for _, p := range []string{"curl", "bash", "redis-server"} {
		harness.Require(t, p)
	}
	envoy := harness.Require(t, "envoy")
	buildGrpcurl(t)
	dir := t.TempDir()
	copyDir(t, filepath.Join(repoRoot, "config"), filepath.Join(dir, "config"))
	// examples/ is the repository's, which the demo reads and the
	// README's grpcurl commands run in.
	env := newShellEnv(t, dir, map[string]string{})
	addrs, args := demoAddresses(t)
	demo := startDemo(t, dir, envoy, args)

	for _, f := range demoFlags {
		if f.readme != "" {
			env.addrs[f.readme] = addrs[f.flag]
		}
	}
	ran := 0
	for _, b := range parseReadme(t, filepath.Join(repoRoot, "README.md")) {
		ran += env.runBlock(b)
	}
	if ran == 0 {
		t.Error("no README command ran against the demo")
	}
	// Every call reached floodgate in time: none failed open, which would
	// have let through what the README shows refused.
	for admin, prefix := range map[string]string{addrs["envoy-admin"]: "cluster.backend.ratelimit.", addrs["envoy-tcp-admin"]: "ratelimit.tcp_demo."} {
		stats := adminCounters(t, admin, prefix)
		if stats[prefix+"error"] != 0 || stats[prefix+"over_limit"] == 0 {
			t.Errorf("Envoy's %s* counters: %v: want over_limit answers and no error", prefix, stats)
		}
	}
	demo.interrupt(t)
	for _, f := range demoFlags {
		if c, err := net.DialTimeout("tcp", addrs[f.flag], time.Second); err == nil {
			c.Close()
			t.Errorf("%s (-%s) still accepts connections after the demo stopped", addrs[f.flag], f.flag)
		}
	}
	if t.Failed() {
		t.Logf("the demo's output:\n%s", demo.out)
	}
}

// demoAddresses returns the demo's addresses by flag, and the flags that
// set them: none when the default ports are all free.
func demoAddresses(t *testing.T) (map[string]string, []string) {
	addrs := map[string]string{}
	free := true
	for _, f := range demoFlags {
		addrs[f.flag] = f.addr
		l, err := net.Listen("tcp", f.addr)
		if err != nil {
			free = false
			continue
		}
		l.Close()
	}
	if free {
		return addrs, nil
	}
	t.Logf("a port of the demo is taken on this machine: the demo runs on free ports, and the commands' addresses move there")
	var args []string
	for _, f := range demoFlags {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs[f.flag] = l.Addr().String()
		l.Close()
		args = append(args, "-"+f.flag, addrs[f.flag])
	}
	return addrs, args
}

// demoProc is the running demo.
type demoProc struct {
	cmd  *exec.Cmd
	out  *testlog.Buffer
	pids []int // of the processes it started, as it printed them
	// exited is closed once the demo has exited, with waitErr set.
	exited  chan struct{}
	waitErr error
	// stopped is set once interrupt ran.
	stopped bool
}

var demoPIDRE = regexp.MustCompile(`\[pid (\d+)\]`)

// startDemo builds internal/demo, runs it in dir with floodgateBinary, and
// returns once it printed "ready". It is interrupted when the test ends,
// if the test has not done so.
func startDemo(t *testing.T, dir, envoy string, args []string) *demoProc {
	t.Helper()
	bin := filepath.Join(tempRoot, "demo")
	if out, err := exec.Command(harness.Require(t, "go"), "build", "-o", bin, "github.com/floodgate/floodgate/internal/demo").CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	d := &demoProc{out: &testlog.Buffer{}, exited: make(chan struct{})}
	d.cmd = exec.Command(bin, append(args, "-floodgate", floodgateBinary(t))...)
	d.cmd.Dir = dir
	d.cmd.Env = append(os.Environ(), "ENVOY_BIN="+envoy)
	d.cmd.Stderr = d.out
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			fmt.Fprintln(d.out, sc.Text())
			if m := demoPIDRE.FindStringSubmatch(sc.Text()); m != nil {
				pid, _ := strconv.Atoi(m[1])
				d.pids = append(d.pids, pid)
			}
			if sc.Text() == "ready" {
				close(ready)
			}
		}
		io.Copy(io.Discard, stdout)
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-d.exited:
		default:
			if !d.stopped {
				d.interrupt(t)
			}
		}
	})
	select {
	case <-ready:
		return d
	case <-d.exited:
		t.Fatalf("the demo exited before it was ready: %v\n%s", d.waitErr, d.out)
	case <-time.After(3 * time.Minute):
		t.Fatalf("the demo was not ready within 3 minutes:\n%s", d.out)
	}
	return nil
}

// interrupt sends SIGINT, as Ctrl-C does, and checks that the demo exits 0
// with every process it started gone. The bound covers the demo's own: 15 s
// per process before it kills one.
func (d *demoProc) interrupt(t *testing.T) {
	t.Helper()
	d.stopped = true
	d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.exited:
		if d.waitErr != nil {
			t.Errorf("the demo exited with %v after SIGINT:\n%s", d.waitErr, d.out)
		}
	case <-time.After(90 * time.Second):
		d.cmd.Process.Kill()
		t.Fatalf("the demo did not stop within 90s of SIGINT:\n%s", d.out)
	}
	if len(d.pids) < 4 {
		t.Errorf("the demo printed %d process ids, want Redis, floodgate and two Envoys:\n%s", len(d.pids), d.out)
	}
	for _, pid := range d.pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d, which the demo started, is still there after it stopped (%v)", pid, err)
		}
	}
}

// adminCounters returns the counters of an Envoy admin page whose names
// start with prefix.
func adminCounters(t *testing.T, admin, prefix string) map[string]int64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/stats?usedonly&filter=" + url.QueryEscape("^"+regexp.QuoteMeta(prefix)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := map[string]int64{}
	for _, l := range strings.Split(string(body), "\n") {
		name, v, ok := strings.Cut(l, ": ")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			out[name] = n
		}
	}
	return out
}
