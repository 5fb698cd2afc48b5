package test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// What examples/envoy.yaml sets and these tests rely on; requireShipped checks
// that the file still says so.
const (
	// envoyFilterTimeout is the ratelimit filter's timeout: how long Envoy
	// waits for floodgate before its failure_mode_deny decides.
	envoyFilterTimeout = 100 * time.Millisecond
	// envoyHCInterval is the interval of Envoy's health check of floodgate.
	envoyHCInterval = 5 * time.Second
)

// Clients of failureRules, by the address Envoy sends as remote_address.
const (
	allowClient       = "198.51.100.1" // failure_mode allow (the default)
	denyClient        = "198.51.100.2" // failure_mode deny
	unavailableClient = "198.51.100.3" // failure_mode unavailable
	blockedClient     = "198.51.100.4" // always over its limit
)

// failureRules gives each client a rule of its own; the first three are
// never exceeded, so every answer shows who gave it: a decision carries
// the daily limit, a failure policy or Envoy's failure mode does not.
var failureRules = fmt.Sprintf(`domain: demo
descriptors:
  - key: remote_address
    value: %s
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: remote_address
    value: %s
    failure_mode: deny
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: remote_address
    value: %s
    failure_mode: unavailable
    rate_limit: {unit: day, requests_per_unit: 1000000000}
  - key: remote_address
    value: %s
    rate_limit: {unit: second, requests_per_unit: 0}
`, allowClient, denyClient, unavailableClient, blockedClient)

// Answers a client sees through Envoy (see envoyFront.ask).
const (
	answerDecided = "200 1000000000, 1000000000;w=86400" // floodgate decided in its store
	answerBlocked = "429 0, 0;w=1"                       // floodgate decided: over the limit
	// answerAllowPolicy is floodgate's allow policy: OK, no limit to report.
	answerAllowPolicy = "200 -"
	// answerDenyPolicy is floodgate's deny policy: over the limit, reported as
	// the rule's limit with nothing remaining.
	answerDenyPolicy = "429 1000000000, 1000000000;w=86400"
)

// envoyFailed is what Envoy answers when it has no answer from floodgate
// (an error or its timeout): the request passes to the backend with
// failure_mode_deny false, and gets a 500 with it true.
func envoyFailed(deny bool) string {
	if deny {
		return "500 -"
	}
	return "200 -"
}

// failureScene is one run of TestEnvoyFailures: Envoy as shipped (or with
// failure_mode_deny true) in front of one floodgate, which is replaced
// when it dies.
type failureScene struct {
	t     *testing.T
	deny  bool
	redis *redistest.Server // nil on the in-memory store
	opts  options
	fg    *proc
	envoy *envoyFront
	// gone are the decisions of floodgate processes no longer running,
	// read just before they stopped answering.
	gone map[string]int64
	// unseen counts requests Envoy sent while floodgate could not answer:
	// Envoy counts them as errors, floodgate never saw them.
	unseen int64
	// all is every answer the clients got.
	all []outcome
}

// envoyPhase is one step of TestEnvoyFailures: a fault begins or ends,
// then every client in clients sends rounds of requests.
type envoyPhase struct {
	name      string
	redisOnly bool
	// clients send in this phase; want is the answer each must get.
	clients []string
	want    func(s *failureScene, client string) string
	// inject changes the world before the phase's requests.
	inject func(s *failureScene)
	// settle: answers may differ from want for up to recoveryBound (the
	// circuit breaker's probe interval) before they must all be want.
	settle bool
	// unseen: floodgate does not see the phase's requests (Envoy's own
	// errors), so its metrics miss them.
	unseen bool
	// minMedian, maxMedian bound the median latency when not zero: a
	// hung floodgate must cost the filter's timeout (else the fault was
	// not real), a dead one far less (Envoy fails a refused connection at
	// once).
	minMedian, maxMedian time.Duration
}

