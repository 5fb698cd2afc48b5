package server

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/envoy"
)

// stableRules has a limit of each kind /rlconfig describes: a plain one,
// one that replaces another, flags (value_to_metric, which /rlconfig does
// not list), a rule without a limit, and a warning.
const stableRules = `domain: srv
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: api_key
    rate_limit: {name: api_key_daily, unit: day, requests_per_unit: 1000}
  - key: api_key
    value: gold
    shadow_mode: true
    failure_mode: deny
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100, replaces: [{name: api_key_daily}]}
  - key: path
    descriptors:
      - key: method
  - key: zero
    rate_limit: {unit: second}
`

// The answers of every HTTP endpoint are the same bytes from every build:
// protojson's spacing, which varies between builds on purpose, and the
// protobuf module's unstable error prefix never reach a client.
func TestHTTPAnswersAreExactBytes(t *testing.T) {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	s, _ := runningWith(t, Options{}, envoy.Options{
		Now:     func() time.Time { return now },
		Headers: envoy.Headers{Style: envoy.HeadersReference},
	}, stableRules)
	base := "http://" + s.Addrs().HTTP.String()
	userA := `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"a"}]},{"entries":[{"key":"api_key","value":"k"}]}]}`
	const (
		jsonType = "application/json"
		textType = "text/plain; charset=utf-8"
	)
	tests := []struct {
		name, method, path, body string
		code                     int
		ctype, want              string
	}{
		{"OK with statuses and headers", "POST", "/json", userA, 200, jsonType,
			`{"overallCode":"OK","statuses":[{"code":"OK","currentLimit":{"requestsPerUnit":1,"unit":"DAY"},"durationUntilReset":"32155s"},{"code":"OK","currentLimit":{"name":"api_key_daily","requestsPerUnit":1000,"unit":"DAY"},"limitRemaining":999,"durationUntilReset":"32155s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"1"},{"key":"RateLimit-Remaining","value":"0"},{"key":"RateLimit-Reset","value":"32155"}]}`},
		{"OVER_LIMIT with statuses and headers", "POST", "/json", userA, 429, jsonType,
			`{"overallCode":"OVER_LIMIT","statuses":[{"code":"OVER_LIMIT","currentLimit":{"requestsPerUnit":1,"unit":"DAY"},"durationUntilReset":"32155s"},{"code":"OK","currentLimit":{"name":"api_key_daily","requestsPerUnit":1000,"unit":"DAY"},"limitRemaining":999,"durationUntilReset":"32155s"}],"responseHeadersToAdd":[{"key":"RateLimit-Limit","value":"1"},{"key":"RateLimit-Remaining","value":"0"},{"key":"RateLimit-Reset","value":"32155"},{"key":"Retry-After","value":"32155"}]}`},
		{"unknown domain", "POST", "/json", `{"domain":"nope","descriptors":[{"entries":[{"key":"user","value":"a"}]}]}`, 200, jsonType,
			`{"overallCode":"OK","statuses":[{"code":"OK"}]}`},
		{"bad JSON", "POST", "/json", "{", 400, textType,
			"invalid RateLimitRequest: unexpected EOF\n"},
		// The protobuf module's own message, without its unstable prefix.
		{"unknown field", "POST", "/json", `{"domian":"srv"}`, 400, textType,
			"invalid RateLimitRequest: (line 1:2): unknown field \"domian\"\n"},
		{"empty domain", "POST", "/json", `{"descriptors":[{"entries":[{"key":"k"}]}]}`, 400, textType,
			"domain: must not be empty\n"},
		{"GET /json", "GET", "/json", "", 405, textType, "POST a RateLimitRequest as JSON\n"},
		{"too large", "POST", "/json", `{"domain":"` + strings.Repeat("x", DefaultMaxMessageBytes) + `"}`, 413, textType,
			"reading the body: http: request body too large\n"},
		{"healthcheck", "GET", "/healthcheck", "", 200, textType, "OK"},
	}
	for _, tc := range tests {
		req, err := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Content-Type") != tc.ctype || string(b) != tc.want {
			t.Errorf("%s: %d %s\n%q\nwant %d %s\n%q", tc.name, resp.StatusCode, resp.Header.Get("Content-Type"), b, tc.code, tc.ctype, tc.want)
		}
	}
}

// /rlconfig reads top to bottom: the loads, health, the store, warnings,
// then one line per limit, each said once.
func TestRLConfigReadsWell(t *testing.T) {
	memory := func() health.Store {
		return health.Store{Name: "memory", Healthy: true, Reached: true, Detail: "counters in this process only"}
	}
	s, _ := runningWith(t, Options{Store: memory}, envoy.Options{}, stableRules)
	code, body := do(t, "GET", "http://"+s.Addrs().HTTP.String()+"/rlconfig", "")
	body = regexp.MustCompile(`(?m)^loaded_at: \S+$`).ReplaceAllString(body, "loaded_at: T")
	body = regexp.MustCompile(`/\S+/srv\.yaml:`).ReplaceAllString(body, "srv.yaml:")
	want := `version: 1
loaded_at: T
reloads: 0
failures: 0
last_error: none
health: SERVING
store: memory healthy (counters in this process only)
warning: srv.yaml:17:17: descriptors[4].rate_limit.requests_per_unit: missing, so 0: every request is denied (write requests_per_unit: 0 to say so)

srv.user: 1 per day (fixed_window) (srv.yaml:4:17)
srv.api_key: api_key_daily: 1000 per day (fixed_window) (srv.yaml:6:17)
srv.api_key_gold: 100 per minute (fixed_window), replaces api_key_daily, shadow_mode, failure_mode deny (srv.yaml:12:17)
srv.path: no limit (srv.yaml:13:5)
srv.path.method: no limit (srv.yaml:15:9)
srv.zero: 0 per second (fixed_window) (srv.yaml:17:17)
`
	if code != 200 || body != want {
		t.Errorf("/rlconfig: %d\n%s\nwant\n%s", code, body, want)
	}
}

