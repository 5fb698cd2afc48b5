package test

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// outcome is one request sent by a load: when it started, how long the
// answer took as the client saw it, and the answer in summary form (or the
// gRPC code of the error).
type outcome struct {
	tag    string
	start  time.Time
	took   time.Duration
	answer string
	// stalled is how long this process was kept from running while the
	// request was out (see stallProbe): time the machine, not the server
	// under test, added to took.
	stalled time.Duration
}

// load sends requests from concurrent workers until stopped and records
// every outcome. Each worker paces itself (a pause between requests) so that
// a load leaves CPU for the servers and for tests running beside it.
type load struct {
	procs []*proc
	stop  chan struct{}
	wg    sync.WaitGroup

	mu  sync.Mutex
	out []outcome

	probe *stallProbe
}

// requestFunc returns worker w's i-th request and the tag it is filed under.
type requestFunc func(w, i int) (tag string, req *pb.RateLimitRequest)

// loadTimeout bounds one request of a load: far above any deadline under
// test, so that a hung request shows as a latency, not as a lost answer.
const loadTimeout = 5 * time.Second

// startLoad starts workers sending next's requests round-robin to procs,
// each waiting pause after every answer.
func startLoad(procs []*proc, workers int, pause time.Duration, next requestFunc) *load {
	l := &load{procs: procs, stop: make(chan struct{}), probe: startStallProbe()}
	for w := range workers {
		l.wg.Go(func() {
			var mine []outcome
			defer func() {
				l.mu.Lock()
				l.out = append(l.out, mine...)
				l.mu.Unlock()
			}()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				tag, req := next(w, i)
				p := procs[(w+i)%len(procs)]
				ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
				start := time.Now()
				resp, err := p.RLS.ShouldRateLimit(ctx, req)
				took := time.Since(start)
				cancel()
				answer := ""
				if err != nil {
					answer = statusCode(err)
				} else {
					answer = summary(resp)
				}
				mine = append(mine, outcome{tag: tag, start: start, took: took, answer: answer})
				time.Sleep(pause)
			}
		})
	}
	return l
}

// finish stops the workers and returns every outcome, by start time, with
// the stalls each overlapped.
func (l *load) finish() []outcome {
	close(l.stop)
	l.wg.Wait()
	stalls := l.probe.finish()
	for i := range l.out {
		o := &l.out[i]
		o.stalled = overlap(stalls, o.start, o.start.Add(o.took))
	}
	slices.SortFunc(l.out, func(a, b outcome) int { return a.start.Compare(b.start) })
	return l.out
}

// A stallProbe records when this process was kept from running: a timer
// that fires later than probeLate was descheduled, or its process was
// paused for a garbage collection, or the machine was busy. Latency bounds
// subtract the stalls a request overlapped, so that they hold on a busy
// machine without being loosened on a quiet one: a request the server kept
// waiting still fails them.
type stallProbe struct {
	stop   chan struct{}
	done   chan struct{}
	stalls []interval
}

// interval is a span of time [from, to).
type interval struct{ from, to time.Time }

const (
	// probeTick is how often the probe looks at the clock.
	probeTick = 5 * time.Millisecond
	// probeLate is how late a tick must be to count as a stall: above the
	// timer slack of a quiet machine.
	probeLate = 10 * time.Millisecond
)

func startStallProbe() *stallProbe {
	p := &stallProbe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(probeTick)
		defer tick.Stop()
		last := time.Now()
		for {
			select {
			case <-p.stop:
				return
			case now := <-tick.C:
				if late := now.Sub(last) - probeTick; late > probeLate {
					p.stalls = append(p.stalls, interval{last.Add(probeTick), now})
				}
				last = now
			}
		}
	}()
	return p
}

// finish stops the probe and returns the stalls it saw, in time order.
func (p *stallProbe) finish() []interval {
	close(p.stop)
	<-p.done
	return p.stalls
}

