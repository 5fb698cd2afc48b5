package rlqs

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// gatedLimiter holds its first call until gate is closed, and counts the
// hits it is sent.
type gatedLimiter struct {
	limit.Limiter
	gate    chan struct{}
	first   sync.Once
	entered atomic.Int64
	hits    atomic.Int64
	calls   atomic.Int64
}

func (g *gatedLimiter) Evaluate(ctx context.Context, hits []limit.Hit, decs []limit.Decision) (bool, error) {
	g.entered.Add(1)
	g.first.Do(func() { <-g.gate })
	g.hits.Add(int64(len(hits)))
	g.calls.Add(1)
	return g.Limiter.Evaluate(ctx, hits, decs)
}

// TestCoalescedCharges: rounds of many streams waiting together charge
// each counter once, with the sum of their costs; every hit gets its
// counter's decision; a counter the sum overflows is charged what it had
// left and reads spent, for every stream.
func TestCoalescedCharges(t *testing.T) {
	clk := &clock{t: epoch}
	mem := limit.NewMemory(limit.MemoryOptions{Now: clk.Now})
	g := &gatedLimiter{Limiter: mem, gate: make(chan struct{})}
	c := &coalescer{limiter: g}
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute}
	other := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute}
	const streams = 50
	round := func(cost int64) ([]limit.Decision, []bool, error) {
		hits := []limit.Hit{{Key: "hot", Spec: spec, Cost: cost, Mode: limit.Advisory}, {Key: "wide", Spec: other, Cost: cost, Mode: limit.Advisory}}
		decs, failed := make([]limit.Decision, len(hits)), make([]bool, len(hits))
		return decs, failed, c.charge(context.Background(), &charge{hits: hits, decs: decs, failed: failed})
	}
	// The first round holds the store while the others queue.
	var wg sync.WaitGroup
	wg.Go(func() { round(1) })
	for g.entered.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	results := make([][]limit.Decision, streams)
	for i := range streams {
		wg.Go(func() {
			decs, failed, err := round(3)
			if err != nil || failed[0] || failed[1] {
				t.Errorf("round %d: %v, failed %v", i, err, failed)
			}
			results[i] = decs
		})
	}
	for c.queueLen() < streams {
		time.Sleep(time.Millisecond)
	}
	close(g.gate)
	wg.Wait()
	// 2 hits for the first round, 2 merged for the 50 others, and a clip.
	if got := g.hits.Load(); got != 5 {
		t.Errorf("the store was sent %d hits, want 5: each counter once per flush, and the clip", got)
	}
	for i, d := range results {
		if d[0].Allowed != true || d[0].Remaining != 0 {
			t.Errorf("stream %d: hot counter %+v, want it charged what it had left, spent", i, d[0])
		}
		if want := int64(1000 - 1 - 3*streams); d[1].Remaining != want {
			t.Errorf("stream %d: wide counter has %d left, want %d", i, d[1].Remaining, want)
		}
	}
}

// TestCoalescerDoneContext: a round whose stream has ended fails at once,
// without reaching the store.
func TestCoalescerDoneContext(t *testing.T) {
	g := &gatedLimiter{Limiter: limit.NewMemory(limit.MemoryOptions{}), gate: make(chan struct{})}
	close(g.gate)
	c := &coalescer{limiter: g}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	failed := make([]bool, 1)
	hits := []limit.Hit{{Key: "k", Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Second}, Cost: 1}}
	err := c.charge(ctx, &charge{hits: hits, decs: make([]limit.Decision, 1), failed: failed})
	if err == nil || !failed[0] || g.calls.Load() != 0 {
		t.Errorf("charge with a done context: %v, failed %v, %d store calls; want an error, failed, none", err, failed, g.calls.Load())
	}
}

