package counters_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/pkg/limit"
)

// handlerRules cover what the endpoints describe besides one counter.
const handlerRules = `
domain: t
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 4}
  - key: domain
    rate_limit: {unit: day, requests_per_unit: 4}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: day, requests_per_unit: 4}
  - key: pair
    rate_limits:
      - {unit: day, requests_per_unit: 4, name: daily}
      - {unit: hour, requests_per_unit: 2, name: hourly, algorithm: token_bucket, burst: 3}
  - key: free
    rate_limit: {unlimited: true}
  - key: open
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: upgraded
    rate_limits:
      - {unit: day, requests_per_unit: 1, name: old}
      - {unit: hour, requests_per_unit: 9, name: new, replaces: [{name: old}]}
`

// memoryFixture serves handlerRules over a limit.Memory on a fake clock.
func memoryFixture(t *testing.T) *fixture {
	t.Helper()
	now := time.Date(2031, 3, 9, 12, 0, 0, 0, time.UTC)
	m := limit.NewMemory(limit.MemoryOptions{Now: func() time.Time { return now }})
	return newFixture(t, parseRules(t, handlerRules, nil), m, m)
}

// The query is the domain, then the descriptor's entries in order; what
// is not one is refused with a message saying what is wanted.
func TestQuery(t *testing.T) {
	f := memoryFixture(t)
	for _, tc := range []struct {
		query string
		code  int
		want  string // in the body: the error, or the rule matched
	}{
		{"", 400, "no domain: want ?domain=d&key=value"},
		{"?domain=t", 400, `no descriptor entry for domain \"t\"`},
		{"?domain=t&=x", 400, "an entry without a key"},
		{"?domain=t&user=%zz", 400, `query \"user=%zz\"`},
		{"?domain=t&user=al%20ice", 200, `"rule": "t.user"`},
		{"?domain=t&a=1&b=2", 200, `"rule": "t.a.b"`},
		{"?domain=t&b=2&a=1", 200, `"rule": ""`},
		// The first domain parameter is the domain; a later one an entry.
		{"?domain=t&domain=x", 200, `"rule": "t.domain"`},
		{"?user=x&domain=t", 200, `"rule": "t.user"`},
	} {
		code, body := f.call(t, http.MethodGet, "/counters"+tc.query)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("GET /counters%s: %d %s, want %d with %s", tc.query, code, body, tc.code, tc.want)
		}
	}
	a := f.answer(t, http.MethodGet, "/counters?domain=t&user=al%20ice")
	if len(a.Descriptor) != 1 || a.Descriptor[0] != (counters.Entry{Key: "user", Value: "al ice"}) {
		t.Errorf("descriptor %+v, want user=\"al ice\"", a.Descriptor)
	}
}

