package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
)

// deadAddr is a loopback address that refuses connections until the test
// ends: the local port of a connection the test holds open, which no
// server can listen on meanwhile. (A port found free and closed could be
// taken by a server that another test process starts.)
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c.LocalAddr().String()
}

// freeAddr is a loopback address free to listen on a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// waitFor polls cond every 10ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func get(t *testing.T, method, url, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Redis passwords, in REDIS_AUTH or in the URL, appear in no log line (at
// debug level, with Redis down so that failures are logged) and in no
// page of the HTTP and debug listeners.
func TestSecretsAreNeverShown(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rl.yaml"), []byte("domain: rl\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 5}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	secrets := []string{"urlsecret", "authsecret"}
	env := envOf(
		"REDIS_URL", "redis://admin:urlsecret@"+deadAddr(t)+"/0",
		"REDIS_AUTH", "acluser:authsecret",
		"LOG_LEVEL", "debug",
		"FLOODGATE_CONFIG", dir,
	)
	logs := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", "127.0.0.1:0", "-redis-deadline", "20ms"}, env, io.Discard, logs)
	}()
	serving := regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+) debug=(\S+)`)
	var m []string
	for deadline := time.Now().Add(10 * time.Second); m == nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the server did not start:\n%s", logs)
		}
		m = serving.FindStringSubmatch(logs.String())
	}
	var pages []string
	for _, u := range []string{"http://" + m[2] + "/rlconfig", "http://" + m[3] + "/rlconfig", "http://" + m[2] + "/metrics", "http://" + m[2] + "/healthcheck"} {
		pages = append(pages, get(t, "GET", u, ""))
	}
	if !strings.Contains(pages[0], "store: redis") {
		t.Errorf("/rlconfig does not describe the store:\n%s", pages[0])
	}
	// A decision while Redis is down logs the store failure.
	get(t, "POST", "http://"+m[2]+"/json", `{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`)
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit code %d", code)
	}
	out := logs.String()
	if !strings.Contains(out, "store failed") || !strings.Contains(out, "admin:***@") && !strings.Contains(out, "***@") {
		t.Errorf("the logs do not show the failure and the redacted address, so the test proves little:\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the logs contain %q:\n%s", s, out)
		}
		for i, p := range pages {
			if strings.Contains(p, s) {
				t.Errorf("page %d contains %q", i, s)
			}
		}
	}
}
