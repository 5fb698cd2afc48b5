package test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// resetRules gives each case of TestEnvoyResetHeader its own api_key value in
// the demo domain, which examples/envoy.yaml asks for: 2 hits per window, or
// a burst of 2 for the buckets.
const resetRules = `
domain: demo
descriptors:
  - key: api_key
    value: fixed-second
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: api_key
    value: fixed-minute
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: api_key
    value: fixed-calendar-day
    rate_limit: {unit: day, requests_per_unit: 2, calendar: true}
  - key: api_key
    value: fixed-calendar-month
    rate_limit: {unit: month, requests_per_unit: 2, calendar: true, timezone: America/New_York}
  - key: api_key
    value: sliding-window-second
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_window, precision: 10}
  - key: api_key
    value: sliding-window-minute
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_window}
  - key: api_key
    value: sliding-log-second
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_log}
  - key: api_key
    value: sliding-log-minute
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: sliding_log}
  - key: api_key
    value: token-bucket-second
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: token_bucket}
  - key: api_key
    value: token-bucket-minute
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket}
  - key: api_key
    value: leaky-bucket-second
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leaky_bucket}
  - key: api_key
    value: leaky-bucket-minute
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: leaky_bucket}
  - key: api_key
    value: gcra-second
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: gcra}
  - key: api_key
    value: gcra-minute
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra}
  - key: api_key
    value: zero-minute
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// envoyAnswer is what a client saw of one request through Envoy.
type envoyAnswer struct {
	status                   int
	limit, remaining, reset  string // X-RateLimit-*, written by Envoy
	retryAfter, floodgateRst string // Retry-After and RateLimit-Reset, from floodgate
}

func (a envoyAnswer) String() string {
	return fmt.Sprintf("%d limit=%s remaining=%s reset=%s retry-after=%s", a.status, a.limit, a.remaining, a.reset, a.retryAfter)
}

// TestEnvoyResetHeader records what the real Envoy tells clients in
// X-RateLimit-Reset for every algorithm and for second, minute and calendar
// windows (run with -v to see the table docs/operations.md quotes), and holds
// floodgate to one promise: Envoy never tells a client "0" while a retry
// would still be refused. Envoy keeps only the whole seconds of
// duration_until_reset, so a reset of 0.4 s would read 0.
//
// For the windows of a second it also checks the other side: once the
// advertised reset has passed, the same request is admitted again, so the
// reset is not longer than it needs to be.
func TestEnvoyResetHeader(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			flags, _ := b.args(t)
			dir := t.TempDir()
			writeRules(t, dir, map[string]string{"rules.yaml": resetRules})
			p := start(t, options{args: append([]string{"-config", dir, "-response-headers", "reference"}, flags...)})
			f := startEnvoy(t, nil, p.GRPCAddr)

			var mu sync.Mutex
			table := map[string][]envoyAnswer{}
			t.Run("cases", func(t *testing.T) {
				for _, value := range resetCases() {
					t.Run(value, func(t *testing.T) {
						t.Parallel()
						answers := checkResetCase(t, f, value)
						mu.Lock()
						table[value] = answers
						mu.Unlock()
					})
				}
			})
			var out strings.Builder
			for _, value := range resetCases() {
				fmt.Fprintf(&out, "| %s |", value)
				for _, a := range table[value] {
					fmt.Fprintf(&out, " %d %s/%s/%s |", a.status, a.remaining, a.reset, a.retryAfter)
				}
				out.WriteString("\n")
			}
			t.Logf("through Envoy, each cell: status remaining/X-RateLimit-Reset/Retry-After\n%s", out.String())
		})
	}
}

// resetCases are the api_key values of resetRules that carry a limit.
func resetCases() []string {
	var vs []string
	for _, line := range strings.Split(resetRules, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "value: "); ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// checkResetCase sends requests for one limit until Envoy answers 429, and
// returns every answer.
func checkResetCase(t *testing.T, f *envoyFront, value string) []envoyAnswer {
	// A distinct client address per case and backend keeps the demo's
	// remote_address descriptor, which these rules do not limit, apart.
	ask := func() envoyAnswer {
		resp, _ := f.get(t, "/", "x-api-key", value, "x-forwarded-for", "198.51.100.1")
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d, want 200 or 429", value, resp.StatusCode)
		}
		return envoyAnswer{
			status: resp.StatusCode, limit: resp.Header.Get("X-RateLimit-Limit"),
			remaining: resp.Header.Get("X-RateLimit-Remaining"), reset: resp.Header.Get("X-RateLimit-Reset"),
			retryAfter: resp.Header.Get("Retry-After"), floodgateRst: resp.Header.Get("RateLimit-Reset"),
		}
	}
	var answers []envoyAnswer
	// A window of a second may roll over between requests; a few tries
	// always reach a denial.
	for range 8 {
		a := ask()
		answers = append(answers, a)
		if a.reset == "" {
			t.Fatalf("%s: Envoy wrote no X-RateLimit-Reset: %v", value, a)
		}
		reset, err := strconv.Atoi(a.reset)
		if err != nil {
			t.Fatalf("%s: X-RateLimit-Reset %q is not whole seconds", value, a.reset)
		}
		// The promise: a client told 0 may retry at once. A 429, or a
		// 200 that left nothing, means the same request now is refused.
		if reset == 0 && (a.status == http.StatusTooManyRequests || a.remaining == "0") {
			t.Errorf("%s: Envoy told the client X-RateLimit-Reset: 0 while a retry is refused: %v", value, a)
		}
		if a.status == http.StatusTooManyRequests {
			if a.remaining != "0" {
				t.Errorf("%s: a 429 with X-RateLimit-Remaining %s, want 0", value, a.remaining)
			}
			if a.retryAfter == "" || a.retryAfter == "0" {
				t.Errorf("%s: a 429 with Retry-After %q", value, a.retryAfter)
			}
			if strings.HasSuffix(value, "-second") {
				// Past the advertised reset the request passes again.
				time.Sleep(time.Duration(reset)*time.Second + 50*time.Millisecond)
				if again := ask(); again.status != http.StatusOK {
					t.Errorf("%s: still refused %d s after a 429 that said X-RateLimit-Reset: %d: %v", value, reset, reset, again)
				}
			}
			return answers
		}
	}
	t.Fatalf("%s: no 429 after %d requests to a limit of 2: %v", value, len(answers), answers)
	return nil
}
