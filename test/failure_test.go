package test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
)

// outageRules has one limit per failure policy, each on a single key, so
// high that it never denies: while Redis answers every request is
// "OK OK:<remaining>"; while it does not, each answers by its policy.
const outageRules = `
domain: outage
descriptors:
  - key: allow
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: deny
    failure_mode: deny
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: unavailable
    failure_mode: unavailable
    rate_limit: {unit: day, requests_per_unit: 1000000000}
`

// policies are the tags of outageRules' keys with the answer of each
// failure policy.
var policies = []struct{ tag, answer string }{
	{"allow", "OK OK:-"},
	{"deny", "OVER OVER:0"},
	{"unavailable", "Unavailable"},
}

// outageRequest sends the three policies in turn.
func outageRequest(w, i int) (string, *pb.RateLimitRequest) {
	tag := policies[(w+i)%len(policies)].tag
	return tag, request("outage", desc(tag, "k"))
}

// healthyAnswer is a decision taken in Redis: a status with its limit.
var healthyAnswer = regexp.MustCompile(`^OK OK:\d+$`)

// policyAnswer returns the failure policy's answer for tag.
func policyAnswer(tag string) string {
	for _, p := range policies {
		if p.tag == tag {
			return p.answer
		}
	}
	return ""
}

// Timing of the outage tests. The store deadline is short so that a
// request paying it shows clearly against one that fails fast.
const (
	outageDeadline = 100 * time.Millisecond
	// faultFor is how long each fault lasts.
	faultFor = 2 * time.Second
	// breakerGrace is how long after the fault the breaker has to open.
	breakerGrace = time.Second
	// recoveryBound is how long after Redis is back the first decision
	// taken in Redis may wait (the breaker's probe interval).
	recoveryBound = 5 * time.Second
	// settle is how long after the first decision in Redis answers may
	// still mix (stale pooled connections each fail once).
	settle = 500 * time.Millisecond
	// minDecidedShare is the share of decisions expected while Redis is
	// up: on a loaded shared machine a few requests miss the deadline.
	minDecidedShare = 0.95
)

