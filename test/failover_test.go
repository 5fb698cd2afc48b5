package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// failoverRules fails requests visibly (Unavailable) when the store fails,
// so that the client sees every failed store call; the limit never denies.
const failoverRules = `
domain: failover
descriptors:
  - key: user
    failure_mode: unavailable
    rate_limit: {unit: day, requests_per_unit: 1000000000}
`

const (
	failoverDeadline = 100 * time.Millisecond
	// errorsStopBound is how long after the new master is in place (the
	// Sentinels agree on it, or every Cluster node reports the cluster ok)
	// errors may go on: clients learn of the change by a notification or
	// by a failed call and a topology reload, and the circuit breaker,
	// opened by the failover, lets a probe through within its longest
	// backoff (1 s).
	errorsStopBound = recoveryBound
)

// failoverRequest spreads requests over 64 counters, which a Cluster puts
// on every master.
func failoverRequest(w, i int) (string, *pb.RateLimitRequest) {
	return "user", request("failover", desc("user", fmt.Sprintf("u%d", (w*7919+i)%64)))
}

// failover runs load against p while failOver kills the master and
// returns once a replica is promoted, then flushes every master's script
// cache, and checks that answers were decisions except during the failover
// (Unavailable then, never anything else), that errors stopped within
// errorsStopBound of the promotion, that the flush cost no request
// (NOSCRIPT is handled), and that no request waited past its deadline.
func failover(t *testing.T, p *proc, failOver func() string, masters func() []string) {
	t.Helper()
	eventually(t, 5*time.Second, func() string {
		if got := summary(p.mustCall(request("failover", desc("user", "warm")))); !healthyAnswer.MatchString(got) {
			return "before the failover: " + got
		}
		return ""
	})
	t0 := time.Now()
	l := startLoad([]*proc{p}, 6, 10*time.Millisecond, failoverRequest)
	time.Sleep(500 * time.Millisecond)
	killed := time.Now()
	promotedAddr := failOver()
	promoted := time.Now()
	waitUntil(promoted.Add(errorsStopBound + time.Second))
	flushed := time.Now()
	for _, m := range masters() {
		for _, c := range [][]string{{"SCRIPT", "FLUSH"}, {"FUNCTION", "FLUSH"}} {
			if _, err := redistest.Do(m, c...); err != nil {
				t.Errorf("%s on %s: %v", strings.Join(c, " "), m, err)
			}
		}
	}
	time.Sleep(time.Second)
	out := l.finish()
	details := func() string {
		return fmt.Sprintf("answers:\n%stimeline (master killed at %.1fs, %s promoted at %.1fs, scripts flushed at %.1fs):\n%s",
			answerCounts(out), killed.Sub(t0).Seconds(), promotedAddr, promoted.Sub(t0).Seconds(), flushed.Sub(t0).Seconds(), timeline(out, t0))
	}
	t.Logf("master killed, %s promoted %v later", promotedAddr, promoted.Sub(killed).Round(time.Millisecond))

	for _, o := range out {
		if !healthyAnswer.MatchString(o.answer) && o.answer != "Unavailable" {
			t.Errorf("answered %q: neither a decision nor the failure policy\n%s", o.answer, details())
			break
		}
	}
	checkLatency(t, "whole run", out, failoverDeadline)
	if share := decidedShare(between(out, t0, killed)); share < minDecidedShare {
		t.Errorf("before the failover only %.1f%% of answers were decisions\n%s", 100*share, details())
	}
	after := between(out, promoted.Add(errorsStopBound), flushed)
	if len(after) < 30 {
		t.Errorf("only %d requests after the failover\n%s", len(after), details())
	}
	if share := decidedShare(after); share < minDecidedShare {
		t.Errorf("from %v after the promotion only %.1f%% of answers were decisions: errors did not stop\n%s", errorsStopBound, 100*share, details())
	}
	if share := decidedShare(between(out, flushed, time.Now())); share < minDecidedShare {
		t.Errorf("after SCRIPT FLUSH and FUNCTION FLUSH only %.1f%% of answers were decisions: NOSCRIPT or a missing function is not handled\n%s", 100*share, details())
	}
	checkNoCrash(t, p)
}

// TestSentinelFailover: floodgate follows Sentinel (real redis-server
// --sentinel processes) to the promoted replica when the master dies under
// load.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	g := redistest.StartSentinel(t, 1, 3, 500*time.Millisecond)
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"failover.yaml": failoverRules})
	p := start(t, options{args: []string{"-redis-type", "sentinel", "-redis", g.URL(), "-config", dir,
		"-redis-deadline", failoverDeadline.String()}})
	var current string
	failover(t, p, func() string {
		old, err := g.Master()
		if err != nil {
			t.Fatal(err)
		}
		g.Node(old).Stop()
		if current, err = g.WaitFailover(old, 20*time.Second); err != nil {
			t.Fatal(err)
		}
		return current
	}, func() []string { return []string{current} })
}
