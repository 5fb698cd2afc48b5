package main

// The -reloads mode measures a large rule set instead of decisions: how
// long a server takes from its start to its first answer under the rules,
// its memory after the start, how long each rewrite of the rule file takes
// to be in force, the latency of decisions meanwhile, and its memory after
// the reloads. It starts floodgate, or with -reference-bin the reference
// server (envoyproxy/ratelimit), on the same generated files, laid out as
// the reference reads them (RUNTIME_ROOT/ratelimit/config), and a private
// Redis unless -redis-addr.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/floodgate/floodgate/internal/harness"
)

// reloadDefaultRate is the arrival rate of the -reloads mode when -rate is
// 0: decisions at a steady pace, whose latency is what a reload may hurt.
const reloadDefaultRate = 1000

// reloadTimeout bounds the wait for a server's first answer and for each
// reload to be in force.
const reloadTimeout = 5 * time.Minute

// reloadReport is what the -reloads mode measured; its JSON form is the
// -json output.
type reloadReport struct {
	// Server is "floodgate" or "reference" (-reference-bin).
	Server string `json:"server"`
	// Rules is -rules; FileMiB the size of the rule file holding them.
	Rules   int     `json:"rules"`
	FileMiB float64 `json:"file_mib"`
	// StartToFirstAnswerMs runs from starting the process to its first
	// answer carrying the limit of the generated rules.
	StartToFirstAnswerMs float64 `json:"start_to_first_answer_ms"`
	// StartCPUMs is the CPU time (user and system) the server used until
	// then: unlike the times, it hardly depends on the machine's load.
	StartCPUMs float64 `json:"start_cpu_ms"`
	// RSSAfterStartMiB is VmRSS -settle after that answer.
	RSSAfterStartMiB float64 `json:"rss_after_start_mib"`
	// ReloadMs has, for each rewrite of the file, the time from the
	// rename that put it in place to the first answer with its limit.
	ReloadMs []float64 `json:"reload_ms"`
	// ReloadCPUMs has the server's CPU time over each of those intervals,
	// the decisions it answered meanwhile included.
	ReloadCPUMs []float64 `json:"reload_cpu_ms"`
	// RSSAfterReloadMiB has VmRSS -settle after each reload was in force.
	RSSAfterReloadMiB []float64 `json:"rss_after_reload_mib"`
	// PeakRSSMiB is VmHWM at the end: the most the process ever held.
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// Rate is the decisions' arrival rate (open loop) during the reloads.
	Rate float64 `json:"rate"`
	// DuringReloads covers the decisions sent while a reload was under
	// way (from a rename to the new limits in force); All every decision
	// of the reload phase, settling included.
	DuringReloads latencyMicros `json:"latency_during_reloads_us"`
	DuringCount   int           `json:"decisions_during_reloads"`
	// BetweenReloads covers the others, due while no reload was under
	// way: the same load on the same machine, for comparison.
	BetweenReloads latencyMicros `json:"latency_between_reloads_us"`
	All            latencyMicros `json:"latency_all_us"`
	// Decisions and Errors count the reload phase's calls.
	Decisions  int64  `json:"decisions"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

// reloadRun is one server under test in the -reloads mode.
type reloadRun struct {
	o       *options
	dir     string // the runtime root
	config  string // RUNTIME_ROOT/ratelimit/config
	rs      ruleSpec
	proc    *child
	grpc    string
	probe   *grpc.ClientConn
	started time.Time
}

// benchReloads runs the -reloads mode. Progress goes to log.
func benchReloads(ctx context.Context, o *options, log io.Writer) (rep *reloadReport, err error) {
	var stops stopList
	defer stops.run()
	dir, err := os.MkdirTemp("", "floodgate-bench-reload-")
	if err != nil {
		return nil, err
	}
	stops.add(func() { os.RemoveAll(dir) })
	bin := o.referenceBin
	redisAddr, built, err := setUp(ctx, o, dir, true, bin == "", log, &stops)
	if err != nil {
		return nil, err
	}
	if bin == "" {
		bin = built
	}
	r := &reloadRun{o: o, dir: filepath.Join(dir, "runtime"), rs: o.ruleSpec()}
	r.config = filepath.Join(r.dir, "ratelimit", "config")
	if err := os.MkdirAll(filepath.Dir(r.config), 0o755); err != nil {
		return nil, err
	}
	if err := writeRuleFiles(r.config, r.rs); err != nil {
		return nil, err
	}
	rep = &reloadReport{Server: "floodgate", Rules: o.rules, Rate: o.reloadRate()}
	if o.referenceBin != "" {
		rep.Server = "reference"
	}
	if fi, err := os.Stat(filepath.Join(r.config, scenario{Limit: limitUnder}.domain()+".yaml")); err == nil {
		rep.FileMiB = float64(fi.Size()) / mib
	}
	if err := r.start(bin, redisAddr); err != nil {
		return nil, err
	}
	stops.add(func() { r.probe.Close(); r.proc.Stop(10 * time.Second) })
	fmt.Fprintf(log, "bench: %s pid %d, gRPC on %s, %d rules (%.1f MiB)\n", rep.Server, r.proc.Pid(), r.grpc, o.rules, rep.FileMiB)
	if err := r.measure(ctx, rep, log); err != nil {
		if r.proc.Exited() {
			err = fmt.Errorf("%w; the server exited:\n%s", err, r.proc.logTail())
		}
		return nil, err
	}
	return rep, nil
}

// start starts the server on free loopback ports, without waiting for it.
func (r *reloadRun) start(bin, redisAddr string) error {
	var addrs [3]string
	for i := range addrs {
		a, err := harness.FreeAddr()
		if err != nil {
			return err
		}
		addrs[i] = a
	}
	r.grpc = addrs[0]
	var args, env []string
	if r.o.referenceBin != "" {
		env = referenceEnv(r.dir, redisAddr, addrs)
	} else {
		args = append([]string{"-config", r.config, "-grpc-addr", addrs[0], "-http-addr", addrs[1], "-debug-addr", addrs[2], "-redis", redisAddr}, serverDefaults...)
		args = append(args, r.o.serverArgs...)
	}
	probe, err := grpc.NewClient(r.grpc, asEnvoy(
		// Retry at once while the server is not listening yet, so that
		// its first answer is seen when it comes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1, MaxDelay: 5 * time.Millisecond}, MinConnectTimeout: time.Second}))...)
	if err != nil {
		return err
	}
	r.probe = probe
	r.started = time.Now()
	p, err := startChild(filepath.Base(bin), bin, args, env...)
	if err != nil {
		probe.Close()
		return err
	}
	r.proc = p
	return nil
}

// referenceEnv is the reference server's environment: harness.ReferenceVars
// and the addresses addrs to listen on (gRPC, HTTP, debug).
func referenceEnv(root, redisAddr string, addrs [3]string) []string {
	var host, port [3]string
	for i, a := range addrs {
		host[i], port[i], _ = net.SplitHostPort(a)
	}
	return append(harness.ReferenceVars(root, redisAddr),
		"GRPC_HOST="+host[0], "GRPC_PORT="+port[0], "HOST="+host[1], "PORT="+port[1],
		"DEBUG_HOST="+host[2], "DEBUG_PORT="+port[2],
	)
}

// measure takes the start figures, then rewrites the rules o.reloads
// times under load.
func (r *reloadRun) measure(ctx context.Context, rep *reloadReport, log io.Writer) error {
	first, err := r.waitLimit(ctx, exactLimit(0))
	if err != nil {
		return fmt.Errorf("first answer: %w", err)
	}
	rep.StartToFirstAnswerMs = msSince(r.started, first)
	cpu, err := procCPU(r.proc.Pid())
	if err != nil {
		return err
	}
	rep.StartCPUMs = float64(cpu) / float64(time.Millisecond)
	fmt.Fprintf(log, "bench: first answer after %.0f ms (%.0f ms of CPU)\n", rep.StartToFirstAnswerMs, rep.StartCPUMs)
	if rep.RSSAfterStartMiB, err = r.settledRSS(ctx); err != nil {
		return err
	}
	conns, err := dial(r.grpc, r.o.conns)
	if err != nil {
		return err
	}
	defer closeAll(conns)
	load := startTimedLoad(ctx, conns, r.o.scenario, rep.Rate)
	var windows [][2]time.Time
	for g := 1; g <= r.o.reloads; g++ {
		cpu0, _ := procCPU(r.proc.Pid())
		t0, err := r.rewrite(g)
		if err != nil {
			load.stop()
			return err
		}
		done, err := r.waitLimit(ctx, exactLimit(g))
		cpu1, _ := procCPU(r.proc.Pid())
		if err != nil {
			load.stop()
			return fmt.Errorf("reload %d: %w", g, err)
		}
		windows = append(windows, [2]time.Time{t0, done})
		rep.ReloadMs = append(rep.ReloadMs, msSince(t0, done))
		rep.ReloadCPUMs = append(rep.ReloadCPUMs, float64(cpu1-cpu0)/float64(time.Millisecond))
		rss, err := r.settledRSS(ctx)
		if err != nil {
			load.stop()
			return err
		}
		rep.RSSAfterReloadMiB = append(rep.RSSAfterReloadMiB, rss)
		fmt.Fprintf(log, "bench: reload %d in force after %.0f ms, RSS %.1f MiB\n", g, rep.ReloadMs[g-1], rss)
	}
	load.stop()
	load.report(rep, windows)
	hwm, err := procStatusBytes(r.proc.Pid(), "VmHWM")
	rep.PeakRSSMiB = float64(hwm) / mib
	return err
}

// settledRSS waits -settle and returns the server's VmRSS in MiB.
func (r *reloadRun) settledRSS(ctx context.Context) (float64, error) {
	select {
	case <-time.After(r.o.settle):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	rss, err := procRSS(r.proc.Pid())
	return float64(rss) / mib, err
}

// rewrite writes generation g of the large domain's file next to the rule
// directory and renames it into place, as a deployment replaces a file,
// and returns when the rename is done.
func (r *reloadRun) rewrite(g int) (time.Time, error) {
	name := scenario{Limit: limitUnder}.domain() + ".yaml"
	tmp := filepath.Join(filepath.Dir(r.config), name+".new")
	rs := r.rs
	rs.generation = g
	if err := writeRuleFile(tmp, limitUnder, rs); err != nil {
		return time.Time{}, err
	}
	if err := os.Rename(tmp, filepath.Join(r.config, name)); err != nil {
		return time.Time{}, err
	}
	return time.Now(), nil
}

// waitLimit asks the server, every few milliseconds, for the first exact
// rule's limit until it is want, and returns when it was.
func (r *reloadRun) waitLimit(ctx context.Context, want uint32) (time.Time, error) {
	req := &pb.RateLimitRequest{Domain: scenario{Limit: limitUnder}.domain(), Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: descriptorKey(0), Value: exactValue(0)}}},
	}}
	deadline := time.Now().Add(reloadTimeout)
	var last error
	for {
		var resp pb.RateLimitResponse
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := r.probe.Invoke(callCtx, shouldRateLimit, req, &resp)
		cancel()
		now := time.Now()
		switch {
		case err == nil && len(resp.Statuses) == 1 && resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit() == want:
			return now, nil
		case err == nil:
			last = fmt.Errorf("the limit in force is %d, not %d", resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit(), want)
		default:
			last = err
		}
		switch {
		case ctx.Err() != nil:
			return now, ctx.Err()
		case r.proc.Exited():
			return now, errors.New("the server exited")
		case now.After(deadline):
			return now, fmt.Errorf("not in force after %v: %w", reloadTimeout, last)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func msSince(from, to time.Time) float64 { return float64(to.Sub(from)) / float64(time.Millisecond) }

// timedLoad is decisions sent at a fixed rate until stopped, each
// recorded with the time it was due.
type timedLoad struct {
	callers []*caller
	due     [][]time.Time // per caller, in order, beside its samples
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	elapsed time.Duration
}

// startTimedLoad starts sending the scenario's requests at rate over conns
// until stop; calls in flight at stop end normally.
func startTimedLoad(ctx context.Context, conns []*grpc.ClientConn, sc scenario, rate float64) *timedLoad {
	l := &timedLoad{callers: make([]*caller, sc.Concurrency), due: make([][]time.Time, sc.Concurrency)}
	values := sc.values()
	seed := rand.Uint64()
	for i := range l.callers {
		l.callers[i] = &caller{conn: conns[i%len(conns)], req: sc.requestTemplate(), rng: rand.New(rand.NewPCG(seed, uint64(i))), values: values}
	}
	sendCtx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	l.wg.Go(func() {
		l.elapsed = drive(sendCtx, len(l.callers), rate, 24*time.Hour, func(i int, since time.Time) {
			c := l.callers[i]
			c.next()
			c.call(ctx, since)
			l.due[i] = append(l.due[i], since)
		})
	})
	return l
}

// stop stops sending and waits for the calls in flight.
func (l *timedLoad) stop() {
	l.cancel()
	l.wg.Wait()
}

// report fills rep's latencies and counts: every call, those due within
// one of windows and the others.
func (l *timedLoad) report(rep *reloadReport, windows [][2]time.Time) {
	tallies := make([]*tally, len(l.callers))
	var during, between []int64
	for i, c := range l.callers {
		tallies[i] = &c.tally
		for j, at := range l.due[i] {
			if slices.ContainsFunc(windows, func(w [2]time.Time) bool { return !at.Before(w[0]) && !at.After(w[1]) }) {
				during = append(during, c.samples[j])
			} else {
				between = append(between, c.samples[j])
			}
		}
	}
	all := collect(tallies, l.elapsed)
	rep.Decisions, rep.Errors = all.Requests(), all.Errors
	if all.FirstError != nil {
		rep.FirstError = all.FirstError.Error()
	}
	rep.All = toLatencyMicros(percentiles(all.Samples))
	rep.DuringCount = len(during)
	rep.DuringReloads = toLatencyMicros(percentiles(during))
	rep.BetweenReloads = toLatencyMicros(percentiles(between))
}

// writeReloadText prints a -reloads report for a reader.
func writeReloadText(w io.Writer, rep *reloadReport) {
	fmt.Fprintf(w, "%s: %d rules (%.1f MiB of YAML)\n", rep.Server, rep.Rules, rep.FileMiB)
	fmt.Fprintf(w, "  start to first answer   %.0f ms (%.0f ms of CPU), RSS %.1f MiB after it\n", rep.StartToFirstAnswerMs, rep.StartCPUMs, rep.RSSAfterStartMiB)
	for i := range rep.ReloadMs {
		fmt.Fprintf(w, "  reload %-3d              in force after %.0f ms (%.0f ms of CPU), RSS %.1f MiB after it\n", i+1, rep.ReloadMs[i], rep.ReloadCPUMs[i], rep.RSSAfterReloadMiB[i])
	}
	fmt.Fprintf(w, "  peak RSS                %.1f MiB\n", rep.PeakRSSMiB)
	d, a := rep.DuringReloads, rep.All
	b := rep.BetweenReloads
	fmt.Fprintf(w, "  during reloads          %d decisions at %.0f/s: p50 %s  p99 %s  max %s\n", rep.DuringCount, rep.Rate, ms(d.P50), ms(d.P99), ms(d.Max))
	fmt.Fprintf(w, "  between reloads         p50 %s  p99 %s  max %s\n", ms(b.P50), ms(b.P99), ms(b.Max))
	fmt.Fprintf(w, "  whole reload phase      %d decisions, %d errors: p50 %s  p99 %s  max %s\n", rep.Decisions, rep.Errors, ms(a.P50), ms(a.P99), ms(a.Max))
	if rep.FirstError != "" {
		fmt.Fprintf(w, "  first error             %s\n", rep.FirstError)
	}
}

// reloadRate is the -reloads mode's arrival rate: -rate, or
// reloadDefaultRate when -rate is 0.
func (o *options) reloadRate() float64 {
	if o.scenario.Rate == 0 {
		return reloadDefaultRate
	}
	return o.scenario.Rate
}

// checkReloads validates the options of the -reloads mode.
func (o *options) checkReloads() error {
	switch {
	case o.rules < 1:
		return fmt.Errorf("-reloads needs -rules: the size of the rule set to load, at least 1")
	case o.matrix, o.envoy, o.grpcFloor, o.serverAddr != "", o.cpuProfile != "", o.config != "", o.writeRules != "":
		return errors.New("-reloads starts its own server on generated rules: drop -matrix, -envoy, -grpc-floor, -server-addr, -cpuprofile, -config and -write-rules")
	case o.referenceBin != "" && (o.serverBin != "" || len(o.serverArgs) > 0):
		return errors.New("-reference-bin starts the reference server: drop -server-bin and -server-args")
	case o.settle < 0:
		return fmt.Errorf("-settle %v: must not be negative", o.settle)
	}
	return nil
}
