package server

import (
	"context"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// BenchmarkGRPCCall is one ShouldRateLimit through the real gRPC listener
// and client on loopback, in-memory store: what the listener's handling of
// a request (codec, handler, connection tracking) costs around the
// service.
func BenchmarkGRPCCall(b *testing.B) {
	s, _ := running(b, Options{})
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := pb.NewRateLimitServiceClient(conn)
	req := &pb.RateLimitRequest{Domain: "srv", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "other", Value: "x"}}}}}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