// overlap returns how much of [from, to) the stalls cover.
func overlap(stalls []interval, from, to time.Time) time.Duration {
	var d time.Duration
	for _, s := range stalls {
		if a, b := later(s.from, from), earlier(s.to, to); a.Before(b) {
			d += b.Sub(a)
		}
	}
	return d
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// between returns the outcomes that started in [from, to).
func between(out []outcome, from, to time.Time) []outcome {
	var sel []outcome
	for _, o := range out {
		if !o.start.Before(from) && o.start.Before(to) {
			sel = append(sel, o)
		}
	}
	return sel
}

// latencies returns the sorted latencies of out.
func latencies(out []outcome) []time.Duration {
	d := make([]time.Duration, len(out))
	for i, o := range out {
		d[i] = o.took
	}
	slices.Sort(d)
	return d
}

// ownLatencies returns the sorted latencies of out less the stalls each
// request overlapped: the time the server, not the machine, took.
func ownLatencies(out []outcome) []time.Duration {
	d := make([]time.Duration, len(out))
	for i, o := range out {
		d[i] = o.took - o.stalled
	}
	slices.Sort(d)
	return d
}

// quantile returns the q-quantile (0..1) of sorted durations, 0 for none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// latencySummary describes a latency distribution for failure messages.
func latencySummary(out []outcome) string {
	d := latencies(out)
	return fmt.Sprintf("%d requests: p50 %v, p90 %v, p99 %v, max %v",
		len(d), quantile(d, .5), quantile(d, .9), quantile(d, .99), quantile(d, 1))
}

// remainingCount matches the remaining count in a summary.
var remainingCount = regexp.MustCompile(`:\d+`)

// answerKind is an answer with its remaining counts left out, so that
// decisions group together in failure messages.
func answerKind(answer string) string { return remainingCount.ReplaceAllString(answer, ":n") }

// answerCounts counts outcomes by tag and kind of answer, for failure
// messages.
func answerCounts(out []outcome) string {
	n := map[string]int{}
	for _, o := range out {
		n[o.tag+" → "+answerKind(o.answer)]++
	}
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "  %6d  %s\n", n[k], k)
	}
	return b.String()
}

// timeline writes outcomes as one line per 100 ms slice of time since t0
// with each answer's count and the slowest latency, for failure messages:
// a glance shows when errors started and stopped.
func timeline(out []outcome, t0 time.Time) string {
	const slice = 100 * time.Millisecond
	type bucket struct {
		n       map[string]int
		slowest time.Duration
	}
	var buckets []*bucket
	for _, o := range out {
		i := max(0, int(o.start.Sub(t0)/slice))
		for len(buckets) <= i {
			buckets = append(buckets, &bucket{n: map[string]int{}})
		}
		buckets[i].n[answerKind(o.answer)]++
		buckets[i].slowest = max(buckets[i].slowest, o.took)
	}
	var b strings.Builder
	for i, bk := range buckets {
		keys := make([]string, 0, len(bk.n))
		for k := range bk.n {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		fmt.Fprintf(&b, "  %5.1fs max %-8v", (time.Duration(i) * slice).Seconds(), bk.slowest.Round(time.Millisecond))
		for _, k := range keys {
			fmt.Fprintf(&b, " %q×%d", k, bk.n[k])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// waitUntil sleeps until t.
func waitUntil(t time.Time) { time.Sleep(time.Until(t)) }

// Latency margins over a deadline, as the client measures them less the
// stalls its process saw (stallProbe): the process answering is not
// probed, and shares a loaded 2-core machine with the race-instrumented
// client, so a few requests are still descheduled for a while.
const (
	// latencyMargin bounds 99% of requests.
	latencyMargin = 150 * time.Millisecond
	// latencyCeiling bounds every request: far below any fault's length,
	// so a request that waits for Redis instead of its deadline fails.
	latencyCeiling = 450 * time.Millisecond
)

// checkLatency fails t when the 99th percentile of out's own latencies
// (less the stalls of the client's process) exceeds deadline +
// latencyMargin or any request's exceeds deadline + latencyCeiling.
func checkLatency(t *testing.T, what string, out []outcome, deadline time.Duration) {
	t.Helper()
	d := ownLatencies(out)
	if p99 := quantile(d, .99); p99 > deadline+latencyMargin {
		t.Errorf("%s: p99 latency %v (less the client's stalls) over the %v deadline + %v (%s)", what, p99, deadline, latencyMargin, latencySummary(out))
	}
	var slow []string
	for _, o := range out {
		if o.took-o.stalled > deadline+latencyCeiling {
			slow = append(slow, fmt.Sprintf("%s %s after %v (the client stalled %v of it)", o.tag, o.answer, o.took.Round(time.Millisecond), o.stalled.Round(time.Millisecond)))
		}
	}
	if len(slow) > 0 {
		t.Errorf("%s: %d of %d requests took longer than the %v deadline + %v (%s), e.g.:\n  %s",
			what, len(slow), len(out), deadline, latencyCeiling, latencySummary(out), strings.Join(slow[:min(len(slow), 5)], "\n  "))
	}
}
