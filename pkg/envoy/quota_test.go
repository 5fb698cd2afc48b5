package envoy

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// quotaRules has two quotas and an enforced limit, per day so that no
// window turns during a test.
const quotaRules = `
domain: q
descriptors:
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000}
`

// hookLimiter counts the Evaluate calls of the Limiter it wraps, and runs
// after, once, right after the first call it counts: another instance's
// requests, interleaved between this instance's store calls.
type hookLimiter struct {
	limit.Limiter
	calls atomic.Int64
	after func()
}

func (h *hookLimiter) Evaluate(ctx context.Context, hits []limit.Hit, ds []limit.Decision) (bool, error) {
	blocked, err := h.Limiter.Evaluate(ctx, hits, ds)
	h.calls.Add(1)
	if f := h.after; f != nil {
		h.after = nil
		f()
	}
	return blocked, err
}

// redisInstances starts one Redis and n services over it, each with its
// own client and Limiter, as n floodgate instances sharing a Redis.
func redisInstances(t *testing.T, n int) (*redistest.Server, []*Service, []*hookLimiter) {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"q.yaml": []byte(quotaRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	srv := redistest.Start(t)
	var svcs []*Service
	var hooks []*hookLimiter
	for range n {
		client, err := redislimit.NewClient(redislimit.ClientConfig{URL: srv.Addr})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		store, err := redislimit.New(client, redislimit.Options{Timeout: testStoreTimeout})
		if err != nil {
			t.Fatal(err)
		}
		h := &hookLimiter{Limiter: store}
		svc, err := New(fixedRules{set}.Current, h, Options{})
		if err != nil {
			t.Fatal(err)
		}
		svcs, hooks = append(svcs, svc), append(hooks, h)
	}
	return srv, svcs, hooks
}

func answer(t *testing.T, svc *Service, req *pb.RateLimitRequest) string {
	t.Helper()
	resp, err := svc.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(resp.OverallCode.String(), "_LIMIT") + " " + summaries(resp)
}

// A request in quota mode is decided by the store in one call, so another
// instance's requests cannot slip in between a first decision and a
// second charge. The interleaving that broke the two-call scheme: the
// request finds quota A over and quota B open; before it could charge B,
// another instance refunds A and takes B's last unit. Then the request
// was rejected with both quotas over, although at every instant one of
// them had room (before: B; after: A): in any order of the three
// requests it passes. It must pass, in one store call.
func TestQuotaDecidedInOneCallAcrossInstances(t *testing.T) {
	_, svcs, hooks := redisInstances(t, 2)
	one, two := svcs[0], svcs[1]
	if got := answer(t, two, request("q", desc("quota_a", "x"))); got != "OK OK:0" {
		t.Fatalf("filling quota A: %q", got)
	}
	// quota_b has 5 per day: take 4, leaving one.
	for range 4 {
		answer(t, two, request("q", desc("quota_b", "y")))
	}
	var other []string
	hooks[0].after = func() {
		// The other instance, concurrently, while this one's request is
		// in flight between its store calls (if it had two).
		var wg sync.WaitGroup
		wg.Go(func() {
			other = append(other, answer(t, two, request("q", refund(desc("quota_a", "x")))))
			other = append(other, answer(t, two, request("q", desc("quota_b", "y"))))
		})
		wg.Wait()
	}
	calls := hooks[0].calls.Load()
	got := answer(t, one, request("q", desc("quota_a", "x"), desc("quota_b", "y"), desc("user", "u")))
	if want := "OK OVER:0 OK:0 OK:999"; got != want {
		t.Errorf("the request with quota A over and B open: %q, want %q", got, want)
	}
	if n := hooks[0].calls.Load() - calls; n != 1 {
		t.Errorf("%d store calls for one request in quota mode, want 1", n)
	}
	// The other instance came after: A refunded, B already taken.
	if want := []string{"OK OK:1", "OVER OVER:0"}; strings.Join(other, ",") != strings.Join(want, ",") {
		t.Errorf("the other instance got %q, want %q", other, want)
	}
}

// A request in quota mode, with one quota over and one not, is one
// script call in Redis, counted by Redis itself.
func TestQuotaIsOneRedisCall(t *testing.T) {
	srv, svcs, _ := redisInstances(t, 1)
	scriptCalls := func() int {
		t.Helper()
		info, err := srv.Do("INFO", "commandstats")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, line := range strings.Split(info, "\n") {
			if !strings.HasPrefix(line, "cmdstat_eval") && !strings.HasPrefix(line, "cmdstat_fcall") { // eval, evalsha, eval_ro, evalsha_ro, fcall, fcall_ro
				continue
			}
			_, rest, _ := strings.Cut(line, "calls=")
			v, _, _ := strings.Cut(rest, ",")
			c, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("commandstats line %q: %v", line, err)
			}
			n += c
		}
		return n
	}
	// Quota A over; the script is loaded.
	answer(t, svcs[0], request("q", desc("quota_a", "x")))
	before := scriptCalls()
	got := answer(t, svcs[0], request("q", desc("quota_a", "x"), desc("quota_b", "y"), desc("user", "u")))
	if want := "OK OVER:0 OK:4 OK:999"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if n := scriptCalls() - before; n != 1 {
		t.Errorf("%d script calls in Redis for one request in quota mode, want 1", n)
	}
}

// Many requests in quota mode from two instances at once, quota A over:
// exactly quota B's budget passes, each charging B and the enforced limit
// once, never A.
func TestQuotaConcurrentInstances(t *testing.T) {
	_, svcs, _ := redisInstances(t, 2)
	answer(t, svcs[1], request("q", desc("quota_a", "x")))
	var passed atomic.Int64
	var wg sync.WaitGroup
	for i := range 20 {
		svc := svcs[i%2]
		wg.Go(func() {
			resp, err := svc.ShouldRateLimit(context.Background(), request("q", desc("quota_a", "x"), desc("quota_b", "y"), desc("user", "u")))
			if err != nil {
				t.Error(err)
				return
			}
			if resp.OverallCode == pb.RateLimitResponse_OK {
				passed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := passed.Load(); n != 5 {
		t.Errorf("%d requests passed, want 5 (quota B)", n)
	}
	// Peeks: A full, B empty, the user charged once per request passed.
	if got := answer(t, svcs[0], request("q", withAddend(desc("quota_a", "x"), 0), withAddend(desc("quota_b", "y"), 0), withAddend(desc("user", "u"), 0))); got != "OK OK:0 OK:0 OK:995" {
		t.Errorf("counters after: %q, want A 0, B 0, user 995 left", got)
	}
}