// TestRedisOutageUnderLoad: Redis dies, hangs or stalls while requests
// flow. No request waits longer than the deadline plus a margin; every
// answer is either a decision or the rule's failure policy; the process
// stays up and healthy; metrics count each failure answer; a dead or hung
// Redis is failed fast (median far below the deadline) instead of costing
// every request the deadline; and once Redis is back, decisions resume by
// themselves.
func TestRedisOutageUnderLoad(t *testing.T) {
	tests := []struct {
		name  string
		extra []string // redis-server directives
		// inject starts the fault and returns a function that ends it (and
		// returns once Redis answers again).
		inject func(t *testing.T, r *redistest.Server) (heal func())
		// failFast: a fault every request would otherwise pay the whole
		// deadline for, where the circuit breaker must answer instead.
		failFast bool
	}{
		{
			// A crashed process: connections are refused at once; it comes
			// back empty on the same port.
			name: "killed",
			inject: func(t *testing.T, r *redistest.Server) func() {
				r.Stop()
				return r.Restart
			},
			failFast: true,
		},
		{
			// A hung host: connections are accepted, nothing answers.
			name: "frozen",
			inject: func(t *testing.T, r *redistest.Server) func() {
				r.Freeze()
				return r.Thaw
			},
			failFast: true,
		},
		{
			name: "client pause",
			inject: func(t *testing.T, r *redistest.Server) func() {
				const pause = faultFor + 500*time.Millisecond
				if _, err := r.Do("CLIENT", "PAUSE", strconv.Itoa(int(pause.Milliseconds())), "ALL"); err != nil {
					t.Fatal(err)
				}
				until := time.Now().Add(pause)
				return func() { waitUntil(until) }
			},
		},
		{
			name:  "debug sleep",
			extra: []string{"--enable-debug-command", "yes"},
			inject: func(t *testing.T, r *redistest.Server) func() {
				done := make(chan error, 1)
				go func() {
					_, err := r.Do("DEBUG", "SLEEP", fmt.Sprint((faultFor + 500*time.Millisecond).Seconds()))
					done <- err
				}()
				return func() {
					if err := <-done; err != nil {
						t.Errorf("DEBUG SLEEP: %v", err)
					}
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := redistest.Start(t, tc.extra...)
			dir := t.TempDir()
			writeRules(t, dir, map[string]string{"outage.yaml": outageRules})
			p := start(t, options{args: []string{"-redis", r.Addr, "-config", dir, "-redis-deadline", outageDeadline.String()}})
			// Warm up (connections, scripts); under a loaded machine a call
			// may miss the deadline, which the metrics then count too.
			failures := map[string]int{}
			for _, pol := range policies {
				eventually(t, 5*time.Second, func() string {
					got := summary(p.mustCall(request("outage", desc(pol.tag, "k"))))
					if got == pol.answer {
						failures[pol.tag]++
					}
					if !healthyAnswer.MatchString(got) {
						return pol.tag + " before the fault: " + got
					}
					return ""
				})
			}

			t0 := time.Now()
			l := startLoad([]*proc{p}, 6, 10*time.Millisecond, outageRequest)
			time.Sleep(500 * time.Millisecond)
			injected := time.Now()
			heal := tc.inject(t, r)
			waitUntil(injected.Add(faultFor / 2))
			checkServing(t, p, "during the outage")
			if tc.failFast {
				checkStoreHealth(t, p, false, "during the outage")
			}
			waitUntil(injected.Add(faultFor))
			healing := time.Now()
			heal()
			healed := time.Now()
			// Run until the recovery bound has passed or answers have been
			// decisions for a while.
			for {
				time.Sleep(100 * time.Millisecond)
				l.mu.Lock()
				first := firstHealthy(l.out, healed)
				l.mu.Unlock()
				if time.Since(healed) > recoveryBound+settle+time.Second ||
					!first.IsZero() && time.Since(first) > settle+time.Second {
					break
				}
			}
			out := l.finish()
			details := func() string {
				return fmt.Sprintf("answers:\n%stimeline (fault at %.1fs, ended at %.1fs, Redis answering at %.1fs):\n%s",
					answerCounts(out), injected.Sub(t0).Seconds(), healing.Sub(t0).Seconds(), healed.Sub(t0).Seconds(), timeline(out, t0))
			}

			// Every answer is a decision or the policy's, and none waited
			// much longer than the deadline.
			for _, o := range out {
				if !healthyAnswer.MatchString(o.answer) && o.answer != policyAnswer(o.tag) {
					t.Errorf("%s answered %q: neither a decision nor its failure policy\n%s", o.tag, o.answer, details())
					break
				}
				if o.answer == policyAnswer(o.tag) {
					failures[o.tag]++
				}
			}
			checkLatency(t, "whole run", out, outageDeadline)

			// Before the fault: decisions (a loaded machine may make a few
			// miss the deadline).
			var before []outcome
			for _, o := range between(out, t0, injected) {
				if o.start.Add(o.took).Before(injected) {
					before = append(before, o)
				}
			}
			if share := decidedShare(before); share < minDecidedShare {
				t.Errorf("before the fault only %.1f%% of answers were decisions\n%s", 100*share, details())
			}

			// During the fault (once the requests in flight at its start
			// are answered, until it ends): the policies only.
			var during []outcome
			for _, o := range between(out, injected.Add(outageDeadline+latencyMargin), healing) {
				if o.start.Add(o.took).Before(healing) {
					during = append(during, o)
				}
			}
			for _, o := range during {
				if o.answer != policyAnswer(o.tag) {
					t.Errorf("during the fault %s answered %q, want its policy %q\n%s", o.tag, o.answer, policyAnswer(o.tag), details())
					break
				}
			}
			if len(during) < 30 {
				t.Errorf("only %d requests during the fault\n%s", len(during), details())
			}
			open := between(during, injected.Add(breakerGrace), healing)
			med := quantile(latencies(open), .5)
			switch {
			case len(open) == 0:
				t.Errorf("no request from %v after the fault on\n%s", breakerGrace, details())
			case tc.failFast && med > outageDeadline/5:
				t.Errorf("Redis %s: median answer %v from %v after the fault on (%s); want under %v: "+
					"a dead Redis must be failed fast by the circuit breaker, not cost each request the %v deadline\n%s",
					tc.name, med, breakerGrace, latencySummary(open), outageDeadline/5, outageDeadline, details())
			case !tc.failFast && med > outageDeadline+outageDeadline/2:
				t.Errorf("Redis %s: median answer %v during the fault (%s); want about the %v deadline\n%s",
					tc.name, med, latencySummary(open), outageDeadline, details())
			}

			// After: decisions resume within the recovery bound and stay.
			first := firstHealthy(out, healed)
			if first.IsZero() || first.Sub(healed) > recoveryBound {
				t.Fatalf("no decision in Redis within %v of Redis answering again\n%s", recoveryBound, details())
			}
			if share := decidedShare(between(out, first.Add(settle), time.Now())); share < minDecidedShare {
				t.Errorf("from %v after decisions resumed only %.1f%% of answers were decisions\n%s", settle, 100*share, details())
			}

			// Metrics count every failure answer by policy, and the store
			// errors behind them.
			total := 0
			for _, pol := range policies {
				total += failures[pol.tag]
				mode := fmt.Sprintf("mode=%q", pol.tag)
				if got := p.metricSum("floodgate_store_failure_answers_total", mode); got != float64(failures[pol.tag]) {
					t.Errorf("floodgate_store_failure_answers_total{%s} summed over causes = %v, want %d (the %s answers the clients got)", mode, got, failures[pol.tag], pol.answer)
				}
			}
			if got := p.metric(`floodgate_store_errors_total{store="redis"}`); got != float64(total) {
				t.Errorf("store errors = %v, want %d (one per failure answer)", got, total)
			}
			checkServing(t, p, "after the outage")
			checkStoreHealth(t, p, true, "after the outage")
			checkNoCrash(t, p)
		})
	}
}

// decidedShare is the share of out that are decisions in Redis; 1 for none.
// An answer that is not a decision is left out when the client's process
// stalled for a quarter of its time or more: a busy machine, not the
// server, most likely made that request miss its deadline.
func decidedShare(out []outcome) float64 {
	n, all := 0, 0
	for _, o := range out {
		switch {
		case healthyAnswer.MatchString(o.answer):
			n++
		case o.stalled >= o.took/4:
			continue
		}
		all++
	}
	if all == 0 {
		return 1
	}
	return float64(n) / float64(all)
}

// firstHealthy returns the start of the first decision in Redis at or
// after from, or the zero time.
func firstHealthy(out []outcome, from time.Time) time.Time {
	for _, o := range out {
		if !o.start.Before(from) && healthyAnswer.MatchString(o.answer) {
			return o.start
		}
	}
	return time.Time{}
}

// checkServing asserts that the process reports itself healthy on HTTP and
// gRPC. A Redis outage does not make floodgate unhealthy: the failure
// policy is an answer, and taking every instance out of rotation because
// their shared Redis failed would turn fail-open rules into refusals at
// Envoy.
func checkServing(t *testing.T, p *proc, when string) {
	t.Helper()
	if code, body := p.httpGet("/healthcheck"); code != http.StatusOK {
		t.Errorf("/healthcheck %s: %d %q", when, code, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(p.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health %s: %v %v", when, resp, err)
	}
}

// checkStoreHealth asserts what the process says of its store: the
// floodgate_store_healthy gauge (0 while the circuit breaker fails calls at
// once) and the store line of /rlconfig.
func checkStoreHealth(t *testing.T, p *proc, healthy bool, when string) {
	t.Helper()
	want, line := 0.0, "store: redis unhealthy"
	if healthy {
		want, line = 1, "store: redis healthy"
	}
	if got := p.metric("floodgate_store_healthy"); got != want {
		t.Errorf("floodgate_store_healthy %s = %v, want %v", when, got, want)
	}
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, line) {
		t.Errorf("/rlconfig %s lacks %q:\n%s", when, line, body)
	}
}

// checkNoCrash asserts that the process still runs and logged no panic.
func checkNoCrash(t *testing.T, p *proc) {
	t.Helper()
	select {
	case <-p.Done():
		t.Fatalf("floodgate exited (%v):\n%s", p.State(), p.Logs)
	default:
	}
	if logs := p.Logs.String(); strings.Contains(logs, "panic") || strings.Contains(logs, "goroutine ") {
		t.Errorf("floodgate logged a panic:\n%s", logs)
	}
}

// TestRedisRestartedEmpty: Redis comes back without its data (a restart
// without persistence, a new node): every algorithm's counter starts over
// within recoveryBound,
// the scripts missing from the new server's cache (NOSCRIPT) are loaded
// again without an error reaching a client, and nothing crashes.
func TestRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	var rules strings.Builder
	rules.WriteString("domain: restart\ndescriptors:\n")
	for _, alg := range algorithms() {
		fmt.Fprintf(&rules, "  - key: %s\n    failure_mode: unavailable\n    rate_limit: {unit: day, requests_per_unit: 2, algorithm: %s}\n", alg, alg)
	}
	r := redistest.Start(t)
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"restart.yaml": rules.String()})
	p := start(t, options{args: []string{"-redis", r.Addr, "-config", dir, "-redis-deadline", "2s"}})
	call := func(alg string) string {
		resp, err := p.call(request("restart", desc(alg, "k")))
		if err != nil {
			return statusCode(err)
		}
		return summary(resp)
	}
	for _, alg := range algorithms() {
		for i, want := range []string{"OK OK:1", "OK OK:0", "OVER OVER:0"} {
			if got := call(alg); got != want {
				t.Fatalf("%s: hit %d answered %q, want %q", alg, i+1, got, want)
			}
		}
	}

	r.Restart()
	restarted := time.Now()
	for _, alg := range algorithms() {
		// A pooled connection to the old process may fail once (answered
		// Unavailable), and a denial remembered from before the restart
		// may answer for a moment; neither consumes anything, so the first
		// admission is the first hit on the new, empty counter.
		var got string
		eventually(t, time.Until(restarted.Add(recoveryBound)), func() string {
			if got = call(alg); got == "Unavailable" || got == "OVER OVER:0" {
				return fmt.Sprintf("%s still answers %q %v after Redis restarted empty: the counter did not start over",
					alg, got, time.Since(restarted).Round(time.Millisecond))
			}
			return ""
		})
		if got != "OK OK:1" {
			t.Errorf("%s: first admission after Redis restarted empty answered %q, want OK OK:1 (the counter starts over)", alg, got)
		}
	}
	stats, err := r.Info("errorstats")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := r.Info("commandstats")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(stats["errorstat_NOSCRIPT"], "count=") && !strings.HasPrefix(cmds["cmdstat_function|load"], "calls=") {
		t.Errorf("the restarted Redis never had the Lua code loaded again (no NOSCRIPT, no FUNCTION LOAD; errorstats %v): so this test proves nothing about reloading", stats)
	}
	checkNoCrash(t, p)
}

// algorithms returns every algorithm's name as rule files write it.
func algorithms() []string {
	var names []string
	for _, a := range limit.Algorithms() {
		names = append(names, a.String())
	}
	return names
}
