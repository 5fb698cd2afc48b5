package test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// The Rate Limit Quota Service with the real Envoy 1.40 running
// examples/envoy-rlqs.yaml: Envoy decides every request itself from
// floodgate's last assignment and reports every 5 s, so what it admits per
// window strays from the limit by what one report interval can hide. These
// tests measure that stray and how fast a split follows a change of load,
// and log the figures (docs/rlqs.md publishes them).

// rlqsWindow is the limit's window: two of Envoy 1.40's report intervals,
// the shortest over which its reports can steer it.
const rlqsWindow = 10 * time.Second

// rlqsReport is Envoy 1.40's report interval (hard-coded in Envoy).
const rlqsReport = 5 * time.Second

// rlqsLimit is what the fleet may admit per window.
const rlqsLimit = 100

// rlqsRules is one fixed window of rlqsLimit per rlqsWindow per API key,
// in the domain examples/envoy-rlqs.yaml's filter reports in.
var rlqsRules = fmt.Sprintf(`domain: demo
descriptors:
  - key: api_key
    rate_limit: {unit: second, unit_multiplier: %d, requests_per_unit: %d}
`, int(rlqsWindow/time.Second), rlqsLimit)

// startRLQS runs floodgate with rlqsRules on the given store flags, RLQS
// on (its default), logging at debug level so that a failed test shows the
// streams.
func startRLQS(t *testing.T, storeArgs []string, extra ...string) (*proc, options) {
	t.Helper()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"demo.yaml": rlqsRules})
	// A store deadline of 1 s, so that a busy machine does not turn rounds
	// into the failure mode's assignments, which this test does not
	// measure (TestStoreFailure* in internal/rlqs does).
	o := options{args: append(append([]string{"-config", dir, "-log-level", "debug", "-redis-deadline", "1s"}, storeArgs...), extra...)}
	return start(t, o), o
}

// rlqsEnvoy runs examples/envoy-rlqs.yaml in front of a test backend, its
// floodgate cluster pointed at grpcAddr and its stream named client. edit,
// when not nil, changes the file's text first.
func rlqsEnvoy(t *testing.T, client, grpcAddr string, edit func(string) string) *envoyFront {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "examples", "envoy-rlqs.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := mustReplace(t, string(raw), "value: front-envoy", "value: "+client)
	if edit != nil {
		conf = edit(conf)
	}
	hits := &atomic.Int64{}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	t.Cleanup(backend.Close)
	e := envoytest.Start(t, envoytest.Config{
		Bootstrap: []byte(conf),
		Upstreams: map[string][]string{"backend": {backend.Listener.Addr().String()}, "floodgate": {grpcAddr}},
	})
	return &envoyFront{Envoy: e, URL: "http://" + e.Listener("http"), BackendHits: hits}
}

// mustReplace replaces old with new once in s, failing the test when s
// has no old.
func mustReplace(t *testing.T, s, old, new string) string {
	t.Helper()
	if !strings.Contains(s, old) {
		t.Fatalf("examples/envoy-rlqs.yaml has no %q", old)
	}
	return strings.Replace(s, old, new, 1)
}

// tally counts a load's answers per second of the clock (unix seconds of
// when each request was sent): admitted (200) and denied (429); anything
// else is an error.
type tally struct {
	mu            sync.Mutex
	ok, deny, bad map[int64]int
	errs          []string
}

func newTally() *tally {
	return &tally{ok: map[int64]int{}, deny: map[int64]int{}, bad: map[int64]int{}}
}

func (c *tally) add(at time.Time, code int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := at.Unix()
	switch {
	case err != nil:
		c.bad[s]++
		c.errs = append(c.errs, err.Error())
	case code == http.StatusOK:
		c.ok[s]++
	case code == http.StatusTooManyRequests:
		c.deny[s]++
	default:
		c.bad[s]++
		c.errs = append(c.errs, fmt.Sprintf("status %d", code))
	}
}

// sum returns the admitted and denied requests sent in [from, to).
func (c *tally) sum(from, to time.Time) (ok, deny int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := from.Unix(); s < to.Unix(); s++ {
		ok, deny = ok+c.ok[s], deny+c.deny[s]
	}
	return ok, deny
}

// quotaLoad sends GETs with x-api-key key through f at *rate requests a second
// (read at each request, so that it may change) until ctx ends, each on a
// goroutine of its own, counting the answers in c.
type quotaLoad struct {
	f    *envoyFront
	key  string
	rate atomic.Int64
	c    *tally
	wg   sync.WaitGroup
}