var (
	everyClient = []string{allowClient, denyClient, unavailableClient, blockedClient}
	// policyClients leaves out blockedClient, whose 429s may come from the
	// deny cache for up to a second of a Redis outage, then from the allow
	// policy: either is right, so it would check nothing there.
	policyClients = []string{allowClient, denyClient, unavailableClient}
)

// decisionOf is the answer of a floodgate that decides in its store.
func decisionOf(_ *failureScene, client string) string {
	if client == blockedClient {
		return answerBlocked
	}
	return answerDecided
}

// envoyPhases are the steps of TestEnvoyFailures, in order: Redis freezes
// and comes back, then floodgate hangs, dies and comes back.
var envoyPhases = []envoyPhase{
	{name: "healthy", clients: everyClient, want: decisionOf},
	{
		// floodgate answers by each rule's failure_mode within its
		// -redis-deadline (50 ms), inside Envoy's 100 ms, so Envoy's
		// failure_mode_deny only decides for the unavailable rule.
		name: "Redis frozen", redisOnly: true, clients: policyClients,
		inject: func(s *failureScene) { s.redis.Freeze() },
		want: func(s *failureScene, client string) string {
			switch client {
			case allowClient:
				return answerAllowPolicy
			case denyClient:
				return answerDenyPolicy
			}
			return envoyFailed(s.deny)
		},
	},
	{
		name: "Redis back", redisOnly: true, clients: everyClient, want: decisionOf, settle: true,
		inject: func(s *failureScene) { s.redis.Thaw() },
	},
	{
		// The connection stays open and the requests go unanswered:
		// Envoy's timeout ends each. Its timer may fire a few
		// milliseconds before the client's clock says the timeout passed
		// (98.7 ms measured), hence 90%. The process's metrics are read
		// before it stops, and it is killed still stopped, so it never
		// decides the requests queued meanwhile: Envoy counts each as an
		// error and floodgate none, exactly.
		name: "floodgate hung", clients: everyClient, unseen: true, minMedian: envoyFilterTimeout * 9 / 10,
		want: func(s *failureScene, _ string) string { return envoyFailed(s.deny) },
		inject: func(s *failureScene) {
			s.retire()
			s.fg.signal(syscall.SIGSTOP)
			waitStopped(s.t, s.fg.Pid())
		},
	},
	{
		name: "floodgate dead", clients: everyClient, unseen: true, maxMedian: envoyFilterTimeout / 2,
		want:   func(s *failureScene, _ string) string { return envoyFailed(s.deny) },
		inject: func(s *failureScene) { s.fg.kill() }, // SIGKILL ends a stopped process too
	},
	{
		// A new floodgate on the same address: Envoy's next request
		// connects to it.
		name: "floodgate back", clients: everyClient, want: decisionOf,
		inject: func(s *failureScene) { s.fg = restartAt(s.t, s.fg.GRPCAddr, s.opts) },
	},
}

// phaseRounds is how many rounds of requests each client sends per phase.
const phaseRounds = 5

// TestEnvoyFailures runs the shipped Envoy config in front of floodgate,
// with failure_mode_deny false as shipped and true, on Redis and on the
// in-memory store, through the phases of envoyPhases. In each phase every
// client gets what docs/operations.md says, within the filter's timeout
// plus a margin. At the end Envoy's ratelimit counters agree with
// floodgate's own: ok and over_limit with floodgate's decisions, error
// with floodgate's unavailable answers plus the requests floodgate never
// saw, and failure_mode_allowed with error when Envoy fails open.
func TestEnvoyFailures(t *testing.T) {
	requireShipped(t, "timeout: 0.1s", "failure_mode_deny: false")
	for _, deny := range []bool{false, true} {
		for _, b := range backends {
			t.Run(fmt.Sprintf("%s/failure_mode_deny=%v", b.name, deny), func(t *testing.T) {
				dir := t.TempDir()
				writeRules(t, dir, map[string]string{"failure.yaml": failureRules})
				args, redis := b.args(t)
				s := &failureScene{t: t, deny: deny, redis: redis, gone: map[string]int64{},
					opts: options{args: append(args, "-config", dir)}}
				s.fg = start(t, s.opts)
				var edit func(string) string
				if deny {
					edit = replace(t, "failure_mode_deny: false", "failure_mode_deny: true")
				}
				s.envoy = startEnvoy(t, edit, s.fg.GRPCAddr)
				before := s.envoy.rateLimitStats(t)
				for _, ph := range envoyPhases {
					if ph.redisOnly && redis == nil {
						continue
					}
					s.run(ph)
				}
				s.checkCounters(before)
			})
		}
	}
}

