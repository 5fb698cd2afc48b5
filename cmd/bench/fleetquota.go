package main

// A simulated Envoy 1.40 with examples/envoy-rlqs.yaml's rate_limit_quota
// filter: it decides every request itself from the last assignment of the
// request's bucket and reports to floodgate on one stream, as the real
// one does (TestQuotaEnvoyMatchesEnvoy records the real one and holds this
// one to it):
//
//   - the stream opens with the first request of a bucket, with the
//     x-rlqs-client metadata;
//   - a bucket's first request is reported at once, alone in its message
//     (time_elapsed 0, allowed 1), and is not counted again;
//   - every 5 s from the stream's opening one message reports every
//     bucket held: time_elapsed the whole seconds since its last report,
//     the requests allowed and denied since, zeros included;
//   - a new bucket is allowed (no_assignment_behavior ALLOW_ALL) until its
//     first assignment; a token bucket starts full and refills
//     continuously, and one sent again unchanged keeps its tokens; an
//     assignment whose time to live ran out falls to 5 a second for 30 s,
//     then to allow-all; abandon_action forgets the bucket;
//   - a broken stream is opened again at the next 5 s tick, the usage
//     counted meanwhile lost.

import (
	"context"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/internal/rlqs"
)

const (
	// quotaReportEvery is Envoy 1.40's report interval, whatever the
	// filter's reporting_interval says.
	quotaReportEvery = 5 * time.Second
	// fleetTick is how often a simulated Envoy decides the requests that
	// arrived since its last tick, each at its own instant.
	fleetTick = 50 * time.Millisecond
	// fleetKey is the bucket_id's key and the RLS descriptor's.
	fleetKey = "api_key"
	// expiredRate and expiredFor are examples/envoy-rlqs.yaml's
	// expired_assignment_behavior: 5 a second for 30 s.
	expiredRate = 5
	expiredFor  = 30 * time.Second
)

// quotaKind is what decides a bucket's requests.
type quotaKind int

const (
	quotaNone    quotaKind = iota // no assignment: allow (no_assignment_behavior)
	quotaAllow                    // blanket ALLOW_ALL
	quotaDeny                     // blanket DENY_ALL
	quotaTokens                   // a token bucket
	quotaExpired                  // the expired assignment's fallback
)

// tokenBucket refills continuously, as Envoy's TokenBucketImpl.
type tokenBucket struct {
	tokens, max, perSecond float64
	at                     time.Time
}

// take takes a token at now, or reports there is none.
func (t *tokenBucket) take(now time.Time) bool {
	if now.After(t.at) {
		t.tokens = min(t.max, t.tokens+now.Sub(t.at).Seconds()*t.perSecond)
		t.at = now
	}
	if t.tokens >= 1 {
		t.tokens--
		return true
	}
	return false
}

// tokenSpec is a token bucket as assigned, to tell a new one from the
// one in force.
type tokenSpec struct {
	max, perFill uint32
	fill         time.Duration
}

// localBucket is one bucket an Envoy holds.
type localBucket struct {
	usage           *rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage
	elapsed         durationpb.Duration
	allowed, denied uint64
	lastReport      time.Time
	kind            quotaKind
	tb              tokenBucket
	spec            tokenSpec
	expires, until  time.Time
}

// admit decides one request at now.
func (lb *localBucket) admit(now time.Time) bool {
	if (lb.kind == quotaAllow || lb.kind == quotaDeny || lb.kind == quotaTokens) && !now.Before(lb.expires) {
		lb.kind, lb.until = quotaExpired, now.Add(expiredFor)
		lb.tb = tokenBucket{tokens: expiredRate, max: expiredRate, perSecond: expiredRate, at: now}
	}
	if lb.kind == quotaExpired && !now.Before(lb.until) {
		lb.kind = quotaNone
	}
	switch lb.kind {
	case quotaDeny:
		return false
	case quotaTokens, quotaExpired:
		return lb.tb.take(now)
	}
	return true
}