func startQuotaLoad(ctx context.Context, t *testing.T, f *envoyFront, key string, rate int64) *quotaLoad {
	l := &quotaLoad{f: f, key: key, c: newTally()}
	l.rate.Store(rate)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		next := time.Now()
		for ctx.Err() == nil {
			next = next.Add(time.Second / time.Duration(l.rate.Load()))
			if d := time.Until(next); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return
				}
			}
			l.wg.Add(1)
			go l.one()
		}
	}()
	t.Cleanup(l.wg.Wait)
	return l
}

func (l *quotaLoad) one() {
	defer l.wg.Done()
	at := time.Now()
	req, _ := http.NewRequest(http.MethodGet, l.f.URL+"/", nil)
	req.Header.Set("x-api-key", l.key)
	resp, err := httpClient.Do(req)
	if err != nil {
		l.c.add(at, 0, err)
		return
	}
	resp.Body.Close()
	l.c.add(at, resp.StatusCode, nil)
}

// windowStart is the start of the fixed window holding at: fixed windows
// start at multiples of their length since the epoch.
func windowStart(at time.Time) time.Time {
	return time.Unix(0, at.UnixNano()/int64(rlqsWindow)*int64(rlqsWindow))
}

// windowStray is what the loads admitted together in each whole window
// in [from, to), and the largest |admitted − limit| over them.
func windowStray(from, to time.Time, loads ...*quotaLoad) (admitted []int, worst int) {
	for w := windowStart(from.Add(rlqsWindow - time.Nanosecond)); !w.Add(rlqsWindow).After(to); w = w.Add(rlqsWindow) {
		n := 0
		for _, l := range loads {
			ok, _ := l.c.sum(w, w.Add(rlqsWindow))
			n += ok
		}
		admitted = append(admitted, n)
		worst = max(worst, int(math.Abs(float64(n-rlqsLimit))))
	}
	return admitted, worst
}

// sleepUntil sleeps until at.
func sleepUntil(at time.Time) { time.Sleep(time.Until(at)) }

// maxStray is the most a window's admitted count may stray from the limit
// once the first report is in: 30 % of the limit. floodgate learns what
// Envoy admitted a report interval late, half a window here; the runs
// docs/rlqs.md records strayed by up to 11 %, and the figures measured
// are logged.
const maxStray = rlqsLimit * 3 / 10

// TestRLQSOneEnvoy: one Envoy under steady load three times the limit,
// over several windows: each window admits about the limit (within
// maxStray), and the rest is denied by Envoy itself. Run on Redis and on
// the in-memory store. (That RLS and RLQS share the counters is
// internal/rlqs's TestAssignmentSharesTheRLSCounter.)
func TestRLQSOneEnvoy(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			flags, _ := b.args(t)
			p, _ := startRLQS(t, flags)
			f := rlqsEnvoy(t, "envoy-a", p.GRPCAddr, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			const rate = 3 * rlqsLimit / int64(rlqsWindow/time.Second) // 30/s
			l := startQuotaLoad(ctx, t, f, "k1", rate)
			begin := time.Now()
			// The windows that end within five of the start, less the one
			// the first report interval overlaps: three or four.
			end := windowStart(begin).Add(5 * rlqsWindow)
			sleepUntil(end)
			cancel()
			admitted, worst := windowStray(begin.Add(rlqsReport), end, l)
			t.Logf("one Envoy (%s), %d/s offered, limit %d per %v: admitted per window %v, worst stray %d (%.0f %%)",
				b.name, rate, rlqsLimit, rlqsWindow, admitted, worst, 100*float64(worst)/rlqsLimit)
			if len(admitted) < 3 {
				t.Fatalf("only %d whole windows measured", len(admitted))
			}
			if worst > maxStray {
				t.Errorf("a window admitted %d from the limit of %d (admitted %v), more than %d", worst, rlqsLimit, admitted, maxStray)
			}
			if _, deny := l.c.sum(begin, end); deny == 0 {
				t.Error("Envoy denied nothing at three times the limit")
			}
			if len(l.c.errs) > 0 {
				t.Errorf("%d requests failed, first: %s", len(l.c.errs), l.c.errs[0])
			}
			if v := p.metricSum("floodgate_rlqs_streams"); v != 1 {
				t.Errorf("floodgate_rlqs_streams %v, want 1", v)
			}
			if v := p.metricSum("floodgate_rlqs_assignments_total", `action="token_bucket"`); v < 1 {
				t.Errorf("floodgate_rlqs_assignments_total{action=token_bucket} %v, want at least 1", v)
			}
		})
	}
}