// Each path takes its method, and says which when given another; other
// paths under /counters are not found.
func TestMethods(t *testing.T) {
	f := memoryFixture(t)
	for _, tc := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{http.MethodPost, "/counters?domain=t&user=x", 405, "GET, HEAD"},
		{http.MethodDelete, "/counters?domain=t&user=x", 405, "GET, HEAD"},
		{http.MethodGet, "/counters/reset?domain=t&user=x", 405, "POST"},
		{http.MethodHead, "/counters?domain=t&user=x", 200, ""},
		{http.MethodGet, "/counters/other", 404, ""},
	} {
		req, _ := http.NewRequest(tc.method, f.url+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code || resp.Header.Get("Allow") != tc.allow {
			t.Errorf("%s %s: %d Allow %q, want %d Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.code, tc.allow)
		}
	}
}

// A reset asked by a page of another site, through an operator's browser,
// is refused and changes nothing; the same reset from a command line
// passes.
func TestCrossOriginResetRefused(t *testing.T) {
	f := memoryFixture(t)
	f.decide(t, "t", "user", "x")
	for _, h := range [][]string{{"Sec-Fetch-Site", "cross-site"}, {"Origin", "https://evil.example"}} {
		code, body := f.call(t, http.MethodPost, "/counters/reset?domain=t&user=x", h...)
		if code != http.StatusForbidden || !strings.Contains(body, "another origin") {
			t.Errorf("reset with %s: %d %s, want 403", h[0], code, body)
		}
	}
	if c := f.answer(t, http.MethodGet, "/counters?domain=t&user=x").Limits[0]; c.Used != 1 {
		t.Errorf("a refused reset reset the counter: %+v", c)
	}
	if f.resets("t", "t.user") != 0 || strings.Contains(f.logs.String(), "counters reset") {
		t.Errorf("a refused reset was counted or logged:\n%s", f.logs)
	}
	code, _ := f.call(t, http.MethodPost, "/counters/reset?domain=t&user=x", "Sec-Fetch-Site", "same-origin")
	if code != http.StatusOK {
		t.Errorf("a same-origin reset: %d", code)
	}
}

// When nothing is counted for the descriptor, both endpoints answer 200
// with no counter and the reason; a reset then resets, logs and counts
// nothing.
func TestNothingToReset(t *testing.T) {
	f := memoryFixture(t)
	for _, tc := range []struct{ query, reason string }{
		{"?domain=nope&user=x", `no rule file declares domain "nope"`},
		{"?domain=t&who=x", "entry 1 (who) matches no rule"},
		{"?domain=t&open=x", "rule t.open matches but holds no limit"},
		{"?domain=t&free=x", "rule t.free applies: unlimited"},
	} {
		for _, e := range endpoints {
			m, path := e.method, e.path
			a := f.answer(t, m, path+tc.query)
			if a.Reset || !strings.Contains(a.Reason, tc.reason) {
				t.Errorf("%s %s%s: reset %v, reason %q, want no reset and %q", m, path, tc.query, a.Reset, a.Reason, tc.reason)
			}
			for _, c := range a.Limits {
				if c.Counted {
					t.Errorf("%s%s: a counted limit %+v", path, tc.query, c)
				}
			}
		}
	}
	if a := f.answer(t, http.MethodGet, "/counters?domain=t&free=x"); len(a.Limits) != 1 || a.Limits[0].Note != "unlimited: never counted" {
		t.Errorf("an unlimited limit: %+v", a.Limits)
	}
	if strings.Contains(f.logs.String(), "counters reset") {
		t.Errorf("nothing was reset, yet:\n%s", f.logs)
	}
}

// Every limit of a rule is listed in its order and reset together; the
// mode is the rule's; a limit the rule's other limit replaces is listed
// without a counter.
func TestSeveralLimitsAndModes(t *testing.T) {
	f := memoryFixture(t)
	f.decide(t, "t", "pair", "x")
	a := f.answer(t, http.MethodGet, "/counters?domain=t&pair=x")
	if len(a.Limits) != 2 {
		t.Fatalf("pair: %+v", a.Limits)
	}
	for i, want := range []counters.Counter{
		{Name: "daily", Algorithm: "fixed_window", Capacity: 4, Used: 1, Remaining: 3},
		{Name: "hourly", Algorithm: "token_bucket", Capacity: 3, Used: 1, Remaining: 2},
	} {
		c := a.Limits[i]
		if c.Name != want.Name || c.Algorithm != want.Algorithm || c.Capacity != want.Capacity || c.Used != want.Used || c.Remaining != want.Remaining {
			t.Errorf("limit %d: %+v, want %+v", i, c, want)
		}
	}
	r := f.answer(t, http.MethodPost, "/counters/reset?domain=t&pair=x")
	if !r.Reset || r.Limits[0].Used != 0 || r.Limits[1].Used != 0 || f.resets("t", "t.pair") != 2 {
		t.Errorf("a reset of both: %+v, metric %v", r.Limits, f.resets("t", "t.pair"))
	}
	if l := lines(f.logs.String(), "counters reset", "rule=t.pair", "counters=2", `used_before="[1 1]"`); len(l) != 1 {
		t.Errorf("want one line for the two counters:\n%s", f.logs)
	}

	for key, mode := range map[string]string{"shadow": "shadow", "quota": "quota", "user": "enforce"} {
		if c := f.answer(t, http.MethodGet, "/counters?domain=t&"+key+"=x").Limits[0]; c.Mode != mode {
			t.Errorf("%s: mode %q, want %q", key, c.Mode, mode)
		}
	}
	up := f.answer(t, http.MethodGet, "/counters?domain=t&upgraded=x").Limits
	if len(up) != 2 || up[0].Counted || !strings.Contains(up[0].Note, "replaced") || !up[1].Counted {
		t.Errorf("a replaced limit: %+v", up)
	}
}

// Looking changes nothing, even at a limit's edge: a look at a counter
// with one hit left leaves it for the next request.
func TestLookingConsumesNothing(t *testing.T) {
	f := memoryFixture(t)
	for range 3 {
		f.decide(t, "t", "user", "x")
	}
	for range 5 {
		f.answer(t, http.MethodGet, "/counters?domain=t&user=x")
	}
	if code := f.decide(t, "t", "user", "x"); code != pb.RateLimitResponse_OK {
		t.Errorf("the 4th request after looks: %v, want OK", code)
	}
	code, body := f.call(t, http.MethodGet, "/counters?domain=t&user=x")
	var a counters.Answer
	if code != http.StatusOK || json.Unmarshal([]byte(body), &a) != nil || a.Limits[0].Remaining != 0 {
		t.Errorf("after 4 of 4: %d %s", code, body)
	}
}