// assign applies an assignment received at now.
func (lb *localBucket) assign(a *rlqspb.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction, now time.Time) {
	// Envoy 1.40 reads durations in whole seconds.
	lb.expires = now.Add(a.GetAssignmentTimeToLive().AsDuration().Truncate(time.Second))
	s := a.GetRateLimitStrategy()
	if tb := s.GetTokenBucket(); tb != nil {
		spec := tokenSpec{max: tb.GetMaxTokens(), perFill: tb.GetTokensPerFill().GetValue(), fill: tb.GetFillInterval().AsDuration().Truncate(time.Second)}
		if spec.fill < time.Second {
			lb.kind = quotaAllow // an infinite rate
			return
		}
		if lb.kind != quotaTokens || spec != lb.spec {
			lb.tb = tokenBucket{tokens: float64(spec.max), max: float64(spec.max), at: now}
		}
		lb.tb.perSecond = float64(spec.perFill) / spec.fill.Seconds()
		lb.kind, lb.spec = quotaTokens, spec
		return
	}
	lb.kind = quotaAllow
	if s.GetBlanketRule() == typev3.RateLimitStrategy_DENY_ALL {
		lb.kind = quotaDeny
	}
}

// quotaStats counts what the whole simulated RLQS fleet did.
type quotaStats struct {
	requests, admitted, denied           atomic.Int64
	reports, usages, immediate           atomic.Int64
	tokenBuckets, blankets, abandons     atomic.Int64
	streamsOpened, streamErrors, ignored atomic.Int64
	// recvErrors counts streams that floodgate ended (Recv failed).
	recvErrors atomic.Int64
}

// quotaFleet is what the simulated RLQS Envoys share.
type quotaFleet struct {
	// lastRecvErr is the last error a stream ended with, for the report.
	lastRecvErr atomic.Value
	d           *demand
	counts      *fleetCounts
	domain      string
	ids         []*rlqspb.BucketId // bucket k's id, read-only
	stats       quotaStats
}

func newQuotaFleet(d *demand, counts *fleetCounts, domain string) *quotaFleet {
	f := &quotaFleet{d: d, counts: counts, domain: domain, ids: make([]*rlqspb.BucketId, d.buckets)}
	for k := range f.ids {
		f.ids[k] = &rlqspb.BucketId{Bucket: map[string]string{fleetKey: d.values[k]}}
	}
	return f
}

// quotaEnvoy is one simulated Envoy of the RLQS fleet.
type quotaEnvoy struct {
	fl    *quotaFleet
	name  string
	group int
	conn  *grpc.ClientConn
	rng   *rand.Rand

	// mu guards buckets and held, which the receiving goroutine changes.
	mu      sync.Mutex
	buckets []*localBucket
	held    []int

	stream     rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient
	cancel     context.CancelFunc
	broken     atomic.Bool
	nextReport time.Time
	fresh      []int
	usages     []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage

	win                            int64
	winAdmitted, winDenied         []int32
	trackedAdmitted, trackedDenied int64
	requests, admittedN, deniedN   int64
}

func newQuotaEnvoy(fl *quotaFleet, i, envoys int, conn *grpc.ClientConn, seed uint64) *quotaEnvoy {
	e := &quotaEnvoy{fl: fl, name: "fleet-envoy-" + strconv.Itoa(i), conn: conn, rng: rand.New(rand.NewPCG(seed, uint64(i))),
		buckets: make([]*localBucket, fl.d.buckets), winAdmitted: make([]int32, fl.d.buckets), winDenied: make([]int32, fl.d.buckets)}
	if !inGroupA(i, envoys) {
		e.group = 1
	}
	return e
}

// request decides one request of bucket b at t; e.mu is held.
func (e *quotaEnvoy) request(b int, t time.Time) {
	if w := e.fl.counts.windowOf(t); w != e.win {
		e.flushWindow()
		e.win = w
	}
	lb := e.buckets[b]
	if lb == nil {
		e.hold(b, t)
		// No assignment yet: allowed (no_assignment_behavior), and
		// counted in the bucket's first report, sent at once.
		e.count(b, true)
		return
	}
	ok := lb.admit(t)
	if ok {
		lb.allowed++
	} else {
		lb.denied++
	}
	e.count(b, ok)
}

// hold creates bucket b at t, to be reported at once; e.mu is held.
func (e *quotaEnvoy) hold(b int, t time.Time) {
	lb := &localBucket{lastReport: t}
	lb.usage = &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: e.fl.ids[b], TimeElapsed: &lb.elapsed}
	e.buckets[b] = lb
	e.held = append(e.held, b)
	e.fresh = append(e.fresh, b)
}

// count tallies one decision.
func (e *quotaEnvoy) count(b int, ok bool) {
	e.requests++
	if ok {
		e.admittedN++
		e.winAdmitted[b]++
	} else {
		e.deniedN++
		e.winDenied[b]++
	}
	if b == 0 {
		if ok {
			e.trackedAdmitted++
		} else {
			e.trackedDenied++
		}
	}
}