// Without Options.Store there is no store to describe or to wait for.
func TestRLConfigWithoutStore(t *testing.T) {
	s, _ := running(t, Options{})
	_, body := do(t, "GET", "http://"+s.Addrs().HTTP.String()+"/rlconfig", "")
	if !strings.Contains(body, "\nhealth: SERVING\n") || strings.Contains(body, "\nstore: ") {
		t.Errorf("/rlconfig: want SERVING and no store line:\n%s", body)
	}
}

// /rlconfig says why health is NOT_SERVING, and how the store stands.
func TestRLConfigSaysWhyNotServing(t *testing.T) {
	s, _ := running(t, Options{Store: func() health.Store {
		return health.Store{Name: "redis", Detail: "breaker open; last failure 1s ago: connection refused"}
	}})
	_, body := do(t, "GET", "http://"+s.Addrs().HTTP.String()+"/rlconfig", "")
	want := "\nhealth: NOT_SERVING: store redis has not answered since start; readiness waits until it has\n" +
		"store: redis unhealthy, not reached since start (breaker open; last failure 1s ago: connection refused)\n"
	if !strings.Contains(body, want) {
		t.Errorf("/rlconfig lacks\n%s\n%s", want, body)
	}
}

// Once the listeners are up, one line names them and the URLs to try.
func TestStartupLogNamesEndpoints(t *testing.T) {
	logs := &testlog.Buffer{}
	s, _ := running(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	a := s.Addrs()
	base := "http://" + a.HTTP.String()
	want := fmt.Sprintf(`level=INFO msg=serving grpc=%s http=%s debug=%s healthcheck=%s/healthcheck rlconfig=%s/rlconfig json=%s/json metrics=%s/metrics`+"\n",
		a.GRPC, a.HTTP, a.Debug, base, base, base, base)
	if !strings.Contains(logs.String(), want) {
		t.Errorf("no line\n%s\nin\n%s", want, logs)
	}
	for addr, want := range map[string]string{
		"[::]:8080":      "localhost:8080",
		"0.0.0.0:8080":   "localhost:8080",
		"127.0.0.1:8080": "127.0.0.1:8080",
		"[::1]:8080":     "[::1]:8080",
		"10.0.0.5:80":    "10.0.0.5:80",
	} {
		tcp, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := urlHost(tcp); got != want {
			t.Errorf("urlHost(%s) = %s, want %s", addr, got, want)
		}
	}
}

// TestDebugIndexAndStats: the debug listener lists its endpoints at / and
// serves the expvar variables at /stats, in the reference server's formats
// ("path: help", "name: value"); another unknown path is 404.
func TestDebugIndexAndStats(t *testing.T) {
	s, _ := running(t, Options{})
	base := "http://" + s.Addrs().Debug.String()
	code, body := do(t, "GET", base+"/", "")
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if code != 200 || !slices.IsSorted(lines) || !slices.Contains(lines, "/stats: print out stats") ||
		!slices.Contains(lines, "/rlconfig: print out the currently loaded configuration for debugging") {
		t.Errorf("/: %d, %q: want every endpoint as path: help, sorted", code, lines)
	}
	for _, l := range lines {
		path, _, _ := strings.Cut(l, ": ")
		// A profile and a trace last 30 s and 1 s unless told: a second
		// answers as surely, and leaves the quick tier quick.
		if c, _ := do(t, "GET", base+path+"?seconds=1", ""); c != 200 {
			t.Errorf("%s, listed at /: %d", path, c)
		}
	}
	code, body = do(t, "GET", base+"/stats", "")
	if code != 200 || !strings.Contains(body, "cmdline: [") || !strings.Contains(body, `memstats: {"Alloc":`) {
		t.Errorf("/stats: %d %.200q", code, body)
	}
	if code, _ := do(t, "GET", base+"/nothing", ""); code != 404 {
		t.Errorf("/nothing: %d, want 404", code)
	}
}

// TestJSONOverrides: a /json request with a limit override is refused,
// naming the descriptor and the setting, unless Options.JSONOverrides.
func TestJSONOverrides(t *testing.T) {
	req := `{"domain":"srv","descriptors":[{"entries":[{"key":"user","value":"o"}]},{"entries":[{"key":"user","value":"p"}],"limit":{"requestsPerUnit":100,"unit":"DAY"}}]}`
	for _, tc := range []struct {
		accept bool
		code   int
		want   string
	}{
		{false, 400, "descriptors[1].limit: limit overrides are refused on /json (-json-overrides, FLOODGATE_JSON_OVERRIDES, accepts them)"},
		{true, 200, `"requestsPerUnit":100`},
	} {
		s, _ := running(t, Options{JSONOverrides: tc.accept})
		code, body := do(t, "POST", "http://"+s.Addrs().HTTP.String()+"/json", req)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("JSONOverrides %v: %d %q, want %d containing %q", tc.accept, code, body, tc.code, tc.want)
		}
	}
}
