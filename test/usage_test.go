package test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// usageRules are the budgets of examples/envoy.yaml's two LLM routes as
// token buckets of 2,000 tokens a second: /v1/ looks before each request
// and charges what it used when it ends; /reserved/v1/ reserves
// x-max-tokens before and settles when it ends.
const usageRules = `
domain: demo
descriptors:
  - key: llm_user
    rate_limit: {unit: second, requests_per_unit: 2000, algorithm: token_bucket}
  - key: llm_reserved
    rate_limit: {unit: second, requests_per_unit: 2000, algorithm: token_bucket}
`

// usageRun is what one run of concurrent streams used, second by second
// from its start: the tokens the responses reported, by the second their
// request was let through.
type usageRun struct {
	perSecond        []int64
	passed, refused  atomic.Int64
	budget, capacity int64 // tokens per second, and the bucket's size
}

// overshoot returns the most the tokens used by the end of a second went
// beyond what the budget allows by then (the bucket full at the start,
// then its rate), and that total.
func (r *usageRun) overshoot() (most, used int64) {
	most = -1 << 62
	for s, n := range r.perSecond {
		used += n
		most = max(most, used-(r.capacity+r.budget*int64(s+1)))
	}
	return most, used
}

// TestUsageUnderConcurrency measures what 32 streams in flight at once
// spend of one budget of 2,000 tokens a second through the real Envoy
// (examples/envoy.yaml), each response using 50 to 200 tokens after 30 ms.
// Checked before and charged after (/v1/), every stream a look lets
// through is charged when it ends, past the budget: the streams in flight
// when it runs out overshoot it. Reserved (/reserved/v1/), a stream runs
// only when its most (200) is left, and gives back what it did not use:
// the usage never goes beyond what the budget allows. docs/usage.md
// publishes the figures this logs.
func TestUsageUnderConcurrency(t *testing.T) {
	// A generous store deadline: an answer of the failure policy, on a
	// loaded machine, would let a request through unreserved too.
	p, _ := startWithRules(t, backends[0], usageRules, "-redis-deadline", "5s")
	var mu sync.Mutex
	var run *usageRun
	var start time.Time
	front := startEnvoyWith(t, func(w http.ResponseWriter, r *http.Request) {
		most, err := strconv.ParseInt(r.Header.Get("x-max-tokens"), 10, 64)
		if err != nil {
			most = 200
		}
		used := most/4 + rand.Int64N(most-most/4+1)
		mu.Lock()
		second := int(time.Since(start) / time.Second)
		run.perSecond[min(second, len(run.perSecond)-1)] += used
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		w.Header().Set("x-usage-total-tokens", strconv.FormatInt(used, 10))
		io.WriteString(w, "ok")
		// A call that fails lets its request through unreserved, and its
		// end gives back what was never taken (docs/usage.md): the
		// example's filter timeout of 100 ms is raised so that a loaded
		// machine (the race detector, other tests) does not make the
		// calls fail, which the run checks below.
	}, replace(t, "timeout: 0.1s", "timeout: 10s"), p.GRPCAddr)
	const streams, seconds = 32, 3
	for _, mode := range []struct{ name, path, user string }{
		{"checked, then charged", "/v1/chat/completions", "checked"},
		{"reserved", "/reserved/v1/chat/completions", "reserved"},
	} {
		mu.Lock()
		run, start = &usageRun{perSecond: make([]int64, seconds+1), budget: 2000, capacity: 2000}, time.Now()
		mu.Unlock()
		front.spend(t, run, mode.path, mode.user, streams, seconds*time.Second)
		if c, err := front.Counters("cluster.backend.ratelimit."); err != nil || c["cluster.backend.ratelimit.error"] != 0 {
			t.Fatalf("%s: Envoy's calls to floodgate failed (%v, %v): the run measures nothing", mode.name, c, err)
		}
		if n := p.metricSum("floodgate_store_failure_answers_total"); n != 0 {
			t.Fatalf("%s: %v answers of the failure policy: the run measures nothing", mode.name, n)
		}
		over, used := run.overshoot()
		t.Logf("%s: %d streams for %d s: %d tokens used, by second %v; most beyond the budget %d (%.0f%% of a second's budget); %d requests passed, %d refused",
			mode.name, streams, seconds, used, run.perSecond, over, 100*float64(over)/2000, run.passed.Load(), run.refused.Load())
		switch {
		case mode.user == "reserved" && over > 0:
			t.Errorf("reserved: the usage went %d tokens beyond the budget", over)
		case mode.user == "checked" && over <= 0:
			t.Errorf("checked, then charged: %d streams in flight never went beyond the budget (most %d): the measure measures nothing", streams, over)
		case run.passed.Load() == 0 || run.refused.Load() == 0:
			t.Errorf("%s: %d passed, %d refused: want both", mode.name, run.passed.Load(), run.refused.Load())
		}
	}
}

// spend has streams clients send requests to path as user, each as soon
// as its last one ended, for d; requests that end after d count too.
func (f *envoyFront) spend(t *testing.T, run *usageRun, path, user string, streams int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for range streams {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				req, _ := http.NewRequest(http.MethodPost, f.URL+path, strings.NewReader("{}"))
				req.Header.Set("x-user", user)
				req.Header.Set("x-max-tokens", "200")
				resp, err := httpClient.Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				switch resp.StatusCode {
				case http.StatusOK:
					run.passed.Add(1)
				case http.StatusTooManyRequests:
					run.refused.Add(1)
				default:
					errs <- fmt.Errorf("%s: %s", path, resp.Status)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