// run injects ph's change and checks what the clients get.
func (s *failureScene) run(ph envoyPhase) {
	t := s.t
	t.Helper()
	if ph.inject != nil {
		ph.inject(s)
	}
	wrong := func(out []outcome) string {
		for _, o := range out {
			if want := ph.want(s, o.tag); o.answer != want {
				return fmt.Sprintf("%s: client %s got %q after %v, want %q", ph.name, o.tag, o.answer, o.took.Round(time.Millisecond), want)
			}
		}
		return ""
	}
	if ph.settle {
		begun := time.Now()
		eventually(t, recoveryBound, func() string { return wrong(s.round(ph)) })
		t.Logf("%s: answers as wanted %v after the change", ph.name, time.Since(begun).Round(time.Millisecond))
	}
	var out []outcome
	for range phaseRounds {
		out = append(out, s.round(ph)...)
	}
	if msg := wrong(out); msg != "" {
		t.Errorf("%s\nanswers:\n%s", msg, answerCounts(out))
	}
	t.Logf("%s: %s", ph.name, latencySummary(out))
	checkLatency(t, ph.name, out, envoyFilterTimeout)
	med := quantile(latencies(out), .5)
	if ph.minMedian > 0 && med < ph.minMedian {
		t.Errorf("%s: median latency %v, want at least %v (%s)", ph.name, med, ph.minMedian, latencySummary(out))
	}
	if ph.maxMedian > 0 && med > ph.maxMedian {
		t.Errorf("%s: median latency %v, want at most %v (%s)", ph.name, med, ph.maxMedian, latencySummary(out))
	}
}

// round sends one request of each of ph's clients at once through Envoy.
func (s *failureScene) round(ph envoyPhase) []outcome {
	out := make([]outcome, len(ph.clients))
	var wg sync.WaitGroup
	for i, c := range ph.clients {
		wg.Go(func() { out[i] = s.envoy.ask(c) })
	}
	wg.Wait()
	s.all = append(s.all, out...)
	if ph.unseen {
		s.unseen += int64(len(out))
	}
	return out
}

// retire adds the running floodgate's decisions to gone: its last words
// before it stops answering.
func (s *failureScene) retire() {
	for code, n := range decisionCounts(s.t, s.fg) {
		s.gone[code] += n
	}
}

// checkCounters compares Envoy's ratelimit counters since before with
// floodgate's decisions over every process, and with what clients got.
func (s *failureScene) checkCounters(before map[string]int64) {
	t := s.t
	t.Helper()
	after := s.envoy.rateLimitStats(t)
	envoy := map[string]int64{}
	for k, v := range after {
		envoy[k] = v - before[k]
	}
	fg := decisionCounts(t, s.fg)
	for code, n := range s.gone {
		fg[code] += n
	}
	var clients200 int64
	for _, o := range s.all {
		if strings.HasPrefix(o.answer, "200 ") {
			clients200++
		}
	}
	allowed := envoy["error"]
	if s.deny {
		allowed = 0
	}
	t.Logf("Envoy %v; floodgate decisions %v, %d requests it never saw", envoy, fg, s.unseen)
	for _, c := range []struct {
		what      string
		got, want int64
	}{
		{"Envoy ratelimit.ok vs floodgate's ok decisions", envoy["ok"], fg["ok"]},
		{"Envoy ratelimit.over_limit vs floodgate's over_limit decisions", envoy["over_limit"], fg["over_limit"]},
		{"Envoy ratelimit.error vs floodgate's unavailable answers plus the requests it never saw", envoy["error"], fg["unavailable"] + s.unseen},
		{"Envoy ratelimit.failure_mode_allowed", envoy["failure_mode_allowed"], allowed},
		{"Envoy's ok+over_limit+error vs requests sent", envoy["ok"] + envoy["over_limit"] + envoy["error"], int64(len(s.all))},
		{"requests reaching the backend vs 200s", s.envoy.BackendHits.Load(), clients200},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d\nclient answers:\n%s", c.what, c.got, c.want, answerCounts(s.all))
		}
	}
	for code, n := range fg {
		if code != "ok" && code != "over_limit" && code != "unavailable" && n != 0 {
			t.Errorf("floodgate answered %d requests %s, which Envoy cannot have counted as anything", n, code)
		}
	}
}

