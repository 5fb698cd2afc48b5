package examples_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
	"github.com/floodgate/floodgate/pkg/rules"
)

// startBackend runs the backend the examples' Envoys send to: an HTTP
// server answering every request 200 "ok". It returns its address.
func startBackend(t testing.TB) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The LLM API of envoy.yaml reports the tokens it used.
		if strings.HasPrefix(r.URL.Path, "/v1/") || strings.HasPrefix(r.URL.Path, "/reserved/v1/") {
			w.Header().Set("x-usage-input-tokens", "40")
			w.Header().Set("x-usage-output-tokens", "60")
			w.Header().Set("x-usage-total-tokens", "100")
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// startExample runs an Envoy configuration of examples/ as shipped, its
// floodgate cluster sending to rls and its backend cluster to backend.
func startExample(t testing.TB, file, rls, backend string) *envoytest.Envoy {
	t.Helper()
	raw, _ := readEnvoyConfig(t, file)
	return envoytest.Start(t, envoytest.Config{
		Bootstrap: raw,
		Upstreams: map[string][]string{"floodgate": {rls}, "backend": {backend}},
		LogLevel:  "warning",
	})
}

// described returns describeCalls of the requests tap recorded since the
// last Take, once they hold at least want descriptors or 5 s passed: Envoy
// makes the call of a response's end (apply_on_stream_done) after the
// client has the response.
func described(t *testing.T, tap *envoytest.Tap, set *rules.Set, want int) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		got = append(got, describeCalls(set, tap.Take())...)
		if len(got) >= want || time.Now().After(deadline) {
			return got
		}
		<-tick.C
	}
}

