package server

import (
	"context"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/rlqs"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// TestRLQSBesideRLS: the RLQS service answers on the gRPC listener beside
// RLS and is in gRPC health; raising gRPC's message bound for its reports
// leaves RLS requests held to theirs; and shutdown ends its streams with
// Unavailable at once instead of waiting for them until the timeout.
func TestRLQSBesideRLS(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"srv.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	quota, err := rlqs.New(func() *rules.Set { return set }, limit.NewMemory(limit.MemoryOptions{}), rlqs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const shutdownTimeout = time.Minute
	s, stop := running(t, Options{RLQS: quota, MaxMessageBytes: 4 << 10, MaxReportBytes: 1 << 20, ShutdownTimeout: shutdownTimeout})
	conn, err := grpc.NewClient(s.Addrs().GRPC.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	resp, err := healthpb.NewHealthClient(conn).Check(context.Background(),
		&healthpb.HealthCheckRequest{Service: rlqspb.RateLimitQuotaService_ServiceDesc.ServiceName})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health of the RLQS service: %v %v", resp, err)
	}

	before := refusedCounts(t, s)
	big := &pb.RateLimitRequest{Domain: "srv", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: strings.Repeat("x", 5<<10)}}}}}
	_, err = pb.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), big)
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("an RLS request over its bound, below the RLQS one: %v, want ResourceExhausted", err)
	}
	checkRefused(t, before, refusedCounts(t, s), "too_large")

	stream, err := rlqspb.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	report := &rlqspb.RateLimitQuotaUsageReports{Domain: "srv", BucketQuotaUsages: []*rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
		{BucketId: &rlqspb.BucketId{Bucket: map[string]string{"user": "u", "pad": strings.Repeat("x", 900)}}, NumRequestsAllowed: 1},
	}}
	for i := range 8 { // a report well over RLS's 4 KiB
		report.BucketQuotaUsages = append(report.BucketQuotaUsages, &rlqspb.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqspb.BucketId{Bucket: map[string]string{"user": strings.Repeat("y", 600) + string(rune('a'+i))}}})
	}
	if err := stream.Send(report); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("an RLQS report over RLS's bound: %v", err)
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run after cancel, with an RLQS stream open: %v", err)
	}
	if took := time.Since(start); took > shutdownTimeout/2 {
		t.Errorf("shutdown took %v with an RLQS stream open: it waited for the stream", took)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("the RLQS stream ended with %v on shutdown, want Unavailable", err)
	}
}
