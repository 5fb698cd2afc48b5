package main

// The default mode: floodgate (or the server of -server-addr, or the gRPC
// floor) driven scenario by scenario, each measured between two runs of
// the ceiling.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
)

// target is what the scenarios run against.
type target struct {
	srv       server
	proc      *child        // the started floodgate; nil with -server-addr
	redisAddr string        // "" when unknown
	redis     *redis.Client // nil when redisAddr is ""
	conns     []*grpc.ClientConn
}

// bench sets up the target, measures every scenario and tears down what it
// started. Progress goes to log.
func bench(ctx context.Context, o *options, log io.Writer) (results []result, err error) {
	var stops stopList
	defer stops.run()
	t, err := startTarget(ctx, o, log, &stops)
	if err != nil {
		return nil, err
	}
	if t.redisAddr != "" {
		t.redis = redis.NewClient(&redis.Options{Addr: t.redisAddr, PoolSize: 2})
		stops.add(func() { t.redis.Close() })
	}
	if t.conns, err = dial(t.srv.grpcAddr, o.conns); err != nil {
		return nil, err
	}
	stops.add(func() { closeAll(t.conns) })

	scenarios := o.scenarios()
	for i, sc := range scenarios {
		fmt.Fprintf(log, "bench: [%d/%d] %s: warm-up %v, measuring %v\n", i+1, len(scenarios), sc, o.warmup, o.duration)
		r, err := measure(ctx, o, t, sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// startTarget names the server to drive: the running one of -server-addr,
// or the gRPC floor or a floodgate it starts, with a stop for each added
// to stops.
func startTarget(ctx context.Context, o *options, log io.Writer, stops *stopList) (*target, error) {
	t := &target{redisAddr: o.redisAddr}
	switch {
	case o.serverAddr != "":
		t.srv = server{grpcAddr: o.serverAddr, debugAddr: o.serverDebugAddr, pid: o.serverPID}
		return t, nil
	case o.grpcFloor:
		p, srv, err := startFloor(ctx, "")
		if err != nil {
			return nil, err
		}
		stops.add(func() { p.Stop(5 * time.Second) })
		t.srv, t.proc, t.redisAddr = srv, p, ""
		fmt.Fprintf(log, "bench: grpc floor pid %d, gRPC on %s\n", srv.pid, srv.grpcAddr)
		return t, nil
	}
	dir, err := os.MkdirTemp("", "floodgate-bench-")
	if err != nil {
		return nil, err
	}
	stops.add(func() { os.RemoveAll(dir) })
	var bin string
	if t.redisAddr, bin, err = setUp(ctx, o, dir, true, true, log, stops); err != nil {
		return nil, err
	}
	config := o.config
	if config == "" {
		config = filepath.Join(dir, "rules")
		if err := writeRuleFiles(config, o.ruleSpec()); err != nil {
			return nil, err
		}
	}
	p, srv, err := startServer(ctx, bin, config, t.redisAddr, o.serverArgs)
	if err != nil {
		return nil, err
	}
	stops.add(func() { p.Stop(10 * time.Second) })
	t.srv, t.proc = srv, p
	fmt.Fprintf(log, "bench: floodgate pid %d, gRPC on %s\n", srv.pid, srv.grpcAddr)
	return t, nil
}

// measure runs one scenario: the warm-up (during which it captures the
// script call for the ceiling), a ceiling run, the measured load with
// readings before and after, and a second ceiling run.
func measure(ctx context.Context, o *options, t *target, sc scenario) (result, error) {
	r := result{Scenario: sc}
	switch {
	case o.grpcFloor:
		r.Target = targetFloor
	case o.config == "" && o.serverAddr == "":
		r.Algorithm = o.algorithm
	}
	values := sc.values()

	call, captureErr := warmUp(ctx, o, t, sc, values)
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if captureErr == nil && call != nil && call.keys() != sc.Descriptors {
		r.Notes = append(r.Notes, fmt.Sprintf("the server decided %d limits per request, not %d: does the rule file limit each of keys %s..%s?",
			call.keys(), sc.Descriptors, descriptorKey(0), descriptorKey(sc.Descriptors-1)))
	}
	ceil, err := firstCeiling(ctx, o, t, sc, call, captureErr, &r)
	if err != nil {
		return r, err
	}
	if err := measureLoad(ctx, o, t, sc, values, &r); err != nil {
		return r, err
	}
	if ceil != nil {
		err = ceil.second(ctx, &r)
	}
	return r, err
}

// ceilings are the two ceiling runs around a scenario's measured load.
type ceilings struct {
	runner      *ceilingRunner
	before      float64
	beforeDelta redisDelta
}

// firstCeiling runs the ceiling before the measured load. With none to
// run (a nil result), it says why in r's notes, unless no ceiling was
// wanted. captureErr is the warm-up's, which captured the script call.
func firstCeiling(ctx context.Context, o *options, t *target, sc scenario, call scriptCall, captureErr error, r *result) (*ceilings, error) {
	switch {
	case !o.ceiling, o.grpcFloor:
		return nil, nil
	case t.redis == nil:
		r.Notes = append(r.Notes, "no ceiling: the Redis address is unknown (pass -redis-addr)")
		return nil, nil
	case captureErr != nil:
		r.Notes = append(r.Notes, "no ceiling: "+captureErr.Error())
		return nil, nil
	}
	c := &ceilings{}
	var err error
	c.runner, err = newCeilingRunner(ctx, t.redis, t.redisAddr, call, sc.Concurrency, sc.Keys, o.ceilingDuration)
	if err == nil {
		c.before, c.beforeDelta, err = c.runner.run(ctx)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.Notes = append(r.Notes, "no ceiling: "+err.Error())
		return nil, nil
	}
	return c, nil
}

// second runs the ceiling after the measured load and sets r's ceiling
// from both runs.
func (c *ceilings) second(ctx context.Context, r *result) error {
	after, afterDelta, err := c.runner.run(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Notes = append(r.Notes, "no ceiling: "+err.Error())
		return nil
	}
	r.Ceiling = c.runner.combine(c.before, c.beforeDelta, after, afterDelta)
	r.CeilingShare = r.DecisionsPerSec / r.Ceiling.RequestsPerSec
	if lo, hi := min(c.before, after), max(c.before, after); hi > 1.25*lo {
		r.Notes = append(r.Notes, fmt.Sprintf("the machine's load changed during the scenario: the ceiling was %.0f/s before and %.0f/s after", c.before, after))
	}
	return nil
}

// measureLoad runs the measured load with readings before and after,
// sampling the server's RSS and, with -cpuprofile, profiling it meanwhile,
// and sets r's figures.
func measureLoad(ctx context.Context, o *options, t *target, sc scenario, values []string, r *result) error {
	before, err := t.snapshot(ctx)
	if err != nil {
		return err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var wg sync.WaitGroup
	rssMax := before.serverRSS
	if t.srv.pid != 0 {
		wg.Go(func() { rssMax = maxRSS(sampleCtx, t.srv.pid, rssMax) })
	}
	var profileErr error
	if o.cpuProfile != "" {
		r.CPUProfile = profilePath(o, sc)
		wg.Go(func() { profileErr = fetchProfile(ctx, t.srv.debugAddr, o.duration, r.CPUProfile) })
	}

	load := runLoad(ctx, t.conns, sc, values, o.duration)

	after, err := t.snapshot(ctx)
	stopSampling()
	wg.Wait()
	switch {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	case t.proc != nil && t.proc.Exited():
		return fmt.Errorf("floodgate exited during the run:\n%s", t.proc.logTail())
	case profileErr != nil:
		return fmt.Errorf("cpu profile: %w", profileErr)
	}
	if err := r.fill(load, before, after, t); err != nil {
		return err
	}
	r.Server.maybeMax(rssMax)
	return nil
}

// maxRSS samples the RSS of process pid until ctx is done and returns the
// highest sample, or from if higher.
func maxRSS(ctx context.Context, pid int, from int64) int64 {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return from
		case <-tick.C:
			if rss, err := procRSS(pid); err == nil {
				from = max(from, rss)
			}
		}
	}
}

// warmUp loads the server for -warmup without measuring and, when a ceiling
// is wanted, captures the script call the server sends meanwhile.
func warmUp(ctx context.Context, o *options, t *target, sc scenario, values []string) (scriptCall, error) {
	warmCtx, cancel := context.WithTimeout(ctx, o.warmup)
	defer cancel()
	var call scriptCall
	var err error
	var wg sync.WaitGroup
	if o.ceiling && t.redis != nil {
		wg.Go(func() { call, err = captureScriptCall(warmCtx, t.redisAddr) })
	}
	runLoad(ctx, t.conns, sc, values, o.warmup)
	cancel()
	wg.Wait()
	return call, err
}

// snapshot is the readings taken before and after a measured run.
type snapshot struct {
	serverCPU time.Duration // 0 when the pid is unknown
	serverRSS int64
	redis     redisStats // zero when Redis is unknown
	self      time.Duration
}

func (t *target) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{self: selfCPU()}
	var err error
	if t.redis != nil {
		if s.redis, err = readRedisStats(ctx, t.redis); err != nil {
			return s, err
		}
	}
	if t.srv.pid != 0 {
		if s.serverCPU, err = procCPU(t.srv.pid); err != nil {
			return s, fmt.Errorf("server CPU: %w", err)
		}
		if s.serverRSS, err = procRSS(t.srv.pid); err != nil {
			return s, fmt.Errorf("server RSS: %w", err)
		}
	}
	return s, nil
}

// fill sets the figures of a measured run from what the callers saw and
// the readings around it.
func (r *result) fill(load loadResult, before, after snapshot, t *target) error {
	decisions := load.Requests()
	if decisions == 0 {
		msg := "no decision"
		if load.FirstError != nil {
			msg += fmt.Sprintf(": %d calls failed, e.g. %v", load.Errors, load.FirstError)
		}
		return errors.New(msg)
	}
	perDecision := func(d time.Duration) float64 { return micros(d) / float64(decisions) }
	r.DurationSec = load.Elapsed.Seconds()
	r.Decisions = decisions
	r.DecisionsPerSec = float64(decisions) / load.Elapsed.Seconds()
	r.OverLimitShare = float64(load.OverLimit) / float64(decisions)
	r.Errors = load.Errors
	if load.FirstError != nil {
		r.FirstError = load.FirstError.Error()
		r.Notes = append(r.Notes, fmt.Sprintf("%d calls failed, e.g. %v", load.Errors, load.FirstError))
	}
	r.Latency = toLatencyMicros(percentiles(load.Samples))
	r.LoadCPUMicrosPerDecision = perDecision(after.self - before.self)
	if t.srv.pid != 0 {
		r.Server = &serverResult{
			CPUMicrosPerDecision: perDecision(after.serverCPU - before.serverCPU),
			RSSStartMiB:          float64(before.serverRSS) / mib,
			RSSEndMiB:            float64(after.serverRSS) / mib,
			RSSMaxMiB:            float64(max(before.serverRSS, after.serverRSS)) / mib,
		}
	}
	if t.redis != nil {
		d := after.redis.delta(before.redis)
		// Failed calls count as requests here: most reached Redis.
		requests := float64(decisions + load.Errors)
		rd := &redisResult{
			CPUMicrosPerDecision: perDecision(d.CPU),
			CommandsPerRequest:   float64(d.total()) / requests,
			RoundTripsPerRequest: float64(d.scripts()) / requests,
			CallsPerRequest:      map[string]float64{},
		}
		for cmd, n := range d.Calls {
			rd.CallsPerRequest[cmd] = float64(n) / requests
		}
		r.Redis = rd
		switch {
		case rd.CommandsPerRequest < 0.5 && r.Scenario.Limit == limitUnder:
			// Over the limit, the deny cache answers most requests without
			// Redis; under it, every decision writes its counters.
			r.Notes = append(r.Notes, fmt.Sprintf("%.2f Redis commands per request: most requests did not reach this Redis (does the rule file define domain %s with keys %s..?)",
				rd.CommandsPerRequest, r.Scenario.domain(), descriptorKey(0)))
		case d.scripts() == 0:
			r.Notes = append(r.Notes, "the server sent no script call: its round trips cannot be told from INFO (pipelined commands look like separate ones); commands/request still counts them")
		}
	}
	return nil
}

// maybeMax raises the highest RSS to a sample taken during the run.
func (s *serverResult) maybeMax(rss int64) {
	if s != nil {
		s.RSSMaxMiB = max(s.RSSMaxMiB, float64(rss)/mib)
	}
}

// profilePath names the CPU profile of sc: -cpuprofile itself, or with
// -matrix the scenario inserted before the extension.
func profilePath(o *options, sc scenario) string {
	if !o.matrix {
		return o.cpuProfile
	}
	ext := filepath.Ext(o.cpuProfile)
	return fmt.Sprintf("%s-%s-d%d-c%d%s", strings.TrimSuffix(o.cpuProfile, ext), sc.Limit, sc.Descriptors, sc.Concurrency, ext)
}

// fetchProfile saves the server's CPU profile over d (rounded up to whole
// seconds, pprof's unit) from its debug listener.
func fetchProfile(ctx context.Context, debugAddr string, d time.Duration, path string) error {
	seconds := int((d + time.Second - 1) / time.Second)
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debugAddr, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
