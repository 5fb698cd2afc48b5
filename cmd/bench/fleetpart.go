package main

// One part of the fleet mode: the Envoys of one protocol, started,
// warmed up, measured and stopped.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"google.golang.org/grpc"
)

// fleetRun is a part being run.
type fleetRun struct {
	proto  string
	d      *demand
	counts *fleetCounts
	conns  []*grpc.ClientConn
	quota  *quotaFleet
	qs     []*quotaEnvoy
	rls    *rlsFleet
	rs     []*rlsEnvoy
	// shiftAt is when the demand shifts; killAt when the master dies.
	shiftAt, killAt time.Time
	// heapBase, heapOpen and heapEnd are the floodgates' live heap before
	// the part, once every RLQS stream held one bucket, and at the end.
	heapBase, heapOpen, heapEnd int64
	held                        float64 // RLQS buckets held at the end
	// redisBase is each Redis node's used memory before the part.
	redisBase []int64
	// immediate and abandons are the RLQS fleet's counts at the start and
	// the end of the measured run.
	immediate, abandons, sent [2]int64
	failover                  *failoverRun
}

// newRun dials a connection per Envoy and builds the part's Envoys.
func (env *fleetEnv) newRun(proto string) (*fleetRun, error) {
	o := env.o
	rate := o.RLSRate
	if proto == protoRLQS {
		rate = o.RLQSRate
	}
	fr := &fleetRun{proto: proto, d: newDemand(o.Buckets, o.Envoys, rate, o.Zipf), counts: newFleetCounts(o.Buckets, o.Window)}
	for i := range o.Envoys {
		c, err := grpc.NewClient(env.floodgates[i%len(env.floodgates)].srv.grpcAddr, asEnvoy()...)
		if err != nil {
			fr.close()
			return nil, err
		}
		fr.conns = append(fr.conns, c)
	}
	seed := rand.Uint64()
	if proto == protoRLQS {
		fr.quota = newQuotaFleet(fr.d, fr.counts, fleetDomain+proto)
		for i, c := range fr.conns {
			fr.qs = append(fr.qs, newQuotaEnvoy(fr.quota, i, o.Envoys, c, seed))
		}
	} else {
		fr.rls = newRLSFleet(fr.d, fr.counts, fleetDomain+proto, o.RLSTimeout)
		for i, c := range fr.conns {
			fr.rs = append(fr.rs, newRLSEnvoy(fr.rls, i, o.Envoys, c, seed))
		}
	}
	return fr, nil
}

func (fr *fleetRun) close() { closeAll(fr.conns) }

// start runs every Envoy until ctx ends; the RLS Envoys start spread over
// a tick, the RLQS ones at once (their streams' openings spread them).
func (fr *fleetRun) start(ctx context.Context, t0 time.Time) *sync.WaitGroup {
	var wg sync.WaitGroup
	for _, e := range fr.qs {
		wg.Go(func() { e.run(ctx, t0) })
	}
	for i, e := range fr.rs {
		wg.Go(func() { e.run(ctx, t0.Add(time.Duration(i)*fleetTick/time.Duration(len(fr.rs)))) })
	}
	return &wg
}

// openStreams has each RLQS Envoy take its first request, of the hottest
// bucket, which opens its stream: the Envoys one after the other over a
// report interval, so that their reports come at every phase. It returns
// once every floodgate holds the streams.
func (env *fleetEnv) openStreams(ctx context.Context, fr *fleetRun) error {
	t0 := time.Now()
	// Spread over a report interval, but not longer than 5 ms an Envoy,
	// so that a small fleet (the tests') opens at once.
	spread := min(quotaReportEvery, time.Duration(len(fr.qs))*5*time.Millisecond)
	for i, e := range fr.qs {
		if err := sleepUntil(ctx, staggered(t0, i, len(fr.qs), spread)); err != nil {
			return err
		}
		now := time.Now()
		e.mu.Lock()
		e.request(0, now)
		e.mu.Unlock()
		e.sendReports(ctx, now)
	}
	return env.waitMetric(ctx, "floodgate_rlqs_streams", float64(len(fr.qs)), 30*time.Second)
}

// waitMetric waits until the floodgates' metric name adds up to want.
func (env *fleetEnv) waitMetric(ctx context.Context, name string, want float64, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		r, err := env.read(ctx)
		if err != nil {
			return err
		}
		got := r.metricSum(name)
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %v after %v, want %v", name, got, timeout, want)
		}
		if err := sleepUntil(ctx, time.Now().Add(100*time.Millisecond)); err != nil {
			return err
		}
	}
}

// sleepUntil waits until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}

// runPart runs one protocol's part and returns its figures.
func (env *fleetEnv) runPart(ctx context.Context, proto string) (fleetPart, error) {
	o := env.o
	base, err := env.liveHeaps(ctx)
	if err != nil {
		return fleetPart{}, err
	}
	t0 := time.Now()
	fr, err := env.newRun(proto)
	if err != nil {
		return fleetPart{}, err
	}
	defer fr.close()
	fr.heapBase = base
	if r, err := env.read(ctx); err == nil {
		for _, n := range r.redis {
			fr.redisBase = append(fr.redisBase, n.usedMemory)
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if proto == protoRLQS {
		if err := env.openStreams(runCtx, fr); err != nil {
			return fleetPart{}, err
		}
		if fr.heapOpen, err = env.liveHeaps(ctx); err != nil {
			return fleetPart{}, err
		}
	}
	wg := fr.start(runCtx, time.Now())
	start, end, err := env.measureRun(runCtx, fr, t0.Add(o.Warmup))
	stop()
	wg.Wait()
	if err != nil {
		return fleetPart{}, err
	}
	return env.partOf(fr, start, end), nil
}

// measureRun takes the readings that open and close the measured run,
// which starts at from (or now, when the set-up took longer), killing a
// master meanwhile if asked.
func (env *fleetEnv) measureRun(ctx context.Context, fr *fleetRun, from time.Time) (start, end fleetReading, err error) {
	if err = sleepUntil(ctx, from); err != nil {
		return
	}
	if start, err = env.read(ctx); err != nil {
		return
	}
	fr.snapshotQuota(0)
	if env.o.Shift {
		fr.shiftAt = start.at.Add(env.o.Duration / 2)
		fr.d.shiftAt.Store(fr.shiftAt.UnixNano())
	}
	if env.o.KillMaster > 0 {
		fr.killAt = start.at.Add(env.o.KillMaster)
		if fr.failover, err = env.armFailover(ctx, fr); err != nil {
			return
		}
	}
	if err = sleepUntil(ctx, start.at.Add(env.o.Duration)); err != nil {
		return
	}
	if end, err = env.read(ctx); err != nil {
		return
	}
	fr.snapshotQuota(1)
	if fr.proto == protoRLQS {
		fr.held = end.metricSum("floodgate_rlqs_buckets")
		fr.heapEnd, err = env.liveHeaps(ctx)
	}
	return start, end, err
}

// snapshotQuota keeps the RLQS fleet's counts of new-bucket reports and
// abandons at the start (i 0) or the end (1) of the measured run.
func (fr *fleetRun) snapshotQuota(i int) {
	if fr.quota != nil {
		st := &fr.quota.stats
		fr.immediate[i], fr.abandons[i], fr.sent[i] = st.immediate.Load(), st.abandons.Load(), st.reports.Load()
	}
}