// describeCalls prints each descriptor of the calls with the rule of set
// it meets, e.g. "api_key=bob, path=/export/a -> demo.api_key.path_/export/*",
// "limit=5/MINUTE" for an override, "hits=N" for the descriptor's own
// hits_addend and "negative" for is_negative_hits.
func describeCalls(set *rules.Set, calls []*rlsv3.RateLimitRequest) []string {
	var out []string
	for _, c := range calls {
		for _, d := range c.GetDescriptors() {
			var parts []string
			var entries []rules.Entry
			for _, e := range d.GetEntries() {
				parts = append(parts, e.GetKey()+"="+e.GetValue())
				entries = append(entries, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
			}
			s := strings.Join(parts, ", ")
			if l := d.GetLimit(); l != nil {
				s += fmt.Sprintf(" limit=%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
			}
			if h := d.GetHitsAddend(); h != nil {
				s += fmt.Sprintf(" hits=%d", h.GetValue())
			}
			if d.GetIsNegativeHits() {
				s += " negative"
			}
			if r := set.Match(c.GetDomain(), entries); r != nil {
				s += " -> " + r.Path
			} else {
				s += " -> no rule in domain " + strconv.Quote(c.GetDomain())
			}
			out = append(out, s)
		}
	}
	return out
}

// envoyRequest is a request sent through an Envoy and what it must do.
type envoyRequest struct {
	name         string
	method, path string
	// headers are "name: value" lines. Without a user-agent line, none is
	// sent.
	headers []string
	// want is what describeCalls prints for the calls Envoy makes to
	// floodgate; nil: no call.
	want []string
}

// send sends r to the Envoy listener at addr and returns the response and
// its body.
func (r envoyRequest) send(t *testing.T, addr string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(r.method, "http://"+addr+r.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range r.headers {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(name), strings.TrimSpace(value))
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "") // Go's client sends none then
	}
	resp, err := envoyClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s through Envoy: %v", r.method, r.path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

var envoyClient = &http.Client{Timeout: 10 * time.Second}

// envoyHTTPRequests are the requests envoy.yaml's comments are about, each
// with the descriptors its routes promise and the rule each is meant for.
// The demo trusts one X-Forwarded-For hop, which names the client.
var envoyHTTPRequests = []envoyRequest{
	{"any request is limited per client address", "GET", "/", []string{"x-forwarded-for: 203.0.113.7", "user-agent: curl/8.5.0"}, []string{
		"remote_address=203.0.113.7 -> demo.remote_address",
		`user_agent=curl/8.5.0 -> no rule in domain "demo"`,
	}},
	{"the monitoring host", "GET", "/", []string{"x-forwarded-for: 10.0.0.10"}, []string{
		"remote_address=10.0.0.10 -> demo.remote_address_10.0.0.10",
	}},
	{"an API key", "GET", "/orders", []string{"x-forwarded-for: 203.0.113.8", "x-api-key: alice"}, []string{
		"remote_address=203.0.113.8 -> demo.remote_address",
		"api_key=alice -> demo.api_key",
	}},
	{"writes share one limit", "POST", "/orders", []string{"x-forwarded-for: 203.0.113.9"}, []string{
		"remote_address=203.0.113.9 -> demo.remote_address",
		"generic_key=writes -> demo.generic_key_writes",
	}},
	{"DELETE is a write", "DELETE", "/orders/1", []string{"x-forwarded-for: 203.0.113.9"}, []string{
		"remote_address=203.0.113.9 -> demo.remote_address",
		"generic_key=writes -> demo.generic_key_writes",
	}},
	{"HEAD is not", "HEAD", "/orders", []string{"x-forwarded-for: 203.0.113.9"}, []string{
		"remote_address=203.0.113.9 -> demo.remote_address",
	}},
	{"an export with a key: the nested (api_key, path) first", "GET", "/export/report.csv", []string{"x-forwarded-for: 203.0.113.10", "x-api-key: bob"}, []string{
		"api_key=bob, path=/export/report.csv -> demo.api_key.path_/export/*",
		"remote_address=203.0.113.10 -> demo.remote_address",
		"api_key=bob -> demo.api_key",
	}},
	{"an export without a key drops the nested descriptor", "GET", "/export/report.csv", []string{"x-forwarded-for: 203.0.113.10"}, []string{
		"remote_address=203.0.113.10 -> demo.remote_address",
	}},
	{"static files share one counter", "GET", "/static/app.js", []string{"x-forwarded-for: 203.0.113.11"}, []string{
		"path=/static/ -> demo.path_/static/*",
		"remote_address=203.0.113.11 -> demo.remote_address",
	}},
	{"searches carry the override from dynamic metadata", "GET", "/api/v2/search?q=envoy", []string{"x-forwarded-for: 203.0.113.12"}, []string{
		"path=/api/v2/search?q=envoy limit=5/MINUTE -> demo.path_/api/*/search*",
		"remote_address=203.0.113.12 -> demo.remote_address",
	}},
	{"a non-search API path is not a search", "GET", "/api/v2/searches", []string{"x-forwarded-for: 203.0.113.12"}, []string{
		"remote_address=203.0.113.12 -> demo.remote_address",
	}},
	{"health checks call nothing", "GET", "/health", []string{"x-forwarded-for: 10.0.0.10"}, nil},
	{"crawlers", "GET", "/", []string{"x-forwarded-for: 203.0.113.13", "user-agent: Googlebot/2.1"}, []string{
		"remote_address=203.0.113.13 -> demo.remote_address",
		"user_agent=Googlebot/2.1 -> demo.user_agent_*bot*",
	}},
	{"a tenant on the free plan", "GET", "/", []string{"x-forwarded-for: 203.0.113.14", "x-tenant: acme", "x-plan: free"}, []string{
		"remote_address=203.0.113.14 -> demo.remote_address",
		"tenant=acme, plan=free -> demo.tenant.plan_free",
	}},
	{"a pro tenant with an API key", "GET", "/", []string{"x-forwarded-for: 203.0.113.14", "x-tenant: initech", "x-plan: pro", "x-api-key: carol"}, []string{
		"remote_address=203.0.113.14 -> demo.remote_address",
		"api_key=carol -> demo.api_key",
		"tenant=initech, plan=pro -> demo.tenant.plan_pro",
	}},
	{"a tenant without a plan sends no tenant descriptor", "GET", "/", []string{"x-forwarded-for: 203.0.113.14", "x-tenant: acme"}, []string{
		"remote_address=203.0.113.14 -> demo.remote_address",
	}},
	{"an LLM call looks at each budget, then charges what it used", "POST", "/v1/chat/completions", []string{"x-forwarded-for: 203.0.113.15", "x-user: ann", "x-org: acme"}, []string{
		"llm_user=ann hits=0 -> demo.llm_user",
		"llm_org=acme hits=0 -> demo.llm_org",
		"llm_tokens=input, llm_user=ann hits=0 -> demo.llm_tokens_input.llm_user",
		"llm_tokens=output, llm_user=ann hits=0 -> demo.llm_tokens_output.llm_user",
		"llm_user=ann hits=100 -> demo.llm_user",
		"llm_org=acme hits=100 -> demo.llm_org",
		"llm_tokens=input, llm_user=ann hits=40 -> demo.llm_tokens_input.llm_user",
		"llm_tokens=output, llm_user=ann hits=60 -> demo.llm_tokens_output.llm_user",
	}},
	{"a reserved LLM call reserves its most, then gives it back for what it used", "POST", "/reserved/v1/chat/completions", []string{"x-forwarded-for: 203.0.113.15", "x-user: bea", "x-max-tokens: 500"}, []string{
		"llm_reserved=bea hits=0 -> demo.llm_reserved",
		"llm_reserved=bea hits=500 -> demo.llm_reserved",
		"llm_reserved=bea hits=500 negative -> demo.llm_reserved",
		"llm_reserved=bea hits=100 -> demo.llm_reserved",
	}},
}

// TestEnvoyExamples runs the Envoy examples and the Istio gateway's
// configuration in the real Envoy, in front of floodgate (in memory, with
// its own rate-limit headers and JSON 429 body on), and checks what reaches
// floodgate and what comes back to the client.
func TestEnvoyExamples(t *testing.T) {
	p := startFloodgate(t, "-response-headers", "reference", "-over-limit-body")
	tap := envoytest.StartTap(t, p.GRPCAddr)
	backend := startBackend(t)
	set := loadRules(t)
	httpEnvoy := startExample(t, envoyHTTPFile, tap.Addr, backend)
	httpAddr := httpEnvoy.Listener("http")

	t.Run("descriptors", func(t *testing.T) {
		istio := startIstioGateway(t, tap.Addr, backend)
		for _, front := range []struct {
			name, addr string
			requests   []envoyRequest
		}{
			{envoyHTTPFile, httpAddr, envoyHTTPRequests},
			{"Istio gateway", istio, istioRequests},
		} {
			for _, r := range front.requests {
				tap.Take()
				resp, body := r.send(t, front.addr)
				got := described(t, tap, set, len(r.want))
				if !slices.Equal(got, r.want) {
					t.Errorf("%s: %s: %s %s sends\n\t%s\nwant\n\t%s", front.name, r.name, r.method, r.path,
						strings.Join(got, "\n\t"), strings.Join(r.want, "\n\t"))
				}
				if resp.StatusCode != http.StatusOK {
					t.Errorf("%s: %s: %s %s: %d %q, want 200 from the backend", front.name, r.name, r.method, r.path, resp.StatusCode, body)
				}
			}
		}
	})

	t.Run("headers and body", func(t *testing.T) {
		checkEnvoyAnswers(t, httpAddr)
	})

	t.Run("TCP connections", func(t *testing.T) {
		tcp := startExample(t, envoyTCPFile, tap.Addr, backend)
		checkTCPLimit(t, tcp, tap, set)
	})
}

// checkEnvoyAnswers checks the headers and bodies clients get through
// envoy.yaml: Envoy's X-RateLimit-* (enable_x_ratelimit_headers), and what
// floodgate adds with -response-headers reference and -over-limit-body
// (RateLimit-*, Retry-After, a JSON 429 body), which Envoy passes on.
func checkEnvoyAnswers(t *testing.T, addr string) {
	for _, tc := range []struct {
		name string
		req  envoyRequest
		// before is how many times req is sent first.
		before int
		status int
		// headers are compared exactly; "" means absent.
		headers map[string]string
	}{
		{"an unlimited client gets no rate-limit header",
			envoyRequest{method: "GET", path: "/", headers: []string{"x-forwarded-for: 10.0.0.10"}}, 0, 200,
			map[string]string{"X-Ratelimit-Limit": "", "Ratelimit-Limit": "", "Retry-After": ""}},
		{"an allowed search: both header sets from the least remaining status",
			envoyRequest{method: "GET", path: "/api/v1/search?q=headers", headers: []string{"x-forwarded-for: 203.0.113.60"}}, 0, 200,
			map[string]string{
				"X-Ratelimit-Limit": "5, 5;w=60, 10;w=1", "X-Ratelimit-Remaining": "4", "X-Ratelimit-Reset": "60",
				"Ratelimit-Limit": "5", "Ratelimit-Remaining": "4", "Ratelimit-Reset": "60",
				"Retry-After": "", "X-Envoy-Ratelimited": "",
			}},
		{"a refused export: 429 with Retry-After and floodgate's JSON body",
			envoyRequest{method: "GET", path: "/export/headers.csv", headers: []string{"x-forwarded-for: 203.0.113.61", "x-api-key: dora"}}, 2, 429,
			map[string]string{
				"X-Ratelimit-Limit": "3, 3;w=300, 10;w=1, 5;w=1", "X-Ratelimit-Remaining": "0",
				"Ratelimit-Limit": "3", "Ratelimit-Remaining": "0",
				"X-Envoy-Ratelimited": "true", "Content-Type": "application/json",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range tc.before {
				tc.req.send(t, addr)
			}
			resp, body := tc.req.send(t, addr)
			if resp.StatusCode != tc.status {
				t.Fatalf("%d %q, want %d; headers %v", resp.StatusCode, body, tc.status, resp.Header)
			}
			for name, want := range tc.headers {
				if got := strings.Join(resp.Header.Values(name), ", "); got != want {
					t.Errorf("%s: %q, want %q", name, got, want)
				}
			}
			if resp.StatusCode == http.StatusOK {
				if body != "ok" {
					t.Errorf("body %q, want the backend's", body)
				}
				return
			}
			// The body and the headers tell the same wait, whose value
			// depends on how long the requests took. Retry-After and
			// RateLimit-Reset are floodgate's, in whole seconds rounded
			// up; Envoy's X-RateLimit-Reset keeps the whole seconds of
			// duration_until_reset, so it is a second less when floodgate
			// sends a fraction.
			var b struct {
				Code              string `json:"code"`
				Domain            string `json:"domain"`
				RetryAfterSeconds int    `json:"retry_after_seconds"`
			}
			if err := json.Unmarshal([]byte(body), &b); err != nil || b.Code != "OVER_LIMIT" || b.Domain != "demo" {
				t.Fatalf("body %q (%v): want floodgate's JSON for domain demo", body, err)
			}
			retry := strconv.Itoa(b.RetryAfterSeconds)
			if resp.Header.Get("Retry-After") != retry || resp.Header.Get("Ratelimit-Reset") != retry {
				t.Errorf("Retry-After %q, RateLimit-Reset %q: want the body's %s", resp.Header.Get("Retry-After"), resp.Header.Get("Ratelimit-Reset"), retry)
			}
			reset, err := strconv.Atoi(resp.Header.Get("X-Ratelimit-Reset"))
			if err != nil || reset > b.RetryAfterSeconds || reset < b.RetryAfterSeconds-1 {
				t.Errorf("X-RateLimit-Reset %q: want %s or a second less", resp.Header.Get("X-Ratelimit-Reset"), retry)
			}
		})
	}
}

// checkTCPLimit checks envoy-tcp.yaml as the README describes it: one call
// per new connection with the client's address; an address's first 20
// connections pass, then the ones it refuses are closed before any byte
// reaches them, while other addresses still pass. Clients take distinct
// loopback addresses (127.0.0.0/8 is all local on Linux), fresh ones for
// each attempt: a burst slower than the bucket's refill decides nothing,
// and is tried again.
func checkTCPLimit(t *testing.T, e *envoytest.Envoy, tap *envoytest.Tap, set *rules.Set) {
	addr := e.Listener("tcp")
	// connect opens a connection from a local address, sends an HTTP
	// request for the backend and returns the first line of the answer
	// ("" when Envoy closed the connection).
	connect := func(from string) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connecting from %s: %v", from, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: backend\r\nConnection: close\r\n\r\n")
		b, _ := io.ReadAll(c)
		first, _, _ := bytes.Cut(b, []byte("\r\n"))
		return string(first)
	}
	const n, burst, rate, ok = 25, 20, 10, "HTTP/1.1 200 OK"
	for try := range 3 {
		client, other := fmt.Sprintf("127.0.0.%d", 10+2*try), fmt.Sprintf("127.0.0.%d", 11+2*try)
		tap.Take()
		before, err := e.Counters("ratelimit.tcp_demo.")
		if err != nil {
			t.Fatal(err)
		}
		passed, refused := 0, 0
		start := time.Now()
		for i := range n {
			switch got := connect(client); got {
			case ok:
				passed++
			case "":
				refused++
				if i < burst {
					t.Fatalf("connection %d from %s was closed; the first %d pass", i+1, client, burst)
				}
			default:
				t.Fatalf("connection %d from %s: %q", i+1, client, got)
			}
		}
		elapsed := time.Since(start)
		if refused == 0 && elapsed > n*time.Second/rate/5 {
			t.Logf("%d connections took %v, in which the bucket refilled: trying again", n, elapsed)
			continue
		}
		if most := burst + int(rate*elapsed.Seconds()) + 1; refused == 0 || passed > most {
			t.Errorf("%d of %d connections passed in %v: want %d, plus at most what refilled at %d per second", passed, n, elapsed, burst, rate)
		}
		if got := connect(other); got != ok {
			t.Errorf("a connection from another address: %q, want %q", got, ok)
		}
		calls := describeCalls(set, tap.Take())
		want := "remote_address=" + client + " -> demo.remote_address"
		if len(calls) != n+1 || calls[0] != want {
			t.Errorf("the calls for %d connections: %q; want one per connection, the first %q", n+1, calls, want)
		}
		after, err := e.Counters("ratelimit.tcp_demo.")
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]int{"ok": passed + 1, "over_limit": refused, "cx_closed": refused, "error": 0} {
			name = "ratelimit.tcp_demo." + name
			if got := after[name] - before[name]; got != int64(want) {
				t.Errorf("Envoy's %s went up by %d, want %d", name, got, want)
			}
		}
		return
	}
	t.Fatal("three bursts of connections were too slow to decide")
}

// loadRules loads the repository's rules, as the demo serves them.
func loadRules(t testing.TB) *rules.Set {
	t.Helper()
	set, err := rules.Load(filepath.Join(repoRoot, "config"), rules.Options{})
	if err != nil {
		t.Fatalf("config/: %v", err)
	}
	return set
}
