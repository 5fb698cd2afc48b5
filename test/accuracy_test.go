package test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// Accuracy load: clients × perClient requests on each algorithm's one key,
// through instances processes sharing one Redis, against a limit of
// accuracyLimit per day. The window (and, for the buckets, the period of
// the refill) is a day, so that during the run the refill is below one
// hit (accuracyLimit per 86,400 s) and the windows do not turn unless the
// run crosses midnight UTC, which the test detects and retries.
const (
	accuracyLimit = 200
	clients       = 300
	perClient     = 2
	instances     = 3
)

// TestAccuracyUnderConcurrency: hundreds of concurrent clients hit one key
// through three floodgate processes sharing one Redis (a single node, then
// a 3-master Cluster). Each algorithm admits exactly its limit and denies
// the rest: every decision is taken atomically in Redis, whichever process
// asks.
func TestAccuracyUnderConcurrency(t *testing.T) {
	tests := []struct {
		name  string
		redis func(t *testing.T) []string // floodgate's Redis flags
	}{
		{"single", func(t *testing.T) []string {
			return []string{"-redis", redistest.Start(t).Addr}
		}},
		{"cluster", func(t *testing.T) []string {
			c := redistest.StartCluster(t, 3, 0)
			return []string{"-redis-type", "cluster", "-redis", strings.Join(c.Addrs, ",")}
		}},
	}
	var rules strings.Builder
	rules.WriteString("domain: accuracy\ndescriptors:\n")
	for _, alg := range algorithms() {
		// Unavailable on a store failure, so that a failure cannot pass
		// for an admission; the deadline is long enough for none to occur.
		fmt.Fprintf(&rules, "  - key: %s\n    failure_mode: unavailable\n    rate_limit: {unit: day, requests_per_unit: %d, algorithm: %s}\n",
			alg, accuracyLimit, alg)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flags := tc.redis(t)
			dir := t.TempDir()
			writeRules(t, dir, map[string]string{"accuracy.yaml": rules.String()})
			var procs []*proc
			for range instances {
				procs = append(procs, start(t, options{args: append([]string{"-config", dir, "-redis-deadline", "3s"}, flags...)}))
			}
			for attempt := 1; ; attempt++ {
				counts, crossed := accuracyRun(t, procs)
				if crossed && attempt < 3 {
					t.Logf("the run crossed midnight UTC, a window boundary; running again on fresh keys")
					continue
				}
				for _, alg := range algorithms() {
					c := counts[alg]
					if c["OK"] != accuracyLimit || c["OVER"] != clients*perClient-accuracyLimit || len(c) != 2 {
						t.Errorf("%s: answers %v for %d requests; want exactly %d OK and the rest OVER",
							alg, c, clients*perClient, accuracyLimit)
					}
				}
				break
			}
			for _, p := range procs {
				checkNoCrash(t, p)
			}
		})
	}
}

// accuracyRun sends every client's requests at once on fresh keys and
// returns, per algorithm, the count of each overall answer, and whether
// the run crossed a day boundary.
func accuracyRun(t *testing.T, procs []*proc) (map[string]map[string]int, bool) {
	t.Helper()
	key := fmt.Sprintf("run-%d", rand.Uint64())
	day := func() int64 { return time.Now().Unix() / 86400 }
	firstDay := day()
	algs := algorithms()
	var mu sync.Mutex
	counts := map[string]map[string]int{}
	for _, alg := range algs {
		counts[alg] = map[string]int{}
	}
	startGate := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			<-startGate
			for i := range perClient * len(algs) {
				alg := algs[(c+i)%len(algs)]
				p := procs[(c+i)%len(procs)]
				resp, err := p.call(request("accuracy", desc(alg, key)))
				answer := ""
				if err != nil {
					answer = statusCode(err)
				} else {
					answer = resp.OverallCode.String()
					answer = strings.TrimSuffix(answer, "_LIMIT")
				}
				mu.Lock()
				counts[alg][answer]++
				mu.Unlock()
			}
		})
	}
	close(startGate)
	wg.Wait()
	return counts, day() != firstDay
}
