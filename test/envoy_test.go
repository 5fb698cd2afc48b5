package test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
)

// envoyFront is examples/envoy.yaml run by the real Envoy on the loopback,
// in front of a test backend, asking the floodgate processes it was given.
type envoyFront struct {
	*envoytest.Envoy
	// URL is Envoy's HTTP listener, e.g. "http://127.0.0.1:40123".
	URL string
	// BackendHits counts the requests that reached the backend.
	BackendHits *atomic.Int64
}

// startEnvoy runs examples/envoy.yaml with its floodgate cluster pointed at
// grpcAddrs and its backend at a fresh test server that answers 200 "ok".
// edit, when not nil, changes the bootstrap's text first (for example
// failure_mode_deny); tests that stand for the shipped file pass nil.
func startEnvoy(t *testing.T, edit func(string) string, grpcAddrs ...string) *envoyFront {
	t.Helper()
	return startEnvoyWith(t, func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }, edit, grpcAddrs...)
}

// startEnvoyWith is startEnvoy with a backend of its own: backend answers
// the requests Envoy lets through.
func startEnvoyWith(t *testing.T, backend http.HandlerFunc, edit func(string) string, grpcAddrs ...string) *envoyFront {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "examples", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := string(raw)
	if edit != nil {
		edited := edit(conf)
		if edited == conf {
			t.Fatal("startEnvoy: the edit changed nothing in examples/envoy.yaml")
		}
		conf = edited
	}
	hits := &atomic.Int64{}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		backend(w, r)
	}))
	t.Cleanup(server.Close)
	e := envoytest.Start(t, envoytest.Config{
		Bootstrap: []byte(conf),
		Upstreams: map[string][]string{
			"backend":   {server.Listener.Addr().String()},
			"floodgate": grpcAddrs,
		},
	})
	return &envoyFront{Envoy: e, URL: "http://" + e.Listener("http"), BackendHits: hits}
}

// replace returns an edit for startEnvoy that replaces old with new once and
// fails the test when old is not in the file.
func replace(t *testing.T, old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			t.Fatalf("examples/envoy.yaml has no %q", old)
		}
		return strings.Replace(s, old, new, 1)
	}
}

// get sends a GET through Envoy with the given header pairs ("name", "value",
// ...) and returns the response, its body read and closed.
func (f *envoyFront) get(t *testing.T, path string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s through envoy: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// waitHealthy waits until Envoy's health check sees want healthy hosts in
// the floodgate cluster.
func (f *envoyFront) waitHealthy(t *testing.T, want int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, func() string {
		h, err := f.HostHealth("floodgate")
		if err != nil {
			return err.Error()
		}
		n := 0
		for _, flags := range h {
			if flags == "healthy" {
				n++
			}
		}
		if n != want {
			return fmt.Sprintf("envoy sees %d healthy floodgate hosts, want %d: %v", n, want, h)
		}
		return ""
	})
}

// TestEnvoyFront checks the helper itself: the shipped Envoy config in front
// of floodgate answers and writes the rate-limit headers.
func TestEnvoyFront(t *testing.T) {
	p := start(t, options{args: []string{"-config", filepath.Join(repoRoot, "config")}})
	f := startEnvoy(t, nil, p.GRPCAddr)
	resp, body := f.get(t, "/", "x-forwarded-for", "203.0.113.99")
	if resp.StatusCode != http.StatusOK || body != "ok" || resp.Header.Get("X-RateLimit-Limit") == "" {
		t.Fatalf("GET / through envoy: %d %q %v", resp.StatusCode, body, resp.Header)
	}
}

// ask sends one GET / through Envoy as client (an address Envoy takes from
// X-Forwarded-For for the remote_address descriptor) and returns what the
// client saw: the status and Envoy's X-RateLimit-Limit, "-" when Envoy wrote
// none (a status without a limit, or no answer from floodgate at all), e.g.
// "200 10, 10;w=1" or "500 -". A transport error is an answer too
// ("error: ..."), so that concurrent senders need not fail the test.
func (f *envoyFront) ask(client string) outcome {
	start := time.Now()
	req, err := http.NewRequest(http.MethodGet, f.URL+"/", nil)
	var resp *http.Response
	if err == nil {
		req.Header.Set("x-forwarded-for", client)
		resp, err = httpClient.Do(req)
	}
	if err != nil {
		return outcome{tag: client, start: start, took: time.Since(start), answer: "error: " + err.Error()}
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	limit := resp.Header.Get("X-RateLimit-Limit")
	if limit == "" {
		limit = "-"
	}
	return outcome{tag: client, start: start, took: time.Since(start), answer: fmt.Sprintf("%d %s", resp.StatusCode, limit)}
}

// rateLimitStats returns Envoy's counters of the ratelimit filter on the
// backend cluster (ok, over_limit, error, failure_mode_allowed), with 0 for
// those Envoy has not created yet.
func (f *envoyFront) rateLimitStats(t *testing.T) map[string]int64 {
	t.Helper()
	const prefix = "cluster.backend.ratelimit."
	c, err := f.Counters(prefix)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, name := range []string{"ok", "over_limit", "error", "failure_mode_allowed"} {
		out[name] = c[prefix+name]
	}
	return out
}
