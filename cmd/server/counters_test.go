package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/testlog"
)

// countersRules is the rule file of the command's tests.
const countersRules = `domain: t
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 4}
`

// countersServing finds the HTTP and debug listeners in the server's log.
var countersServing = regexp.MustCompile(`msg=serving .*http=(\S+) debug=(\S+)`)

// countersServer runs the server with countersRules and env, its debug
// listener on a port the system picks (DEBUG_PORT=0, so that no other
// process can take it first), until the test ends. It returns the
// environment of the command, which gives that port as DEBUG_PORT (so
// that the command finds the listener as it would the server's), the
// HTTP listener's address and the server's logs.
func countersServer(t *testing.T, env ...string) (settings.Lookup, string, *testlog.Buffer) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.yaml"), []byte(countersRules), 0o644); err != nil {
		t.Fatal(err)
	}
	lookup := envOf(append([]string{"FLOODGATE_CONFIG", dir, "DEBUG_PORT", "0"}, env...)...)
	logs := &testlog.Buffer{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0"}, lookup, &testlog.Buffer{}, logs)
	}()
	t.Cleanup(func() { stop(); <-done })
	var m []string
	if !waitFor(20*time.Second, func() bool { m = countersServing.FindStringSubmatch(logs.String()); return m != nil }) {
		t.Fatalf("not serving:\n%s", logs)
	}
	_, port, err := net.SplitHostPort(m[2])
	if err != nil {
		t.Fatalf("debug listener %q: %v", m[2], err)
	}
	return envOf("DEBUG_PORT", port), m[1], logs
}

// runCounters runs `floodgate counters args...` and returns its exit
// code, stdout and stderr.
func runCounters(t *testing.T, env settings.Lookup, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr testlog.Buffer
	code := run(context.Background(), append([]string{"counters"}, args...), env, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// The command against a running server, on the in-memory store and on
// Redis: get shows what requests used, reset lets the whole limit through
// again, the server logs the reset with the command's address and counts
// it, and -json prints the endpoint's answer.
func TestCountersCommand(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  func(t *testing.T) []string
	}{
		{"memory", func(*testing.T) []string { return nil }},
		{"redis", func(t *testing.T) []string { return []string{"REDIS_URL", redistest.Start(t).Addr} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, httpAddr, logs := countersServer(t, tc.env(t)...)
			for range 3 {
				get(t, "POST", "http://"+httpAddr+"/json", `{"domain":"t","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`)
			}
			code, out, errOut := runCounters(t, env, "get", "t", "user=alice")
			row := regexp.MustCompile(`(?m)^t\.user +4 per day \(fixed_window\) +enforce +3/4 +1 +[0-9hm.]+s +"r`)
			if code != 0 || !strings.Contains(out, "t user=alice: rule t.user applies") || !row.MatchString(out) {
				t.Fatalf("get: exit %d\n%s%s", code, out, errOut)
			}
			code, out, errOut = runCounters(t, env, "reset", "t", "user=alice")
			row = regexp.MustCompile(`(?m)^t\.user +4 per day \(fixed_window\) +enforce +0/4 +4 +[0-9hm.]+s +3 +"r`)
			if code != 0 || !strings.Contains(out, "BEFORE") || !row.MatchString(out) {
				t.Fatalf("reset: exit %d\n%s%s", code, out, errOut)
			}
			if !regexp.MustCompile(`level=WARN msg="counters reset" peer=127\.0\.0\.1:\d+ user_agent=floodgate-counters domain=t descriptor="user=alice" rule=t\.user counters=1 used_before=\[3\]`).MatchString(logs.String()) {
				t.Errorf("the server's log does not name the reset's peer:\n%s", logs)
			}
			if m := get(t, "GET", "http://"+httpAddr+"/metrics", ""); !strings.Contains(m, `floodgate_counter_resets_total{domain="t",rule="t.user"} 1`) {
				t.Errorf("/metrics does not count the reset")
			}
			code, out, _ = runCounters(t, env, "-json", "get", "t", "user=alice")
			var a counters.Answer
			if err := json.Unmarshal([]byte(out), &a); code != 0 || err != nil || len(a.Limits) != 1 || a.Limits[0].Used != 0 || a.Limits[0].Remaining != 4 {
				t.Errorf("-json get: exit %d, %v\n%s", code, err, out)
			}
			code, _, errOut = runCounters(t, env, "get", "-addr", httpAddr, "t", "user=alice")
			if code != 1 || !strings.Contains(errOut, "403 Forbidden") || !strings.Contains(errOut, "debug listener only") {
				t.Errorf("against the HTTP listener: exit %d, want 1 naming the debug listener:\n%s", code, errOut)
			}
		})
	}
}

// The exit codes: 3 when no counted limit applies, 2 for a bad command
// line, 1 when the server cannot be asked; -h prints the usage.
func TestCountersCommandExitCodes(t *testing.T) {
	env, _, _ := countersServer(t)
	for _, tc := range []struct {
		args []string
		code int
		want string // in stdout or stderr
	}{
		{[]string{"get", "t", "nobody=x"}, 3, "entry 1 (nobody) matches no rule"},
		{[]string{"reset", "nope", "user=x"}, 3, `no rule file declares domain "nope"`},
		{[]string{"get", "t"}, 2, "get needs a domain and at least one key=value entry"},
		{[]string{"look", "t", "user=x"}, 2, `want get or reset`},
		{[]string{"get", "t", "user"}, 2, `entry "user": want key=value`},
		{[]string{"get", "-timeout", "0s", "t", "user=x"}, 2, "-timeout 0s: must be positive"},
		{[]string{"get", "-addr", deadAddr(t), "t", "user=x"}, 1, "asking the debug listener"},
		{[]string{"-h"}, 0, "Exit codes: 0 the counters were shown or reset"},
		{[]string{"reset", "-h"}, 0, "-addr string"},
	} {
		code, out, errOut := runCounters(t, env, tc.args...)
		if code != tc.code || !strings.Contains(out+errOut, tc.want) {
			t.Errorf("counters %q: exit %d, want %d with %q:\n%s%s", tc.args, code, tc.code, tc.want, out, errOut)
		}
	}
}

// Without -addr the command dials the debug listener the environment
// gives the server: loopback for an unspecified host.
func TestCountersDefaultAddr(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "127.0.0.1:6070"},
		{[]string{"DEBUG_PORT", "7000"}, "127.0.0.1:7000"},
		{[]string{"DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", "7001"}, "127.0.0.1:7001"},
		{[]string{"DEBUG_HOST", "::", "DEBUG_PORT", "7002"}, "[::1]:7002"},
		{[]string{"FLOODGATE_DEBUG_ADDR", "10.1.2.3:7003"}, "10.1.2.3:7003"},
		{[]string{"FLOODGATE_DEBUG_ADDR", ":7004"}, "127.0.0.1:7004"},
		// An environment the server would refuse: the listener's default.
		{[]string{"FLOODGATE_DEBUG_ADDR", "10.1.2.3:7005", "LOG_LEVEL", "loud"}, "127.0.0.1:6070"},
	} {
		if got := defaultDebugAddr(envOf(tc.env...)); got != tc.want {
			t.Errorf("%q: %s, want %s", tc.env, got, tc.want)
		}
	}
}
