package test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/floodgate/floodgate/internal/harness/rlstest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// e2eRules uses day windows so that no window ends during a test run
// (counting tests would see a reset), except where a test needs it.
const e2eRules = `
domain: e2e
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: open
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: premium
    rate_limit: {unit: day, requests_per_unit: 10, name: premium, replaces: [{name: standard}]}
  - key: standard
    rate_limit: {unit: day, requests_per_unit: 1, name: standard}
  - key: strict
    failure_mode: deny
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: ask
    failure_mode: unavailable
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: tenant
    rate_limits:
      - {unit: second, requests_per_unit: 100, name: burst, algorithm: token_bucket}
      - {unit: day, requests_per_unit: 2, name: daily, algorithm: sliding_window, precision: 24}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 5}
`

var (
	desc    = rlstest.Desc
	request = rlstest.Request
)

// summary writes an answer as "OVERALL CODE:remaining ...", with "-" for a
// status without current_limit and "max" for an unlimited one.
func summary(resp *pb.RateLimitResponse) string {
	parts := []string{strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT")}
	for _, st := range resp.Statuses {
		code := strings.TrimSuffix(st.Code.String(), "_LIMIT")
		switch {
		case st.CurrentLimit == nil && st.LimitRemaining == math.MaxUint32:
			parts = append(parts, code+":max")
		case st.CurrentLimit == nil:
			parts = append(parts, code+":-")
		default:
			parts = append(parts, fmt.Sprintf("%s:%d", code, st.LimitRemaining))
		}
	}
	return strings.Join(parts, " ")
}

func headers(resp *pb.RateLimitResponse) map[string]string {
	m := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		m[h.Key] = h.Value
	}
	return m
}

func startWithRules(t *testing.T, b backend, rules string, extra ...string) (*proc, string) {
	t.Helper()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": rules})
	args, _ := b.args(t)
	return start(t, options{args: append(append(args, "-config", dir), extra...)}), dir
}