// decisionCounts returns floodgate's decision_duration_seconds counts by
// code (ok, over_limit, unavailable, ...): every ShouldRateLimit answered.
func decisionCounts(t *testing.T, p *proc) map[string]int64 {
	t.Helper()
	code, body := p.httpGet("/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d %s", code, body)
	}
	const prefix = `floodgate_decision_duration_seconds_count{code="`
	out := map[string]int64{}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		name, value, ok := strings.Cut(rest, `"} `)
		n, err := strconv.ParseInt(value, 10, 64)
		if !ok || err != nil {
			t.Fatalf("metric line %q", line)
		}
		out[name] = n
	}
	return out
}

// restartAt starts a floodgate like start does, but serving gRPC on addr
// (the address of one that ended), so that Envoy's endpoint for it stays
// the same.
func restartAt(t *testing.T, addr string, o options) *proc {
	t.Helper()
	o.args = append(slices.Clone(o.args), "-grpc-addr", addr) // the last -grpc-addr wins
	p := start(t, o)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	// The harness's connection is to the port the flag overrode; the
	// harness closes this one when the test ends.
	p.Conn.Close()
	p.GRPCAddr, p.Conn, p.RLS = addr, conn, pb.NewRateLimitServiceClient(conn)
	return p
}

// waitStopped waits until the process pid is stopped (state T), since
// kill(2) returns before a SIGSTOP takes effect.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	eventually(t, 5*time.Second, func() string {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return err.Error()
		}
		// pid (comm) state ...: comm may hold spaces, the state follows
		// its closing parenthesis.
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " T") {
			return ""
		}
		return "process not stopped yet: " + s
	})
}

// requireShipped fails the test unless each of settings is a whole line of
// examples/envoy.yaml (leading spaces aside): the constants of these tests
// describe that file. Whole lines, so that "interval: 5s" is not found in
// "no_traffic_interval: 5s".
func requireShipped(t *testing.T, settings ...string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		lines[strings.TrimSpace(l)] = true
	}
	for _, s := range settings {
		if !lines[s] {
			t.Fatalf("examples/envoy.yaml no longer says %q: update the constants of this test", s)
		}
	}
}

// envoyHCMargin is how late after its interval a health check's verdict may
// show in Envoy's /clusters on a loaded machine.
const envoyHCMargin = 1500 * time.Millisecond

// envoyDrainDelay is the -drain-delay of TestEnvoyDrain: longer than Envoy's
// health check interval and its margin, so that a check sees NOT_SERVING
// while floodgate still answers.
const envoyDrainDelay = envoyHCInterval + envoyHCMargin + 500*time.Millisecond

