package envoytest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Tap sits between Envoy and a rate-limit service: it records every
// RateLimitRequest Envoy sends and forwards it, and Envoy gets the
// service's answer unchanged. It lets a test see exactly which descriptors
// the real Envoy builds for a request, and wait for a call Envoy makes
// after the client has its response (a charge at stream done). It reports
// itself SERVING to Envoy's health check.
type Tap struct {
	rlsv3.UnimplementedRateLimitServiceServer
	// Addr is the gRPC address to give Envoy.
	Addr string

	next  rlsv3.RateLimitServiceClient
	mu    sync.Mutex
	calls []*rlsv3.RateLimitRequest
	done  int // calls answered by the service, since the start
}

// StartTap serves a Tap in front of the rate-limit service at target
// (host:port, plaintext gRPC) until the test ends.
func StartTap(t testing.TB, target string) *Tap {
	t.Helper()
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	tap := &Tap{next: rlsv3.NewRateLimitServiceClient(conn)}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, tap)
	hs := health.NewServer()
	hs.SetServingStatus("ratelimit", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go srv.Serve(l)
	t.Cleanup(func() {
		srv.Stop()
		conn.Close()
	})
	tap.Addr = l.Addr().String()
	return tap
}

// ShouldRateLimit records req and forwards it.
func (tap *Tap) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	tap.mu.Lock()
	tap.calls = append(tap.calls, req)
	tap.mu.Unlock()
	resp, err := tap.next.ShouldRateLimit(ctx, req)
	tap.mu.Lock()
	tap.done++
	tap.mu.Unlock()
	return resp, err
}

// Take returns the requests recorded since the last Take.
func (tap *Tap) Take() []*rlsv3.RateLimitRequest {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	calls := tap.calls
	tap.calls = nil
	return calls
}

// Done returns the number of calls the service has answered so far.
func (tap *Tap) Done() int {
	tap.mu.Lock()
	defer tap.mu.Unlock()
	return tap.done
}

// WaitDone waits until the service has answered n calls since the start,
// failing the test after timeout.
func (tap *Tap) WaitDone(t testing.TB, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for tap.Done() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the rate-limit service answered %d calls in %v, want %d", tap.Done(), timeout, n)
		}
		<-tick.C
	}
}
