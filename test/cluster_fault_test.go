package test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// nodeRules: 50 per day for each user, by default failing open.
const nodeRules = `
domain: spill
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 50}
`

// clusterDeadline is the store deadline of TestClusterNodeDown: longer
// than the default 50 ms, which a loaded machine misses now and then on a
// healthy master too (its breaker would then open, rightly, but not
// because of the fault under test).
const clusterDeadline = 500 * time.Millisecond

// TestClusterNodeDown: one master of a 3-master Cluster without replicas
// (cluster-require-full-coverage no) is killed, then in another run frozen,
// while one client alternates a user whose counter lives on that master
// with a user on a live master. Every answer for the live user is a
// decision, and exactly 50 are admitted; the user on the failing master
// gets the failure policy, and once its breaker is open without waiting
// for the deadline; /rlconfig, /metrics and the log name the master that
// fails, and only it; once it is back its user is decided again within
// the watch's probe interval and the breaker's longest backoff.
func TestClusterNodeDown(t *testing.T) {
	for _, fault := range []struct {
		name        string
		cause, heal func(*redistest.Server)
	}{
		{"killed", (*redistest.Server).Stop, (*redistest.Server).Restart},
		{"frozen", (*redistest.Server).Freeze, (*redistest.Server).Thaw},
	} {
		t.Run(fault.name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartCluster(t, 3, 0, "--cluster-require-full-coverage", "no")
			dir := t.TempDir()
			writeRules(t, dir, map[string]string{"spill.yaml": nodeRules})
			p := start(t, options{args: []string{"-redis-type", "cluster", "-redis", strings.Join(c.Addrs, ","),
				"-config", dir, "-deny-cache=false", "-redis-deadline", clusterDeadline.String()}})
			owner := usersByMaster(t, p, c)
			victim := c.Nodes[0]
			dead, live := owner[victim.Addr], owner[c.Nodes[1].Addr]

			fault.cause(victim)
			probe := startStallProbe()
			var liveAnswers, deadAnswers []outcome
			for i := range 150 {
				for _, u := range []string{live, dead} {
					start := time.Now()
					o := outcome{tag: u, start: start, answer: summary(p.mustCall(request("spill", desc("user", u))))}
					o.took = time.Since(start)
					if u == live {
						liveAnswers = append(liveAnswers, o)
					} else if i >= 10 {
						// Past the breaker's threshold: the breaker answers.
						deadAnswers = append(deadAnswers, o)
					}
				}
			}
			checkLiveUser(t, liveAnswers, probe.finish())
			for _, o := range deadAnswers {
				if o.answer != "OK OK:-" {
					t.Fatalf("user on the failing master answered %q, want the failure policy's OK OK:-", o.answer)
				}
			}
			if med := quantile(latencies(deadAnswers), .5); med > clusterDeadline/5 {
				t.Errorf("user on the failing master: median answer %v (%s), want under %v: once its breaker is open, no request should wait for the %v deadline",
					med, latencySummary(deadAnswers), clusterDeadline/5, clusterDeadline)
			}
			checkNodeSignals(t, p, c, victim.Addr)

			fault.heal(victim)
			// A restarted master refuses writes for its first 2 s
			// (CLUSTERDOWN) until it has heard from the others: it is
			// back once it says its cluster is ok.
			if err := c.WaitOK(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			healed := time.Now()
			eventually(t, 5*time.Second, func() string {
				if got := summary(p.mustCall(request("spill", desc("user", dead)))); !healthyAnswer.MatchString(got) {
					return "user on the master that came back: " + got
				}
				return ""
			})
			// The watch probes every second while a node fails, and the
			// breaker lets a call through at least every second.
			if took := time.Since(healed); took > 2*time.Second {
				t.Errorf("decided again %v after the master came back, want within 2s", took)
			}
			t.Logf("decided again %v after the master came back", time.Since(healed).Round(time.Millisecond))
			eventually(t, 3*time.Second, func() string {
				if !strings.Contains(p.Logs.String(), "Redis node answers again") {
					return "no log line saying the node answers again"
				}
				return ""
			})
			checkNoCrash(t, p)
		})
	}
}

// usersByMaster sends one request for each of a few users and returns,
// for each master, a user whose counter it holds, found in its keys.
func usersByMaster(t *testing.T, p *proc, c *redistest.Cluster) map[string]string {
	t.Helper()
	owner := make(map[string]string)
	for i := 0; len(owner) < len(c.Nodes); i++ {
		if i == 200 {
			t.Fatalf("200 users cover only %d masters", len(owner))
		}
		u := fmt.Sprint("u", i)
		if got := summary(p.mustCall(request("spill", desc("user", u)))); got != "OK OK:49" {
			t.Fatalf("first request of %s: %s", u, got)
		}
		for _, n := range c.Nodes {
			keys, err := n.Do("KEYS", "*:"+u) // the counter ends with the value
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(keys) != "" && owner[n.Addr] == "" {
				owner[n.Addr] = u
			}
		}
	}
	return owner
}

// checkLiveUser: every answer was a decision, and 49 were admitted after
// the first (usersByMaster's) request: exactly the limit of 50.
//
// A request that missed its deadline while the machine kept this process
// from running for a quarter of its time (stalls, from a stallProbe) is
// excused, and then each such request may have been counted or not.
func checkLiveUser(t *testing.T, answers []outcome, stalls []interval) {
	t.Helper()
	admitted, excused := 0, 0
	for _, o := range answers {
		switch {
		case healthyAnswer.MatchString(o.answer):
			admitted++
		case o.answer == "OVER OVER:0":
		case overlap(stalls, o.start, o.start.Add(o.took)) >= o.took/4:
			t.Logf("user on a live master answered %q after %v, while the machine stalled this process", o.answer, o.took)
			excused++
		default:
			t.Fatalf("user on a live master answered %q after %v: not a decision", o.answer, o.took)
		}
	}
	if admitted > 49 || admitted < 49-excused {
		t.Errorf("user on a live master: %d of %d admitted after the first, want 49 (%d deadline misses excused)", admitted, len(answers), excused)
	}
}

// checkNodeSignals: /rlconfig, /metrics and the log name the failing
// master, and only it.
func checkNodeSignals(t *testing.T, p *proc, c *redistest.Cluster, victim string) {
	t.Helper()
	eventually(t, 3*time.Second, func() string {
		_, body := p.httpGet("/rlconfig")
		failing := regexp.MustCompile(`master ` + regexp.QuoteMeta(victim) + ` \(slots [0-9,-]+\): breaker (open|probing)`)
		if !failing.MatchString(body) {
			return "/rlconfig does not name the failing master " + victim + ":\n" + body
		}
		for _, n := range c.Nodes[1:] {
			if !strings.Contains(body, "master "+n.Addr) || regexp.MustCompile(regexp.QuoteMeta(n.Addr)+` \(slots [0-9,-]+\): breaker (open|probing)`).MatchString(body) {
				return "/rlconfig does not show the live master " + n.Addr + " closed:\n" + body
			}
		}
		for _, n := range c.Nodes {
			series := fmt.Sprintf(`floodgate_store_node_healthy{node=%q,redis="main"}`, n.Addr)
			want := 1.0
			if n.Addr == victim {
				want = 0
			}
			if got := p.metric(series); got != want {
				return fmt.Sprintf("%s = %v, want %v", series, got, want)
			}
		}
		if !regexp.MustCompile(`Redis node fails.*node=` + regexp.QuoteMeta(victim)).MatchString(p.Logs.String()) {
			return "no log line naming the failing node " + victim
		}
		return ""
	})
	checkServing(t, p, "with one master down")
}