// TestBacklogInFewRounds: reports that queue while a stream's round waits
// for the store (a burst of new buckets, each reported on its own, as
// Envoy does) are taken together by the next round, in one store call,
// not one round each.
func TestBacklogInFewRounds(t *testing.T) {
	set := parseRules(t, `
domain: quota
descriptors:
  - key: tenant
    rate_limit: {unit: minute, requests_per_unit: 100}
`)
	g := &gatedLimiter{Limiter: limit.NewMemory(limit.MemoryOptions{}), gate: make(chan struct{})}
	close(g.gate)
	svc, err := New(func() *rules.Set { return set }, g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := svc.newStream(nil, "envoy-1")
	queue := make(chan *rlqspb.RateLimitQuotaUsageReports, 2*reportsAhead)
	for i := range 2 * reportsAhead {
		queue <- &rlqspb.RateLimitQuotaUsageReports{Domain: "quota", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{{
			BucketId: &rlqspb.BucketId{Bucket: tenant("t" + itoa(int64(i)))}, TimeElapsed: durationpb.New(0), NumRequestsAllowed: 1}}}
	}
	ms := drain(queue, []*rlqspb.RateLimitQuotaUsageReports{<-queue})
	if len(ms) != reportsAhead+1 || len(queue) != reportsAhead-1 {
		t.Fatalf("drain took %d reports and left %d, want %d and %d", len(ms), len(queue), reportsAhead+1, reportsAhead-1)
	}
	if err := st.report(context.Background(), ms...); err != nil {
		t.Fatal(err)
	}
	if calls := g.calls.Load(); calls != 1 || len(st.actions) != len(ms) {
		t.Errorf("%d reports taken together: %d store calls, %d assignments; want 1 call, an assignment each", len(ms), calls, len(st.actions))
	}
}

// shardedLimiter is a Memory whose counters live on two masters, by the
// first letter of their keys, and whose master "b" is down.
type shardedLimiter struct {
	limit.Limiter
	mixed atomic.Int64 // calls with counters of both masters
}

func (s *shardedLimiter) Shard(_ context.Context, counter string) string { return counter[:1] }

func (s *shardedLimiter) Evaluate(ctx context.Context, hits []limit.Hit, decs []limit.Decision) (bool, error) {
	shards := map[string]bool{}
	for _, h := range hits {
		shards[h.Key[:1]] = true
	}
	if len(shards) > 1 {
		s.mixed.Add(1)
	}
	if shards["b"] {
		return false, errors.New("master b is down")
	}
	return s.Limiter.Evaluate(ctx, hits, decs)
}

// TestShardedFailure: on a Cluster, a flush's calls each go to one
// master, so that a master that fails fails the counters it holds, and
// the others are charged.
func TestShardedFailure(t *testing.T) {
	sl := &shardedLimiter{Limiter: limit.NewMemory(limit.MemoryOptions{})}
	c := &coalescer{limiter: sl}
	spec := limit.Spec{Algorithm: limit.FixedWindow, Limit: 100, Window: time.Minute}
	var hits []limit.Hit
	for i := range 300 {
		hits = append(hits, limit.Hit{Key: []string{"a", "b"}[i%2] + itoa(int64(i)), Spec: spec, Cost: 1, Mode: limit.Advisory})
	}
	decs, failed := make([]limit.Decision, len(hits)), make([]bool, len(hits))
	if err := c.charge(context.Background(), &charge{hits: hits, decs: decs, failed: failed}); err == nil {
		t.Errorf("charge: no error, want master b's")
	}
	for i, h := range hits {
		if want := h.Key[0] == 'b'; failed[i] != want || !want && decs[i].Remaining != 99 {
			t.Errorf("hit %s: failed %v, %+v; want failed only on master b, charged elsewhere", h.Key, failed[i], decs[i])
		}
	}
	if n := sl.mixed.Load(); n != 0 {
		t.Errorf("%d calls mixed the masters' counters", n)
	}
}

// queueLen is how many rounds wait for the next flush.
func (c *coalescer) queueLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}
