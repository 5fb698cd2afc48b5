package server

import (
	"context"
	"sync"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthService is gRPC's health service with watches that shutdown can
// end. A Watch lasts as long as its client wants, and GracefulStop waits
// for every stream: one open watch (grpc-go's client-side health checking
// keeps one per connection) held the exit until the shutdown timeout.
type healthService struct {
	*health.Server
	ending  chan struct{} // closed by endWatches
	endOnce sync.Once
}

func newHealthService() *healthService {
	return &healthService{Server: health.NewServer(), ending: make(chan struct{})}
}

// Watch is health.Server's Watch on a stream whose context also ends with
// endWatches; the client then sees the stream end (Canceled) after the
// statuses sent before, NOT_SERVING among them at shutdown.
func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.ending:
			cancel()
		case <-ctx.Done():
		}
	}()
	return h.Server.Watch(req, &endingWatch{Health_WatchServer: stream, ctx: ctx})
}

// endWatches ends the watches open now and those opened later. Safe to
// call more than once.
func (h *healthService) endWatches() {
	h.endOnce.Do(func() { close(h.ending) })
}

// endingWatch is a watch stream with the context of Watch.
type endingWatch struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w *endingWatch) Context() context.Context { return w.ctx }
