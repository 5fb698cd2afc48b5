package envoy

import (
	"context"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// fuzzSeeds are requests that reach every feature of testRules.
func fuzzSeeds() []*pb.RateLimitRequest {
	return []*pb.RateLimitRequest{
		request("test", desc("user", "alice")),
		request("test", desc("user", "a"), desc("tenant", "t"), desc("open", "x"), desc("free", "f")),
		request("test", desc("shadow", "s"), desc("quota_a", "x"), desc("quota_b", "y")),
		request("test", withAddend(desc("premium", "p"), 3), desc("standard", "s"), refund(desc("user", "b"))),
		request("test", withOverride(desc("slide", "x"), 5, typev3.RateLimitUnit_HOUR, 2), withOverride(desc("nomatch", "y"), 1, typev3.RateLimitUnit_SECOND, 0)),
		{Domain: "test", HitsAddend: 4, Descriptors: []*rlv3.RateLimitDescriptor{desc("zero", "z"), desc("detailed", "d"), withAddend(desc("user", "c"), 1<<63)}},
		request("nowhere", desc("user", "a")),
	}
}

// FuzzShouldRateLimit decodes random RateLimitRequests and answers them on
// the in-memory twin: the handler never panics (which would answer
// Internal), never answers a code Envoy does not expect, and an answer has
// exactly one status per descriptor. The first byte chooses whether the
// domain is forced to the rules' one, so that most inputs reach matching.
func FuzzShouldRateLimit(f *testing.F) {
	for _, req := range fuzzSeeds() {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(append([]byte{0}, b...))
	}
	set, err := rules.Parse(map[string][]byte{"test.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		f.Fatal(err)
	}
	now := t0
	mem := limit.NewMemory(limit.MemoryOptions{MaxEntries: 1 << 10, Now: func() time.Time { return now }})
	svc, err := New(fixedRules{set}.Current, mem, Options{Headers: Headers{Style: HeadersIETF}, OverLimitBody: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		req := &pb.RateLimitRequest{}
		if err := proto.Unmarshal(data[1:], req); err != nil {
			return // gRPC refuses it before the handler
		}
		if data[0]&1 == 0 {
			req.Domain = "test"
		}
		now = now.Add(time.Duration(data[0]) * time.Millisecond)
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if c := status.Code(err); c != codes.InvalidArgument {
				t.Fatalf("%v: error %v (code %v), want a decision or InvalidArgument", req, err, c)
			}
			return
		}
		if n, want := len(resp.Statuses), len(req.Descriptors); n != want {
			t.Fatalf("%v: %d statuses for %d descriptors", req, n, want)
		}
		if c := resp.OverallCode; c != pb.RateLimitResponse_OK && c != pb.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("%v: overall code %v", req, c)
		}
		for i, st := range resp.Statuses {
			if st.Code != pb.RateLimitResponse_OK && st.Code != pb.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("%v: status %d code %v", req, i, st.Code)
			}
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("%v: the answer does not marshal: %v", req, err)
		}
	})
}
