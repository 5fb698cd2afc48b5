package dropin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/envoytest"
)

// usageBudgets are the budgets of examples/envoy.yaml's /v1/ route (the
// demo's, config/demo.yaml, count a minute) in windows of a second, so
// that a test sees several: all tokens per user and per organisation,
// and the user's input and output tokens apart.
const usageBudgets = `domain: demo
descriptors:
  - key: llm_user
    rate_limit: {unit: second, requests_per_unit: 1000}
  - key: llm_org
    rate_limit: {unit: second, requests_per_unit: 1500}
  - key: llm_tokens
    value: input
    descriptors:
      - key: llm_user
        rate_limit: {unit: second, requests_per_unit: 200}
  - key: llm_tokens
    value: output
    descriptors:
      - key: llm_user
        rate_limit: {unit: second, requests_per_unit: 700}
`

// llmCall is one request to the LLM API of examples/envoy.yaml: who sends
// it, the tokens its response reports, and the status it must get.
type llmCall struct {
	user, org string
	in, out   int64
	want      int
}

// llmRound is a window's requests, in order: ann spends her 1,000 in two
// responses of 600 (the second charged though only 400 were left), then
// bob spends what acme's 1,500 had left; cat spends her 200 input tokens
// and dan his 700 output tokens while their totals are within 1,000.
var llmRound = []llmCall{
	{"ann", "acme", 100, 500, 200}, {"ann", "acme", 100, 500, 200}, {"ann", "acme", 100, 500, 429},
	{"bob", "acme", 100, 500, 200}, {"bob", "acme", 100, 500, 429},
	{"cat", "solo-c", 150, 300, 200}, {"cat", "solo-c", 150, 300, 200}, {"cat", "solo-c", 150, 300, 429},
	{"dan", "solo-d", 10, 400, 200}, {"dan", "solo-d", 10, 400, 200}, {"dan", "solo-d", 10, 400, 429},
}

// llmFront is one server behind the real Envoy running examples/envoy.yaml,
// with a tap between them that tells when Envoy's charge at a response's
// end has been answered.
type llmFront struct {
	name  string
	srv   server
	tap   *envoytest.Tap
	addr  string
	calls int // the calls the server must have answered so far
}

// TestUsageBehindEnvoy runs the token budgets of examples/envoy.yaml in the
// real Envoy, in front of floodgate and, beside it, of the reference
// server, over several windows of a second: a look at every budget before
// a request, the usage the backend reports charged when the response ends.
// Both must refuse the same requests with the same X-RateLimit-Remaining,
// floodgate's counters must hold exactly the usage reported in the window
// (none lost, a charge past the limit kept), and a spent budget must pass
// again in the next window.
func TestUsageBehindEnvoy(t *testing.T) {
	reference := harness.Require(t, harness.Reference)
	// A loaded machine must not turn a decision or a look at the counters
	// into floodgate's failure policy: the store deadline is generous.
	sc := scenario{files: map[string]string{"demo.yaml": usageBudgets}, env: []string{"FLOODGATE_REDIS_DEADLINE=5s"}}
	backend := usageBackend(t)
	fg := startLLMFront(t, "floodgate", startServer(t, "", sc), backend)
	ref := startLLMFront(t, "reference", startServer(t, reference, sc), backend)
	for round, attempt := 0, 0; round < 3; attempt++ {
		if attempt > 10 {
			t.Fatalf("10 attempts of a round crossed a window: the machine is too slow for windows of a second")
		}
		suffix := "-" + strconv.Itoa(attempt)
		window := nextWindow()
		got := map[string][]string{}
		for _, f := range []*llmFront{fg, ref} {
			got[f.name] = f.play(t, llmRound, suffix)
		}
		used := fg.used(t, suffix)
		if time.Now().Truncate(time.Second) != window {
			t.Logf("round %d crossed a window: played again", round)
			continue
		}
		t.Logf("round %d: floodgate %q\nreference %q\nused %v", round, got[fg.name], got[ref.name], used)
		checkRound(t, round, got[fg.name], got[ref.name], used)
		// The next window lets ann through again, on both.
		nextWindow()
		for _, f := range []*llmFront{fg, ref} {
			if a := f.play(t, []llmCall{{"ann", "acme", 1, 1, 200}}, suffix); a[0][:3] != "200" {
				t.Errorf("round %d: %s: ann in the next window: %s, want 200", round, f.name, a[0])
			}
		}
		round++
	}
}