// split is the share of what a admitted, over what a and b admitted, in
// each period of [from, to) that starts at from.
func split(a, b *quotaLoad, from, to time.Time, period time.Duration) []float64 {
	var out []float64
	for s := from; !s.Add(period).After(to); s = s.Add(period) {
		x, _ := a.c.sum(s, s.Add(period))
		y, _ := b.c.sum(s, s.Add(period))
		if x+y == 0 {
			out = append(out, math.NaN())
			continue
		}
		out = append(out, float64(x)/float64(x+y))
	}
	return out
}

// TestRLQSTwoEnvoys: two Envoys share one limit through floodgate and
// Redis, under steady load, over several windows: together they admit
// about the limit per window, split by their demand. Then one Envoy's load
// triples and the other's halves: the split follows within a few report
// intervals, and the sum still holds.
func TestRLQSTwoEnvoys(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	p, _ := startRLQS(t, []string{"-redis", r.Addr})
	a := rlqsEnvoy(t, "envoy-a", p.GRPCAddr, nil)
	b := rlqsEnvoy(t, "envoy-b", p.GRPCAddr, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	la := startQuotaLoad(ctx, t, a, "shared", 20)
	lb := startQuotaLoad(ctx, t, b, "shared", 20)
	begin := time.Now()
	change := windowStart(begin).Add(4 * rlqsWindow)
	sleepUntil(change)
	la.rate.Store(30)
	lb.rate.Store(10)
	end := change.Add(4 * rlqsWindow)
	sleepUntil(end)
	cancel()

	before, worstBefore := windowStray(begin.Add(rlqsReport), change, la, lb)
	after, worstAfter := windowStray(change, end, la, lb)
	// Equal shares hold once each Envoy's first periodic report has
	// filled a demand slot: until then, the Envoy that reported first has
	// the fleet's demand to itself.
	settled := begin.Add(2 * rlqsReport)
	evenSplit := split(la, lb, settled, change, rlqsReport)
	firstWindow := windowStart(settled.Add(rlqsWindow - time.Nanosecond))
	evenWindows := split(la, lb, firstWindow, change, rlqsWindow)
	evenAll := split(la, lb, firstWindow, change, change.Sub(firstWindow))
	newSplit := split(la, lb, change, end, rlqsReport)
	t.Logf("two Envoys at 20/s each: admitted per window %v (worst stray %d); A's share %s, per window %s, per report interval %s",
		before, worstBefore, shares(evenAll), shares(evenWindows), shares(evenSplit))
	t.Logf("then A 30/s, B 10/s (demand share 0.75): admitted per window %v (worst stray %d); A's share per report interval %s",
		after, worstAfter, shares(newSplit))
	if worst := max(worstBefore, worstAfter); worst > maxStray {
		t.Errorf("a window admitted %d from the limit of %d, more than %d", worst, rlqsLimit, maxStray)
	}
	// Equal demand: the split near one half over the whole phase (honest
	// runs give 0.45 to 0.54, a 2:1 policy 0.65 and more), and within
	// 0.2 in each window. Within a window, one half leans to whichever
	// Envoy reports first after the reset (docs/rlqs.md), so per report
	// interval the split strays further; yet no Envoy may starve for one.
	if len(evenWindows) < 2 {
		t.Fatalf("only %d whole windows of equal demand measured", len(evenWindows))
	}
	for _, c := range []struct {
		over   string
		shares []float64
		within float64
	}{{"the whole phase", evenAll, 0.12}, {"window", evenWindows, 0.2}, {"report interval", evenSplit, 0.3}} {
		for i, s := range c.shares {
			if math.IsNaN(s) || math.Abs(s-0.5) > c.within {
				t.Errorf("equal demand, %s %d: A admitted a share of %.2f, want 0.5 ± %.2f", c.over, i, s, c.within)
			}
		}
	}
	// The split follows: from some interval on, A's share stays above
	// 0.6 (its demand share is 0.75), and that interval comes within
	// three report intervals of the change: one for the change to be
	// reported, one for the demand window to fill, one of margin.
	followed := -1
	for i := len(newSplit) - 1; i >= 0 && newSplit[i] >= 0.6; i-- {
		followed = i
	}
	switch {
	case followed < 0:
		t.Errorf("A's share never settled above 0.6 after its load tripled: %s", shares(newSplit))
	case followed > 3:
		t.Errorf("A's share settled above 0.6 only %v after the change: %s", time.Duration(followed)*rlqsReport, shares(newSplit))
	default:
		t.Logf("the split followed within %v (report intervals of %v)", time.Duration(followed+1)*rlqsReport, rlqsReport)
	}
	if v := p.metricSum("floodgate_rlqs_streams"); v != 2 {
		t.Errorf("floodgate_rlqs_streams %v, want 2", v)
	}
}

func shares(s []float64) string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = fmt.Sprintf("%.2f", x)
	}
	return "[" + strings.Join(out, " ") + "]"
}