// TestShouldRateLimit drives every request feature through a running
// server, on Redis and on the in-memory twin.
func TestShouldRateLimit(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			p, _ := startWithRules(t, b, e2eRules, "-response-headers", "reference", "-over-limit-body")
			override := func(d *rlv3.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
				d.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
				return d
			}
			addend := func(d *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
				d.HitsAddend = wrapperspb.UInt64(n)
				return d
			}
			negative := func(d *rlv3.RateLimitDescriptor) *rlv3.RateLimitDescriptor {
				d.IsNegativeHits = true
				return d
			}
			steps := []struct {
				name string
				req  *pb.RateLimitRequest
				want string
			}{
				{"first hit", request("e2e", desc("user", "alice")), "OK OK:2"},
				{"second hit", request("e2e", desc("user", "alice")), "OK OK:1"},
				{"last allowed", request("e2e", desc("user", "alice")), "OK OK:0"},
				{"over", request("e2e", desc("user", "alice")), "OVER OVER:0"},
				{"statuses in request order", request("e2e", desc("user", "bob"), desc("nomatch", "x"), desc("open", "y"), desc("free", "z")), "OK OK:2 OK:- OK:- OK:max"},
				{"unknown domain", request("elsewhere", desc("user", "alice")), "OK OK:-"},
				{"request hits_addend", &pb.RateLimitRequest{Domain: "e2e", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", "bob")}, HitsAddend: 2}, "OK OK:0"},
				{"descriptor hits_addend 0 looks", request("e2e", addend(desc("user", "bob"), 0)), "OK OK:0"},
				{"is_negative_hits gives back", request("e2e", negative(addend(desc("user", "bob"), 2))), "OK OK:2"},
				{"override", request("e2e", override(desc("user", "carol"), 1, typev3.RateLimitUnit_DAY)), "OK OK:0"},
				{"override over", request("e2e", override(desc("user", "carol"), 1, typev3.RateLimitUnit_DAY)), "OVER OVER:0"},
				{"the rule's counter is apart", request("e2e", desc("user", "carol")), "OK OK:2"},
				{"override without a rule", request("e2e", override(desc("nomatch", "x"), 1, typev3.RateLimitUnit_DAY)), "OK OK:0"},
				{"override without a rule, over", request("e2e", override(desc("nomatch", "x"), 1, typev3.RateLimitUnit_DAY)), "OVER OVER:0"},
				{"shadow", request("e2e", desc("shadow", "s")), "OK OK:0"},
				{"shadow over stays OK", request("e2e", desc("shadow", "s")), "OK OK:0"},
				{"replaces", request("e2e", desc("premium", "p"), desc("standard", "p")), "OK OK:9 OK:-"},
				{"replaced limit never counted", request("e2e", desc("premium", "p"), desc("standard", "p")), "OK OK:8 OK:-"},
				{"quota", request("e2e", desc("quota", "q")), "OK OK:0"},
				{"every quota over", request("e2e", desc("quota", "q")), "OVER OVER:0"},
				{"several limits: the most restrictive", request("e2e", desc("tenant", "t")), "OK OK:1"},
				{"share_threshold shares one counter", request("e2e", desc("path", "/api/a")), "OK OK:1"},
				{"share_threshold other value", request("e2e", desc("path", "/api/b")), "OK OK:0"},
				{"share_threshold over", request("e2e", desc("path", "/api/c")), "OVER OVER:0"},
				{"all or nothing", request("e2e", desc("user", "dave"), desc("user", "alice")), "OVER OK:3 OVER:0"},
				{"the rejected request consumed nothing", request("e2e", desc("user", "dave")), "OK OK:2"},
				{"detailed metric", request("e2e", desc("detailed", "v1")), "OK OK:4"},
			}
			for _, s := range steps {
				resp := p.mustCall(s.req)
				if got := summary(resp); got != s.want {
					t.Fatalf("%s: got %q, want %q", s.name, got, s.want)
				}
			}

			// Headers and body of an over-limit answer.
			resp := p.mustCall(request("e2e", desc("user", "alice")))
			h := headers(resp)
			reset := int64(math.Ceil(resp.Statuses[0].DurationUntilReset.AsDuration().Seconds()))
			if h["RateLimit-Limit"] != "3" || h["RateLimit-Remaining"] != "0" || h["RateLimit-Reset"] != strconv.FormatInt(reset, 10) || h["Retry-After"] != h["RateLimit-Reset"] {
				t.Errorf("headers %v, reset %d", h, reset)
			}
			if reset <= 0 || reset > 86400 {
				t.Errorf("a day window resets in %ds", reset)
			}
			var body struct {
				Code              string `json:"code"`
				RetryAfterSeconds int64  `json:"retry_after_seconds"`
			}
			if err := json.Unmarshal(resp.RawBody, &body); err != nil || body.Code != "OVER_LIMIT" || body.RetryAfterSeconds != reset {
				t.Errorf("raw_body %s (%v)", resp.RawBody, err)
			}
			if resp := p.mustCall(request("e2e", desc("user", "erin"))); headers(resp)["Retry-After"] != "" {
				t.Errorf("Retry-After on an OK answer: %v", headers(resp))
			}

			// Invalid requests name the problem.
			for _, tc := range []struct {
				req  *pb.RateLimitRequest
				want string
			}{
				{request("", desc("user", "a")), "domain: must not be empty"},
				{request("e2e"), "descriptors: must not be empty"},
			} {
				_, err := p.call(tc.req)
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("err = %v, want InvalidArgument with %q", err, tc.want)
				}
			}

			// Metrics: labelled by rule, never by a request's values unless
			// detailed_metric asks.
			checks := []struct {
				series string
				want   float64
			}{
				{`floodgate_shadow_mode_total{domain="e2e",rule="e2e.shadow"}`, 1},
				{`floodgate_over_limit_total{domain="e2e",rule="e2e.shadow"}`, 1},
				{`floodgate_hits_total{domain="e2e",rule="e2e.detailed_v1"}`, 1},
				{`floodgate_domain_not_found_total`, 1},
				{`floodgate_rules_version`, 1},
				{`floodgate_rules_reloads_total{result="failure"}`, 0},
				{`floodgate_store_errors_total{store="` + b.name + `"}`, 0},
			}
			for _, c := range checks {
				if got := p.metric(c.series); got != c.want {
					t.Errorf("%s = %v, want %v", c.series, got, c.want)
				}
			}
			for _, c := range []string{
				`floodgate_hits_total{domain="e2e",rule="e2e.user"}`,
				`floodgate_over_limit_total{domain="e2e",rule="e2e.user"}`,
				`floodgate_within_limit_total{domain="e2e",rule="e2e.user"}`,
				`floodgate_near_limit_total{domain="e2e",rule="e2e.user"}`,
				`floodgate_decision_duration_seconds_count{code="ok"}`,
				`floodgate_decision_duration_seconds_count{code="over_limit"}`,
				`floodgate_decision_duration_seconds_count{code="invalidargument"}`,
				`floodgate_store_duration_seconds_count{store="` + b.name + `"}`,
				`floodgate_rules_last_success_timestamp_seconds`,
			} {
				if got := p.metric(c); got <= 0 {
					t.Errorf("%s = %v, want > 0", c, got)
				}
			}
			if _, body := p.httpGet("/metrics"); strings.Contains(body, "alice") || strings.Contains(body, "/api/a") {
				t.Errorf("/metrics holds request values:\n%s", grepLines(body, "alice", "/api/a"))
			}
		})
	}
}