// checkRound compares a round's answers with what llmRound wants and with
// the reference's, and floodgate's counters with the usage charged.
func checkRound(t *testing.T, round int, fg, ref []string, used map[string]int64) {
	t.Helper()
	for i, c := range llmRound {
		if fg[i][:3] != strconv.Itoa(c.want) || fg[i] != ref[i] {
			t.Errorf("round %d, request %d (%s of %s, %d+%d tokens): floodgate %q, reference %q, want %d for both",
				round, i, c.user, c.org, c.in, c.out, fg[i], ref[i], c.want)
		}
	}
	// What the requests that passed reported, by counter.
	want := map[string]int64{}
	for _, c := range llmRound {
		if c.want == http.StatusOK {
			want["llm_user="+c.user] += c.in + c.out
			want["llm_org="+c.org] += c.in + c.out
			want["llm_tokens=input&llm_user="+c.user] += c.in
			want["llm_tokens=output&llm_user="+c.user] += c.out
		}
	}
	for k, n := range want {
		if used[k] != n {
			t.Errorf("round %d: floodgate's counter %s used %d, want the %d reported", round, k, used[k], n)
		}
	}
}

// nextWindow waits for the start of the next second, and a little more so
// that the servers' clocks are in it too, and returns it.
func nextWindow() time.Time {
	next := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(next.Add(20 * time.Millisecond)))
	return next
}

// usageBackend serves the LLM API: it reports the tokens the request asks
// it to (x-test-input, x-test-output) in the usage headers
// examples/envoy.yaml charges.
func usageBackend(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		in, _ := strconv.ParseInt(r.Header.Get("x-test-input"), 10, 64)
		out, _ := strconv.ParseInt(r.Header.Get("x-test-output"), 10, 64)
		w.Header().Set("x-usage-input-tokens", strconv.FormatInt(in, 10))
		w.Header().Set("x-usage-output-tokens", strconv.FormatInt(out, 10))
		w.Header().Set("x-usage-total-tokens", strconv.FormatInt(in+out, 10))
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// startLLMFront runs examples/envoy.yaml in front of srv, through a tap.
func startLLMFront(t *testing.T, name string, srv server, backend string) *llmFront {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tap := envoytest.StartTap(t, srv.GRPCAddr)
	e := envoytest.Start(t, envoytest.Config{Bootstrap: raw, Upstreams: map[string][]string{
		"floodgate": {tap.Addr}, "backend": {backend},
	}})
	return &llmFront{name: name, srv: srv, tap: tap, addr: e.Listener("http")}
}

// play sends calls through Envoy, users and organisations named with
// suffix, and returns each answer as "<status> remaining=<X-RateLimit-
// Remaining>". After each, it waits until the server has answered the
// call Envoy makes for it: the look before it, and for a request that
// passed, the charge after it.
func (f *llmFront) play(t *testing.T, calls []llmCall, suffix string) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		req, err := http.NewRequest(http.MethodPost, "http://"+f.addr+"/v1/chat/completions", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("x-user", c.user+suffix)
		req.Header.Set("x-org", c.org+suffix)
		req.Header.Set("x-test-input", strconv.FormatInt(c.in, 10))
		req.Header.Set("x-test-output", strconv.FormatInt(c.out, 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: through Envoy: %v", f.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		f.calls++
		if resp.StatusCode == http.StatusOK {
			f.calls++
		}
		f.tap.WaitDone(t, f.calls, 10*time.Second)
		out = append(out, fmt.Sprintf("%d remaining=%s", resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining")))
	}
	return out
}

// used reads what floodgate's counters of llmRound's users and
// organisations (named with suffix) have used, by descriptor, from its
// debug listener's /counters.
func (f *llmFront) used(t *testing.T, suffix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, c := range llmRound {
		for _, d := range [][]string{
			{"llm_user", c.user}, {"llm_org", c.org},
			{"llm_tokens", "input", "llm_user", c.user}, {"llm_tokens", "output", "llm_user", c.user},
		} {
			q, name := url.Values{"domain": {"demo"}}.Encode(), ""
			for i := 0; i < len(d); i += 2 {
				v := d[i+1]
				if d[i] != "llm_tokens" {
					v += suffix
				}
				q += "&" + url.QueryEscape(d[i]) + "=" + url.QueryEscape(v)
				name += "&" + d[i] + "=" + d[i+1]
			}
			out[name[1:]] = f.counter(t, q)
		}
	}
	return out
}

// counter returns the used of the one limit GET /counters?query shows.
func (f *llmFront) counter(t *testing.T, query string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + f.srv.DebugAddr + counters.Path + "?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var a counters.Answer
	if err := json.Unmarshal(body, &a); resp.StatusCode != http.StatusOK || err != nil || len(a.Limits) != 1 {
		t.Fatalf("GET /counters?%s: %s %s (%v): want one limit", query, resp.Status, body, err)
	}
	return a.Limits[0].Used
}