// flushWindow hands the window's counts to the fleet's; e.mu is held.
func (e *quotaEnvoy) flushWindow() {
	if e.win != 0 {
		e.fl.counts.addWindow(e.win, e.winAdmitted, e.winDenied)
	}
	clear(e.winAdmitted)
	clear(e.winDenied)
}

// step decides the requests that arrived between prev and now, then
// sends the reports due.
func (e *quotaEnvoy) step(ctx context.Context, prev, now time.Time) {
	d := e.fl.d
	dt := now.Sub(prev)
	n := arrivals(e.rng, d.perEnvoy, dt)
	extra := 0
	if e.group == 0 && d.shifted(now) {
		extra = arrivals(e.rng, d.extraTracked(), dt)
	}
	e.mu.Lock()
	for j := range n + extra {
		b := 0
		if j < n {
			b = d.pick(e.rng)
		}
		e.request(b, prev.Add(time.Duration((float64(j)+0.5)/float64(n+extra)*float64(dt))))
	}
	e.mu.Unlock()
	e.fl.counts.addTracked(now, e.group, e.trackedAdmitted, e.trackedDenied)
	e.trackedAdmitted, e.trackedDenied = 0, 0
	e.flushStats()
	e.sendReports(ctx, now)
}

// sendReports sends the reports of new buckets, and the periodic one when
// due, opening the stream first when it is not open or broke.
func (e *quotaEnvoy) sendReports(ctx context.Context, now time.Time) {
	due := !e.nextReport.IsZero() && !now.Before(e.nextReport)
	if due {
		for !now.Before(e.nextReport) {
			e.nextReport = e.nextReport.Add(quotaReportEvery)
		}
	}
	switch {
	case e.stream != nil && !e.broken.Load():
	case e.nextReport.IsZero() && len(e.fresh) > 0:
		// The first request of the first bucket opens the stream.
		e.open(ctx, now)
	case due:
		// A stream that broke, or failed to open, is tried again at each
		// tick of the report timer.
		e.reopen(ctx, now)
		return
	default:
		e.fresh = e.fresh[:0] // reports of a stream that is down are lost
		return
	}
	if e.stream == nil {
		e.fresh = e.fresh[:0]
		return
	}
	for _, b := range e.fresh {
		e.immediate(b)
	}
	e.fresh = e.fresh[:0]
	if due {
		e.periodic(now)
	}
}

// open opens the stream: the first report is due a report interval
// later.
func (e *quotaEnvoy) open(ctx context.Context, now time.Time) {
	sctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, rlqs.ClientMetadata, e.name))
	s, err := rlqspb.NewRateLimitQuotaServiceClient(e.conn).StreamRateLimitQuotas(sctx)
	e.nextReport = now.Add(quotaReportEvery)
	if err != nil {
		cancel()
		e.fl.stats.streamErrors.Add(1)
		return
	}
	e.stream, e.cancel = s, cancel
	e.broken.Store(false)
	e.fl.stats.streamsOpened.Add(1)
	go e.receive(s)
}

// reopen replaces a broken stream, whose first report lists every bucket
// held; what was counted while it was down is lost, as in Envoy.
func (e *quotaEnvoy) reopen(ctx context.Context, now time.Time) {
	e.close()
	e.mu.Lock()
	for _, b := range e.held {
		lb := e.buckets[b]
		lb.allowed, lb.denied, lb.lastReport = 0, 0, now
	}
	e.mu.Unlock()
	e.fresh = e.fresh[:0]
	e.open(ctx, now)
	if e.stream != nil {
		e.periodic(now)
	}
	e.nextReport = now.Add(quotaReportEvery)
}

// close cancels the stream, as Envoy's shutdown does: no last report.
func (e *quotaEnvoy) close() {
	if e.cancel != nil {
		e.cancel()
	}
	e.stream, e.cancel = nil, nil
}

// immediate sends the report of a new bucket's first request.
func (e *quotaEnvoy) immediate(b int) {
	e.mu.Lock()
	lb := e.buckets[b]
	if lb == nil {
		e.mu.Unlock()
		return
	}
	u := &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{BucketId: lb.usage.BucketId, TimeElapsed: &durationpb.Duration{}, NumRequestsAllowed: 1}
	e.mu.Unlock()
	e.send(&rlqspb.RateLimitQuotaUsageReports{Domain: e.fl.domain, BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{u}})
	e.fl.stats.immediate.Add(1)
}

