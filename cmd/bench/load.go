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
)

// shouldRateLimit is the full gRPC method name Envoy calls.
const shouldRateLimit = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// dial opens n client connections to addr; callers are spread over them
// round robin, as Envoy's worker threads each hold their own.
func dial(addr string, n int) ([]*grpc.ClientConn, error) {
	conns := make([]*grpc.ClientConn, 0, n)
	for range n {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
	// OK and OverLimit count answers by overall code; Errors counts failed
	// calls (including UNAVAILABLE when the server's store failed).
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

// caller is one of the scenario's concurrent callers. It owns its request
// and response messages and reuses them for every call.
type caller struct {
	conn    *grpc.ClientConn
	req     *pb.RateLimitRequest
	resp    pb.RateLimitResponse
	rng     *rand.Rand
	values  []string
	samples []int64

	ok, over, errs int64
	firstErr       error
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
	c.samples = append(c.samples, int64(time.Since(since)))
	switch {
	case err != nil:
		c.errs++
		if c.firstErr == nil {
			c.firstErr = err
		}
	case c.resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT:
		c.over++
	default:
		c.ok++
	}
}

// runLoad drives the scenario for d: closed loop (each caller sends as soon
// as it has its answer) or, with sc.Rate, open loop on a fixed schedule
// shared by the callers. Sends stop at d; calls in flight are awaited.
func runLoad(ctx context.Context, conns []*grpc.ClientConn, sc scenario, values []string, d time.Duration) loadResult {
	callers := make([]*caller, sc.Concurrency)
	seed := rand.Uint64()
	for i := range callers {
		callers[i] = &caller{
			conn:    conns[i%len(conns)],
			req:     sc.requestTemplate(),
			rng:     rand.New(rand.NewPCG(seed, uint64(i))),
			values:  values,
			samples: make([]int64, 0, 1024),
		}
	}

	var slot atomic.Int64 // open loop: the next scheduled send
	var wg sync.WaitGroup
	start := time.Now()
	deadline := start.Add(d)
	for _, c := range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				c.next()
				if sc.Rate == 0 {
					now := time.Now()
					if !now.Before(deadline) {
						return
					}
					c.call(ctx, now)
					continue
				}
				at := start.Add(time.Duration(float64(slot.Add(1)-1) * float64(time.Second) / sc.Rate))
				if !at.Before(deadline) {
					return
				}
				if wait := time.Until(at); wait > 0 {
					time.Sleep(wait)
				}
				c.call(ctx, at)
			}
		})
	}
	wg.Wait()

	res := loadResult{Elapsed: time.Since(start)}
	n := 0
	for _, c := range callers {
		n += len(c.samples)
	}
	res.Samples = make([]int64, 0, n)
	for _, c := range callers {
		res.Samples = append(res.Samples, c.samples...)
		res.OK += c.ok
		res.OverLimit += c.over
		res.Errors += c.errs
		if res.FirstError == nil {
			res.FirstError = c.firstErr
		}
	}
	return res
}
