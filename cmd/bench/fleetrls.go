package main

// A simulated Envoy 1.40 with the ratelimit filter (RLS): one
// ShouldRateLimit call per request, on the Envoy's own connection, the
// request carrying one descriptor (api_key, the bucket's key) in the
// fleet's domain, as Envoy sends it (TestRLSEnvoyMatchesEnvoy records
// the real one); a call that fails or passes the filter's timeout is
// answered by Envoy's failure_mode_deny false: the request passes.

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

// rlsStats counts what the whole simulated RLS fleet did.
type rlsStats struct {
	requests, ok, over, failed atomic.Int64
}

// rlsFleet is what the simulated RLS Envoys share.
type rlsFleet struct {
	d       *demand
	counts  *fleetCounts
	reqs    []*pb.RateLimitRequest // bucket k's request, read-only
	timeout time.Duration
	stats   rlsStats

	mu      sync.Mutex
	samples []int64 // every answered call's latency, ns
}

func newRLSFleet(d *demand, counts *fleetCounts, domain string, timeout time.Duration) *rlsFleet {
	f := &rlsFleet{d: d, counts: counts, timeout: timeout, reqs: make([]*pb.RateLimitRequest, d.buckets)}
	for k := range f.reqs {
		f.reqs[k] = rlsRequest(domain, d.values[k])
	}
	return f
}

// rlsRequest is the request Envoy sends for a request with the bucket's
// key: one descriptor of one entry, no hits_addend.
func rlsRequest(domain, value string) *pb.RateLimitRequest {
	return &pb.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: fleetKey, Value: value}}},
	}}
}

// rlsEnvoy is one simulated Envoy of the RLS fleet.
type rlsEnvoy struct {
	fl      *rlsFleet
	group   int
	conn    *grpc.ClientConn
	rng     *rand.Rand
	calls   sync.WaitGroup
	mu      sync.Mutex
	samples []int64
}

func newRLSEnvoy(fl *rlsFleet, i, envoys int, conn *grpc.ClientConn, seed uint64) *rlsEnvoy {
	e := &rlsEnvoy{fl: fl, conn: conn, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
	if !inGroupA(i, envoys) {
		e.group = 1
	}
	return e
}

// run sends the Envoy's requests from start until ctx ends, then waits
// for the calls in flight.
func (e *rlsEnvoy) run(ctx context.Context, start time.Time) {
	defer e.finish()
	tickFrom(ctx, start, func(prev, now time.Time) { e.step(ctx, prev, now) })
}

// step sends the requests that arrived between prev and now.
func (e *rlsEnvoy) step(ctx context.Context, prev, now time.Time) {
	d := e.fl.d
	n := arrivals(e.rng, d.perEnvoy, now.Sub(prev))
	extra := 0
	if e.group == 0 && d.shifted(now) {
		extra = arrivals(e.rng, d.extraTracked(), now.Sub(prev))
	}
	for j := range n + extra {
		b := 0
		if j < n {
			b = d.pick(e.rng)
		}
		e.calls.Add(1)
		go e.call(context.WithoutCancel(ctx), b)
	}
}

// call makes one request's call and counts its answer.
func (e *rlsEnvoy) call(ctx context.Context, b int) {
	defer e.calls.Done()
	ctx, cancel := context.WithTimeout(ctx, e.fl.timeout)
	defer cancel()
	start := time.Now()
	var resp pb.RateLimitResponse
	err := e.conn.Invoke(ctx, shouldRateLimit, e.fl.reqs[b], &resp)
	now := time.Now()
	st, c := &e.fl.stats, e.fl.counts
	st.requests.Add(1)
	if err != nil {
		st.failed.Add(1)
		c.addFailed(now, b)
		return
	}
	e.mu.Lock()
	e.samples = append(e.samples, int64(now.Sub(start)))
	e.mu.Unlock()
	ok := resp.GetOverallCode() != pb.RateLimitResponse_OVER_LIMIT
	if ok {
		st.ok.Add(1)
	} else {
		st.over.Add(1)
	}
	c.add(rlsWindow(c, now, resp.GetStatuses()), b, ok)
	if b == 0 {
		a := int64(0)
		if ok {
			a = 1
		}
		c.addTracked(now, e.group, a, 1-a)
	}
}

// rlsWindow is the window an answer at now was decided in: the one that
// ends when its status says it resets, on Redis's clock; the window
// holding now when the status has no reset. The reset is in whole
// seconds rounded up, so the end it gives is the window's end or up to a
// second after, never a whole window after (windows are whole seconds).
func rlsWindow(c *fleetCounts, now time.Time, statuses []*pb.RateLimitResponse_DescriptorStatus) int64 {
	if len(statuses) == 0 || statuses[0].GetDurationUntilReset() == nil {
		return c.windowOf(now)
	}
	end := now.Add(statuses[0].GetDurationUntilReset().AsDuration())
	return end.UnixNano()/int64(c.window) - 1
}

// finish waits for the calls in flight and hands the samples over.
func (e *rlsEnvoy) finish() {
	e.calls.Wait()
	e.fl.mu.Lock()
	e.fl.samples = append(e.fl.samples, e.samples...)
	e.fl.mu.Unlock()
}

// latency returns the percentiles of the fleet's answered calls.
func (f *rlsFleet) latency() latencies {
	f.mu.Lock()
	defer f.mu.Unlock()
	return percentiles(slices.Clone(f.samples))
}
