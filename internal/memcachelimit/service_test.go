package memcachelimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
)

// ruleSet is a RuleSource of one Set.
type ruleSet struct{ set *rules.Set }

func (r ruleSet) Current() *rules.Set { return r.set }

// Through the gRPC service, as the server runs it: a request that is
// refused charges nothing, and when Memcached is down each rule's
// failure_mode answers.
func TestService(t *testing.T) {
	servers, addrs := start(t, 1)
	set, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(`domain: d
descriptors:
  - key: user
    failure_mode: deny
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    failure_mode: allow
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: ask
    failure_mode: unavailable
    rate_limit: {unit: minute, requests_per_unit: 10}
`)}, rules.Options{Supports: memcachelimit.Supports})
	if err != nil {
		t.Fatal(err)
	}
	clk := newClock(t0)
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now, Timeout: 200 * time.Millisecond})
	svc, err := envoy.New(ruleSet{set}.Current, l, envoy.Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(kv ...string) (*pb.RateLimitResponse, error) {
		req := &pb.RateLimitRequest{Domain: "d"}
		for i := 0; i < len(kv); i += 2 {
			req.Descriptors = append(req.Descriptors, &rlv3.RateLimitDescriptor{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: kv[i], Value: kv[i+1]}}})
		}
		return svc.ShouldRateLimit(context.Background(), req)
	}
	codesOf := func(r *pb.RateLimitResponse) []pb.RateLimitResponse_Code {
		out := []pb.RateLimitResponse_Code{r.OverallCode}
		for _, s := range r.Statuses {
			out = append(out, s.Code)
		}
		return out
	}
	ok, over := pb.RateLimitResponse_OK, pb.RateLimitResponse_OVER_LIMIT
	steps := []struct {
		want      []pb.RateLimitResponse_Code // overall, then each descriptor
		remaining uint32                      // of the path descriptor
	}{
		{[]pb.RateLimitResponse_Code{ok, ok, ok}, 9},
		{[]pb.RateLimitResponse_Code{ok, ok, ok}, 8},
		{[]pb.RateLimitResponse_Code{over, over, ok}, 8}, // user is full: path is not charged
		{[]pb.RateLimitResponse_Code{over, over, ok}, 8},
	}
	for i, s := range steps {
		r, err := ask("user", "alice", "path", "/a")
		if err != nil {
			t.Fatal(err)
		}
		if got := codesOf(r); !slices.Equal(got, s.want) || r.Statuses[1].LimitRemaining != s.remaining {
			t.Fatalf("request %d: codes %v, path remaining %d; want %v, %d", i, got, r.Statuses[1].LimitRemaining, s.want, s.remaining)
		}
	}

	servers[0].Stop()
	r, err := ask("user", "bob", "path", "/b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := codesOf(r), []pb.RateLimitResponse_Code{over, over, ok}; !slices.Equal(got, want) {
		t.Fatalf("memcached down: codes %v, want %v (user denies, path allows)", got, want)
	}
	if _, err := ask("ask", "x"); status.Code(err) != codes.Unavailable {
		t.Fatalf("memcached down, failure_mode unavailable: %v, want Unavailable", err)
	}
}
