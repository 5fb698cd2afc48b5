package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/testlog"
)

// JSON logs give durations as Go writes them ("1.5s"), not nanoseconds.
func TestJSONDurations(t *testing.T) {
	var buf testlog.Buffer
	out := newLogOutput(&buf, "json", nil, &redactor{})
	out.logger.Info("x", "deadline", 1500*time.Millisecond, "boxed", any(20*time.Millisecond))
	var rec map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["deadline"] != "1.5s" || rec["boxed"] != "20ms" {
		t.Errorf("durations %v and %v, want \"1.5s\" and \"20ms\": %s", rec["deadline"], rec["boxed"], buf.String())
	}
}

func TestRedactor(t *testing.T) {
	r := newRedactor([]string{"-redis-auth", "user:flagS3cret", "-redis=redis://a:argS3cret@h:1"},
		envOf("REDIS_AUTH", "envS3cret", "REDIS_SENTINEL_AUTH", "sentS3cret", "REDIS_PERSECOND_URL", "rediss://x:psS3cret@h:notaport"))
	for in, want := range map[string]string{
		`dial redis://bob:other@h:1: refused`:        `dial redis://bob:***@h:1: refused`,
		"WRONGPASS for envS3cret and sentS3cret":     "WRONGPASS for *** and ***",
		"user:flagS3cret then flagS3cret":            "*** then ***",
		`"rediss://x:psS3cret@h:notaport": bad port`: `"rediss://x:***@h:notaport": bad port`,
		"argS3cret alone":                            "*** alone",
		"nothing secret at redis://h:1 or a:b@c ok":  "nothing secret at redis://h:1 or a:b@c ok",
	} {
		if got := r.in(in); got != want {
			t.Errorf("in(%q) = %q, want %q", in, got, want)
		}
	}
}

// secret is the password fed through every path below.
const secret = "S3cretPass"

// Every parse and connect error that can carry a Redis (or Memcached) URL
// or a password is shown without the password: the program runs with the
// password in a URL, REDIS_AUTH, the Sentinel's password, the per-second
// Redis and a flag, at debug level, in text and JSON, and no byte of its
// output holds it.
func TestSecretsInEveryErrorPath(t *testing.T) {
	live := redistest.Start(t)
	// Set after start, which waits for a PING without a password.
	if _, err := live.Do("CONFIG", "SET", "requirepass", "theRightOne"); err != nil {
		t.Fatal(err)
	}
	dead := deadAddr(t)
	rulesDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(rulesDir, "rl.yaml"), []byte("domain: rl\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		env  []string
		want string // in the output, so that the case is known to take its path
	}{
		{"a URL that does not parse", nil, []string{"REDIS_URL", "redis://admin:" + secret + "@host:notaport"}, "invalid port"},
		{"a port nothing listens on", []string{"-redis", "redis://admin:" + secret + "@" + dead}, nil, "connection refused"},
		{"an unknown host", nil, []string{"REDIS_URL", "redis://admin:" + secret + "@no-such-host.invalid:6379"}, "no-such-host.invalid"},
		{"a wrong password", nil, []string{"REDIS_URL", live.Addr, "REDIS_AUTH", secret}, "WRONGPASS"},
		{"a wrong user and password in the URL", nil, []string{"REDIS_URL", "redis://admin:" + secret + "@" + live.Addr}, "WRONGPASS"},
		{"TLS to a plain server", nil, []string{"REDIS_URL", "rediss://admin:" + secret + "@" + live.Addr}, "Redis cannot be used"},
		{"a missing TLS CA", nil, []string{"REDIS_URL", live.Addr, "REDIS_TLS", "true", "REDIS_TLS_CACERT", "/nonexistent/ca.pem", "REDIS_AUTH", "u:" + secret}, "ca.pem"},
		{"Sentinels that do not answer", nil, []string{"REDIS_TYPE", "sentinel", "REDIS_URL", "mymaster," + dead, "REDIS_SENTINEL_AUTH", secret}, "Redis cannot be used"},
		{"a per-second URL that does not parse", nil, []string{"REDIS_URL", dead, "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "redis://u:" + secret + "@h:bad"}, "(set by REDIS_PERSECOND_URL)"},
		{"a per-second Redis that does not answer", nil, []string{"REDIS_URL", dead, "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "redis://u:" + secret + "@" + dead, "REDIS_PERSECOND_AUTH", "v:" + secret}, "per-second"},
		{"a bad value beside a password", nil, []string{"REDIS_URL", dead, "REDIS_AUTH", secret, "REDIS_POOL_SIZE", secret}, "want an integer"},
		{"a flag overriding a password", []string{"-redis-auth", "other"}, []string{"REDIS_URL", dead, "REDIS_AUTH", secret}, "-redis-auth overrides REDIS_AUTH"},
		{"a Memcached address with credentials", nil, []string{"BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "u:" + secret + "@" + dead}, "memcache"},
	}
	for _, tc := range cases {
		for _, format := range []string{"text", "json"} {
			t.Run(tc.name+"/"+format, func(t *testing.T) {
				t.Parallel()
				env := envOf(append([]string{"LOG_LEVEL", "debug", "LOG_FORMAT", format, "FLOODGATE_CONFIG", rulesDir}, tc.env...)...)
				args := append([]string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", "", "-redis-deadline", "50ms"}, tc.args...)
				out := runUntilServing(t, args, env)
				if !strings.Contains(out, tc.want) {
					t.Errorf("the output does not show %q, so the case may not take its path:\n%s", tc.want, out)
				}
				if strings.Contains(out, secret) {
					t.Errorf("the output shows the password:\n%s", out)
				}
				if format == "json" {
					for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
						if !json.Valid([]byte(line)) {
							t.Errorf("not a JSON line: %s", line)
						}
					}
				}
			})
		}
	}
}

// servingRE matches the line saying the listeners are up, in either format.
var servingRE = regexp.MustCompile(`msg"?[=:]"?serving`)

// runUntilServing runs the program until it exits or serves (then stops
// it), and returns all it printed, stdout and stderr.
func runUntilServing(t *testing.T, args []string, env settings.Lookup) string {
	t.Helper()
	var out testlog.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, env, &out, &out) }()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case <-done:
			return out.String()
		case <-deadline:
			cancel()
			<-done
			t.Fatalf("neither served nor exited:\n%s", out.String())
		case <-time.After(20 * time.Millisecond):
			if servingRE.MatchString(out.String()) {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("exit code %d after serving", code)
				}
				return out.String()
			}
		}
	}
}
