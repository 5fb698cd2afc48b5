package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	fgserver "github.com/floodgate/floodgate/internal/server"
)

// shouldRateLimit is the full gRPC method name Envoy calls.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// asEnvoy is how the tool's clients of a server under measurement dial:
// in plain text, with flow-control windows fixed as the servers' are. A
// grpc-go client sizing them by bandwidth-delay estimates sends a PING
// with the first DATA frame after its last estimate's was answered, which
// below a few thousand calls a second per connection is every call, and
// each server would spend a write answering it; Envoy, the client
// measured for, sends none.
func asEnvoy(more ...grpc.DialOption) []grpc.DialOption {
	return append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithStaticStreamWindowSize(fgserver.FlowWindow), grpc.WithStaticConnWindowSize(fgserver.FlowWindow)}, more...)
}

// dial opens n client connections to addr (asEnvoy); callers are spread
// over them round robin, as Envoy's worker threads each hold their own.
func dial(addr string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		c, err := grpc.NewClient(addr, asEnvoy()...)
		if err != nil {
			closeAll(conns)
			return nil, fmt.Errorf("grpc: %s: %w", addr, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

func closeAll(conns []*grpc.ClientConn) {
	for _, c := range conns {
		c.Close()
	}
}

// loadResult is what the callers saw during one run.
type loadResult struct {
	// Elapsed runs from the first send to the last answer.
	Elapsed time.Duration
	// OK and OverLimit count answers by overall code (through Envoy: HTTP
	// 200 and 429); Errors counts failed calls (including UNAVAILABLE when
	// the server's store failed, and any other HTTP status).
	OK, OverLimit, Errors int64
	// FirstError is one of the errors, for the report.
	FirstError error
	// Samples holds every call's latency in nanoseconds, unsorted. In open
	// loop a call's latency runs from its scheduled send time, so that a
	// server falling behind shows in the figures instead of slowing the
	// schedule down (no coordinated omission).
	Samples []int64
}

// Requests is the number of answered calls: the decisions.
func (r loadResult) Requests() int64 { return r.OK + r.OverLimit }

// tally is what one caller saw. Each caller owns its tally, so recording
// takes no lock; collect merges them once the run is over.
type tally struct {
	samples        []int64
	ok, over, errs int64
	firstErr       error
}

// outcome classifies one answer for a tally.
type outcome int

const (
	answeredOK outcome = iota
	answeredOverLimit
	failed
)

// record counts one call that took from since until now.
func (t *tally) record(since time.Time, o outcome, err error) {
	t.samples = append(t.samples, int64(time.Since(since)))
	switch o {
	case answeredOK:
		t.ok++
	case answeredOverLimit:
		t.over++
	default:
		t.errs++
		if t.firstErr == nil {
			t.firstErr = err
		}
	}
}

// collect merges the callers' tallies into the result of a run that
// lasted elapsed.
func collect(tallies []*tally, elapsed time.Duration) loadResult {
	res := loadResult{Elapsed: elapsed}
	n := 0
	for _, t := range tallies {
		n += len(t.samples)
	}
	res.Samples = make([]int64, 0, n)
	for _, t := range tallies {
		res.Samples = append(res.Samples, t.samples...)
		res.OK += t.ok
		res.OverLimit += t.over
		res.Errors += t.errs
		if res.FirstError == nil {
			res.FirstError = t.firstErr
		}
	}
	return res
}

// drive runs n callers for d and returns how long they ran, from the
// start to the last answer. With rate 0 each caller sends as soon as it
// has its previous answer (closed loop); otherwise the callers share one
// fixed schedule of rate sends per second (open loop) and send gets the
// scheduled time, from which latency counts. Sends stop at d; calls in
// flight are awaited. send(i, since) makes caller i's call.
func drive(ctx context.Context, n int, rate float64, d time.Duration, send func(i int, since time.Time)) time.Duration {
	var slot atomic.Int64 // open loop: the next scheduled send
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for i := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				if rate == 0 {
					now := time.Now()
					if !now.Before(deadline) {
						return
					}
					send(i, now)
					continue
				}
				at := start.Add(time.Duration(float64(slot.Add(1)-1) * float64(time.Second) / rate))
				if !at.Before(deadline) {
					return
				}
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait)
				}
				send(i, at)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// caller is one of the scenario's concurrent gRPC callers. It owns its
// request and response messages and reuses them for every call.
type caller struct {
	tally
	conn   *grpc.ClientConn
	req    *pb.RateLimitRequest
	resp   pb.RateLimitResponse
	rng    *rand.Rand
	values []string
}

// next sets a fresh random value on every descriptor.
func (c *caller) next() {
	for _, d := range c.req.Descriptors {
		d.Entries[0].Value = c.values[c.rng.IntN(len(c.values))]
	}
}

// call sends the request and records the answer and the latency measured
// from since.
func (c *caller) call(ctx context.Context, since time.Time) {
	err := c.conn.Invoke(ctx, shouldRateLimit, c.req, &c.resp)
	switch {
	case err != nil:
		c.record(since, failed, err)
	case c.resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT:
		c.record(since, answeredOverLimit, nil)
	default:
		c.record(since, answeredOK, nil)
	}
}

// runLoad drives the scenario over gRPC for d, closed or open loop (see
// drive).
func runLoad(ctx context.Context, conns []*grpc.ClientConn, sc scenario, values []string, d time.Duration) loadResult {
	callers := make([]*caller, sc.Concurrency)
	tallies := make([]*tally, len(callers))
	seed := rand.Uint64()
	for i := range callers {
		callers[i] = &caller{
			tally:  tally{samples: make([]int64, 0, 1024)},
			conn:   conns[i%len(conns)],
			req:    sc.requestTemplate(),
			rng:    rand.New(rand.NewPCG(seed, uint64(i))),
			values: values,
		}
		tallies[i] = &callers[i].tally
	}
	elapsed := drive(ctx, len(callers), sc.Rate, d, func(i int, since time.Time) {
		c := callers[i]
		c.next()
		c.call(ctx, since)
	})
	return collect(tallies, elapsed)
}