// TestRLQSFloodgateStopped: with floodgate gone, Envoy keeps its last
// assignment for its time to live, then applies the example's
// expired_assignment_behavior (a local 5/s for a few seconds), then its
// no_assignment_behavior (allow all); floodgate back on the same address,
// Envoy reopens its stream at its next report and assignments resume.
func TestRLQSFloodgateStopped(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	const ttl = 11 * time.Second
	p, o := startRLQS(t, []string{"-redis", r.Addr}, "-rlqs-assignment-ttl", ttl.String())
	const fallback = 8 * time.Second
	f := rlqsEnvoy(t, "envoy-a", p.GRPCAddr, func(s string) string {
		return mustReplace(t, s, "expired_assignment_behavior_timeout: 30s", fmt.Sprintf("expired_assignment_behavior_timeout: %v", fallback))
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const rate = 20 // twice the limit's pace, four times the fallback's
	l := startQuotaLoad(ctx, t, f, "k1", rate)
	// Enforced: denials seen.
	waitDenials(t, l, 2*rlqsReport)
	p.kill()
	killed := time.Now()

	// Phases, told apart by what Envoy admits per second: the
	// assignment (denials), the fallback (about 5/s admitted, the rest
	// denied), then allow-all (no denial). Each waited for within its
	// bound: the time to live counts from the last assignment, at most
	// ttl before the kill.
	fb := waitPhase(t, l, "the expired-assignment fallback (5/s)", ttl+2*time.Second, func(ok, deny int) bool { return deny > 0 && ok >= 3 && ok <= 7 })
	open := waitPhase(t, l, "no_assignment_behavior (allow all)", fallback+2*time.Second, func(ok, deny int) bool { return deny == 0 && ok >= rate-3 })
	t.Logf("floodgate killed: the fallback began %v later, allow-all %v after that (time to live %v, fallback %v)",
		fb.Sub(killed).Round(time.Second), open.Sub(fb).Round(time.Second), ttl, fallback)
	if open.Sub(fb) < fallback-2*time.Second {
		t.Errorf("the fallback lasted %v, want about %v", open.Sub(fb), fallback)
	}

	back := restartAt(t, p.GRPCAddr, o)
	restarted := time.Now()
	waitDenials(t, l, 2*rlqsReport+2*time.Second)
	t.Logf("floodgate back: denials again %v later", time.Since(restarted).Round(100*time.Millisecond))
	if v := back.metricSum("floodgate_rlqs_streams"); v != 1 {
		t.Errorf("floodgate_rlqs_streams %v after Envoy reconnected, want 1", v)
	}
}

// waitDenials waits until l gets a 429 sent after now.
func waitDenials(t *testing.T, l *quotaLoad, timeout time.Duration) {
	t.Helper()
	from := time.Now()
	eventually(t, timeout, func() string {
		if _, deny := l.c.sum(from, time.Now().Add(time.Second)); deny == 0 {
			return "no 429 from Envoy"
		}
		return ""
	})
}

// waitPhase waits until a whole second, after now, whose counts satisfy
// in, and returns its start.
func waitPhase(t *testing.T, l *quotaLoad, name string, timeout time.Duration, in func(ok, deny int) bool) time.Time {
	t.Helper()
	s := time.Now().Truncate(time.Second).Add(time.Second)
	deadline := time.Now().Add(timeout)
	var seen []string
	for {
		sleepUntil(s.Add(time.Second + 300*time.Millisecond)) // its answers in
		ok, deny := l.c.sum(s, s.Add(time.Second))
		if in(ok, deny) {
			return s
		}
		l.c.mu.Lock()
		seen = append(seen, fmt.Sprintf("%d/%d/%d", ok, deny, l.c.bad[s.Unix()]))
		errs := slices.Clone(l.c.errs)
		l.c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no second of %s within %v; admitted/denied/failed per second: %v; %d failed, the last: %q", name, timeout, seen, len(errs), errs[max(len(errs)-3, 0):])
		}
		s = s.Add(time.Second)
	}
}