func grepLines(body string, words ...string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestUnlimitedNeverTouchesRedis checks that unlimited and whitelisted
// descriptors are answered without a Redis key.
func TestUnlimitedNeverTouchesRedis(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	args, redis := backends[0].args(t)
	p := start(t, options{args: append(args, "-config", dir, "-key-prefix", "fg_")})
	for range 5 {
		if got := summary(p.mustCall(request("e2e", desc("free", "x"), desc("open", "y")))); got != "OK OK:max OK:-" {
			t.Fatalf("got %q", got)
		}
	}
	if n, err := redis.Do("DBSIZE"); err != nil || n != "0" {
		t.Fatalf("DBSIZE = %q (%v), want 0", n, err)
	}
	p.mustCall(request("e2e", desc("user", "u")))
	keys, err := redis.Do("KEYS", "*")
	if err != nil || keys == "" || !strings.HasPrefix(keys, "fg_") {
		t.Fatalf("keys %q (%v): want one key with the -key-prefix", keys, err)
	}
}

// TestGlobalShadowModeAndIETFHeaders: with -shadow-mode every answer is OK
// overall while statuses stay real.
func TestGlobalShadowModeAndIETFHeaders(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			p, _ := startWithRules(t, b, e2eRules, "-shadow-mode", "-response-headers", "ietf")
			for i, want := range []string{"OK OK:2", "OK OK:1", "OK OK:0", "OK OVER:0", "OK OVER:0"} {
				resp := p.mustCall(request("e2e", desc("user", "alice")))
				if got := summary(resp); got != want {
					t.Fatalf("call %d: got %q, want %q", i, got, want)
				}
				h := headers(resp)
				if !strings.HasPrefix(h["RateLimit-Policy"], `"default";q=3;w=86400`) || !strings.HasPrefix(h["RateLimit"], `"default";r=`) {
					t.Fatalf("call %d: headers %v", i, h)
				}
				if h["Retry-After"] != "" {
					t.Fatalf("Retry-After on an answer shadow mode turned OK: %v", h)
				}
			}
			if got := p.metric(`floodgate_global_shadow_mode_total`); got != 2 {
				t.Errorf("global shadow mode count = %v, want 2", got)
			}
		})
	}
}

// TestJSONEndpoint: POST a RateLimitRequest in protojson.
func TestJSONEndpoint(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			p, _ := startWithRules(t, b, e2eRules)
			req := `{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"json"}]}],"hitsAddend":3}`
			// protojson's spacing varies between builds: parse, never match text.
			parse := func(body string) string {
				t.Helper()
				var resp pb.RateLimitResponse
				if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
					t.Fatalf("response %q: %v", body, err)
				}
				return summary(&resp)
			}
			if code, body := p.postJSON(req); code != http.StatusOK || parse(body) != "OK OK:0" {
				t.Fatalf("first: %d %s", code, body)
			}
			if code, body := p.postJSON(req); code != http.StatusTooManyRequests || parse(body) != "OVER OVER:0" {
				t.Fatalf("second: %d %s", code, body)
			}
			for _, tc := range []struct {
				method, body string
				code         int
				want         string
			}{
				{"POST", `{"domain":`, http.StatusBadRequest, "invalid RateLimitRequest"},
				{"POST", `{"domain":"e2e","descriptors":[],"bogus":1}`, http.StatusBadRequest, "bogus"},
				{"POST", `{"descriptors":[{"entries":[{"key":"user","value":"x"}]}]}`, http.StatusBadRequest, "domain: must not be empty"},
				{"POST", `{"domain":"e2e"}`, http.StatusBadRequest, "descriptors: must not be empty"},
				{"GET", ``, http.StatusMethodNotAllowed, "POST"},
			} {
				r, err := http.NewRequest(tc.method, "http://"+p.HTTPAddr+"/json", strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				resp, err := httpClient.Do(r)
				if err != nil {
					t.Fatal(err)
				}
				got := readAll(resp)
				if resp.StatusCode != tc.code || !strings.Contains(got, tc.want) {
					t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.body, resp.StatusCode, got, tc.code, tc.want)
				}
			}
		})
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestDefaultRun is `go run ./cmd/server` in the repository: config/ on the
// in-memory store, said in one log line.
func TestDefaultRun(t *testing.T) {
	t.Parallel()
	p := start(t, options{dir: repoRoot})
	if n := strings.Count(p.Logs.String(), "counters are kept in this process's memory"); n != 1 {
		t.Errorf("%d log lines about the in-memory store, want 1:\n%s", n, p.Logs)
	}
	code, body := p.httpGet("/rlconfig")
	if code != http.StatusOK || !strings.Contains(body, "version: 1") || !strings.Contains(body, "demo.yaml") {
		t.Fatalf("/rlconfig: %d\n%s", code, body)
	}
	if resp := p.mustCall(request("demo", desc("remote_address", "192.0.2.66"))); resp.OverallCode != pb.RateLimitResponse_OVER_LIMIT {
		t.Errorf("the demo rules' blocked address got %v", summary(resp))
	}
}