// periodic sends the report of every bucket held.
func (e *quotaEnvoy) periodic(now time.Time) {
	e.mu.Lock()
	e.usages = e.usages[:0]
	for _, b := range e.held {
		lb := e.buckets[b]
		lb.elapsed.Seconds = int64(now.Sub(lb.lastReport) / time.Second)
		lb.usage.NumRequestsAllowed, lb.usage.NumRequestsDenied = lb.allowed, lb.denied
		lb.allowed, lb.denied, lb.lastReport = 0, 0, now
		e.usages = append(e.usages, lb.usage)
	}
	e.mu.Unlock()
	e.send(&rlqspb.RateLimitQuotaUsageReports{Domain: e.fl.domain, BucketQuotaUsages: e.usages})
	e.fl.stats.usages.Add(int64(len(e.usages)))
}

// send sends one report; a failure marks the stream broken.
func (e *quotaEnvoy) send(m *rlqspb.RateLimitQuotaUsageReports) {
	if e.stream == nil || e.broken.Load() {
		return
	}
	if err := e.stream.Send(m); err != nil {
		e.broken.Store(true)
		e.fl.stats.streamErrors.Add(1)
		return
	}
	e.fl.stats.reports.Add(1)
}

// receive applies the stream's assignments until it ends.
func (e *quotaEnvoy) receive(s rlqspb.RateLimitQuotaService_StreamRateLimitQuotasClient) {
	for {
		resp, err := s.Recv()
		if err != nil {
			if e.broken.CompareAndSwap(false, true) && status.Code(err) != codes.Canceled {
				e.fl.stats.recvErrors.Add(1)
				e.fl.lastRecvErr.Store(err.Error())
			}
			return
		}
		e.apply(resp, time.Now())
	}
}

// apply applies one response's actions.
func (e *quotaEnvoy) apply(resp *rlqspb.RateLimitQuotaResponse, now time.Time) {
	st := &e.fl.stats
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, a := range resp.GetBucketAction() {
		k, err := strconv.Atoi(a.GetBucketId().GetBucket()[fleetKey][1:])
		if err != nil || k < 0 || k >= len(e.buckets) || e.buckets[k] == nil {
			st.ignored.Add(1) // Envoy ignores a bucket it does not hold
			continue
		}
		if a.GetAbandonAction() != nil {
			e.forget(k)
			st.abandons.Add(1)
			continue
		}
		e.buckets[k].assign(a.GetQuotaAssignmentAction(), now)
		if a.GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() != nil {
			st.tokenBuckets.Add(1)
		} else {
			st.blankets.Add(1)
		}
	}
}

// forget drops bucket k; e.mu is held.
func (e *quotaEnvoy) forget(k int) {
	e.buckets[k] = nil
	for i, b := range e.held {
		if b == k {
			e.held[i] = e.held[len(e.held)-1]
			e.held = e.held[:len(e.held)-1]
			return
		}
	}
}

// finish hands what is left to the fleet's counts and closes the stream.
func (e *quotaEnvoy) finish() {
	e.mu.Lock()
	e.flushWindow()
	e.mu.Unlock()
	e.flushStats()
	e.close()
}

// flushStats adds the decisions counted since the last call to the
// fleet's.
func (e *quotaEnvoy) flushStats() {
	st := &e.fl.stats
	st.requests.Add(e.requests)
	st.admitted.Add(e.admittedN)
	st.denied.Add(e.deniedN)
	e.requests, e.admittedN, e.deniedN = 0, 0, 0
}

// run simulates the Envoy from start until ctx ends.
func (e *quotaEnvoy) run(ctx context.Context, start time.Time) {
	defer e.finish()
	tickFrom(ctx, start, func(prev, now time.Time) { e.step(ctx, prev, now) })
}

// tickFrom calls step every fleetTick from start until ctx ends, with
// the previous tick's time and this one's: a simulated Envoy's loop.
func tickFrom(ctx context.Context, start time.Time, step func(prev, now time.Time)) {
	if sleepUntil(ctx, start) != nil {
		return
	}
	tick := time.NewTicker(fleetTick)
	defer tick.Stop()
	prev := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			step(prev, now)
			prev = now
		}
	}
}

// staggered returns the start of Envoy i of n, spread evenly over
// spread, so that their reports come at every phase of an interval.
func staggered(t0 time.Time, i, n int, spread time.Duration) time.Time {
	return t0.Add(time.Duration(math.Round(float64(i) / float64(n) * float64(spread))))
}
