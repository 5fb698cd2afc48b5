package server

import (
	"context"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthService is gRPC's health service with watches that shutdown can
// end. A Watch lasts as long as its client wants, and GracefulStop waits
// for every stream: one open watch (grpc-go's client-side health checking
// keeps one per connection) held the exit until the shutdown timeout.
type healthService struct {
	*health.Server
	ending     context.Context // done once endWatches is called
	endWatches context.CancelFunc
}

func newHealthService() *healthService {
	h := &healthService{Server: health.NewServer()}
	h.ending, h.endWatches = context.WithCancel(context.Background())
	return h
}

// Watch is health.Server's Watch on a stream whose context also ends with
// endWatches, which ends the watches open then and those opened later.
// The client sees the stream end (Canceled) after the statuses sent
// before it, NOT_SERVING among them at shutdown.
func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	defer context.AfterFunc(h.ending, cancel)()
	return h.Server.Watch(req, &endingWatch{Health_WatchServer: stream, ctx: ctx})
}

// endingWatch is a watch stream with the context of Watch.
type endingWatch struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (w *endingWatch) Context() context.Context { return w.ctx }