// TestEnvoyDrain: Envoy health-checks two floodgates on one Redis while a
// client sends requests through it. One gets SIGTERM: Envoy's health check
// marks it failed within an interval, while it still answers (the drain
// delay), so Envoy sends the traffic to the other and no request meets a
// closed port. A new floodgate on the same address is marked healthy within
// an interval and gets traffic again. Every answer throughout is a decision,
// and Envoy counts no ratelimit error. (Redis only: several instances
// behind one Envoy need a shared store.)
func TestEnvoyDrain(t *testing.T) {
	// Parallel: it mostly waits for health checks, and its bounds are
	// seconds, so it can share the machine; TestEnvoyFailures measures
	// milliseconds and runs alone with the other sequential tests.
	t.Parallel()
	requireShipped(t, "interval: 5s", "unhealthy_threshold: 2", "healthy_threshold: 1")
	r := redistest.Start(t)
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"failure.yaml": failureRules})
	o := options{args: []string{"-redis", r.Addr, "-config", dir, "-drain-delay", envoyDrainDelay.String()}}
	leaving, staying := start(t, o), start(t, o)
	f := startEnvoy(t, nil, leaving.GRPCAddr, staying.GRPCAddr)
	f.waitHealthy(t, 2, 2*envoyHCInterval)
	before := f.rateLimitStats(t)

	var (
		mu   sync.Mutex
		out  []outcome
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	probe := startStallProbe()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			o := f.ask(allowClient)
			mu.Lock()
			out = append(out, o)
			mu.Unlock()
		}
	})

	leaving.signal(syscall.SIGTERM)
	termed := time.Now()
	waitHost(t, f, leaving.GRPCAddr, "failed", envoyHCInterval+envoyHCMargin, func(flags string) bool {
		return strings.Contains(flags, "failed_active_hc")
	})
	left := time.Since(termed)
	select {
	case <-leaving.Done():
		t.Fatalf("floodgate exited %v after SIGTERM, before Envoy marked it failed: the drain delay did not cover the health check", left)
	default:
	}
	t.Logf("Envoy marked the draining floodgate failed %v after SIGTERM", left.Round(time.Millisecond))
	if code := leaving.wait(envoyDrainDelay + 10*time.Second); code != 0 {
		t.Errorf("drained floodgate exited %d:\n%s", code, leaving.Logs)
	}

	back := restartAt(t, leaving.GRPCAddr, o)
	restarted := time.Now()
	waitHost(t, f, back.GRPCAddr, "healthy", envoyHCInterval+envoyHCMargin, func(flags string) bool { return flags == "healthy" })
	t.Logf("Envoy marked the new floodgate healthy %v after it started", time.Since(restarted).Round(time.Millisecond))
	eventually(t, 2*time.Second, func() string {
		if n := decisionCounts(t, back)["ok"]; n == 0 {
			return "Envoy sends nothing to the new floodgate it marked healthy"
		}
		return ""
	})
	close(stop)
	wg.Wait()
	stalls := probe.finish()

	// The ratelimit filter's timeout is 100 ms: a request during which
	// the machine kept this process from running for a quarter of its time
	// may have missed it for that reason alone, which is not what this
	// test is about.
	excused := 0
	for _, o := range out {
		if o.answer == answerDecided {
			continue
		}
		at := o.start.Sub(termed).Round(time.Millisecond)
		if stalled := overlap(stalls, o.start, o.start.Add(o.took)); stalled >= o.took/4 {
			t.Logf("at %v after SIGTERM the client got %q after %v, %v of which the machine stalled this process", at, o.answer, o.took, stalled)
			excused++
			continue
		}
		t.Errorf("at %v after SIGTERM the client got %q, want a decision %q (%s)", at, o.answer, answerDecided, answerCounts(out))
		break
	}
	after := f.rateLimitStats(t)
	if n := after["error"] - before["error"]; n > int64(excused) {
		t.Errorf("Envoy counted %d ratelimit errors during the drain, want none but the %d timeouts of a stalled machine", n, excused)
	}
	t.Logf("%d requests through Envoy during the drain and return: %s", len(out), latencySummary(out))
}

// waitHost waits until Envoy's /clusters flags for addr in the floodgate
// cluster satisfy ok, and fails after timeout.
func waitHost(t *testing.T, f *envoyFront, addr, what string, timeout time.Duration, ok func(flags string) bool) {
	t.Helper()
	eventually(t, timeout, func() string {
		h, err := f.HostHealth("floodgate")
		if err != nil {
			return err.Error()
		}
		if !ok(h[addr]) {
			return fmt.Sprintf("Envoy has not marked %s %s: %v", addr, what, h)
		}
		return ""
	})
}
