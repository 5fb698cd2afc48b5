package envoy_test

import (
	"context"
	"fmt"
	"log"
	"net/http"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// A program serving Envoy's rate-limit service on the in-memory limiter:
// one request a minute per user.
func Example() {
	set, err := rules.Parse(map[string][]byte{"shop.yaml": []byte(`
domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
`)}, rules.Options{})
	if err != nil {
		log.Fatal(err)
	}
	svc, err := envoy.New(func() *rules.Set { return set }, limit.NewMemory(limit.MemoryOptions{}), envoy.Options{})
	if err != nil {
		log.Fatal(err)
	}
	codec := &envoy.Codec{}
	server := grpc.NewServer(grpc.ForceServerCodecV2(codec))
	codec.Register(server, svc, nil)
	mux := http.NewServeMux()
	mux.Handle("/json", codec.JSONHandler(svc, nil))
	// server.Serve(listener) answers Envoy, http.Serve(listener, mux) the
	// reference server's /json; the service answers a call made directly
	// too.
	req := &pb.RateLimitRequest{Domain: "shop", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "alice"}}}}}
	for range 2 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.OverallCode, resp.Statuses[0].LimitRemaining)
	}
	// Output:
	// OK 0
	// OVER_LIMIT 0
}
