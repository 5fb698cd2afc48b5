package server

import (
	"context"
	"fmt"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// HealthServices are the gRPC health service names the server reports: ""
// (the whole server), "ratelimit" (the reference server's) and the RLS
// service's full name.
var HealthServices = []string{"", "ratelimit", pb.RateLimitService_ServiceDesc.ServiceName}

// HealthPollInterval is how often gRPC health follows the store and the
// rules while they can change readiness (/healthcheck asks at each request).
const HealthPollInterval = 250 * time.Millisecond

// Serving reports whether health is SERVING: the server runs and is not
// shutting down, the store is ready as Options.StoreReadiness asks, and,
// with Options.HealthRequiresRules, the rules declare a domain.
func (s *Server) Serving() bool { return s.notServing() == "" }

// notServing says why health is NOT_SERVING; "" when it is SERVING.
func (s *Server) notServing() string {
	if !s.serving.Load() {
		return "the server is not running or is shutting down"
	}
	if s.storeDecides() {
		h := s.opts.Store()
		if h.Reached {
			s.reached.Store(true)
		}
		switch {
		case !s.reached.Load():
			return fmt.Sprintf("store %s has not answered since start; readiness waits until it has", h.Name)
		case s.opts.StoreReadiness == StoreAlways && !h.Healthy:
			return fmt.Sprintf("store %s is unhealthy; readiness requires it always", h.Name)
		}
	}
	if s.opts.HealthRequiresRules && len(s.current().Domains()) == 0 {
		return "the rules declare no domain; readiness requires one"
	}
	return ""
}

// storeDecides reports whether the store can still change readiness.
func (s *Server) storeDecides() bool {
	mode := s.opts.StoreReadiness
	return s.opts.Store != nil && (mode == StoreAlways || mode == StoreReachedOnce && !s.reached.Load())
}

// followsHealth reports whether health can still change while the server
// runs, so that gRPC health must be polled.
func (s *Server) followsHealth() bool { return s.storeDecides() || s.opts.HealthRequiresRules }

// setServing starts or stops serving; Run and shutdown log the change.
func (s *Server) setServing(on bool) {
	s.serving.Store(on)
	s.updateHealth(false)
}

// updateHealth sets the gRPC health statuses from Serving, logging a
// change with its reason if asked.
func (s *Server) updateHealth(logChange bool) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	st, why := healthpb.HealthCheckResponse_SERVING, s.notServing()
	if why != "" {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	if st == s.grpcState {
		return
	}
	s.grpcState = st
	for _, name := range s.healthNames {
		s.health.SetServingStatus(name, st)
	}
	switch {
	case !logChange || !s.serving.Load():
		// Start and shutdown have their own lines.
	case why != "":
		s.opts.Logger.Warn("health changed", "status", st.String(), "reason", why)
	default:
		s.opts.Logger.Info("health changed", "status", st.String())
	}
}

// followHealth updates gRPC health until ctx ends or nothing can change it.
func (s *Server) followHealth(ctx context.Context) {
	tick := time.NewTicker(HealthPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.updateHealth(true)
			if !s.followsHealth() {
				return // the store was reached and nothing else can change
			}
		}
	}
}

// healthService is gRPC's health service with watches that shutdown can
// end: GracefulStop waits for every stream, and a watch lasts as long as
// its client wants.
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
// endWatches: the client sees it end (Canceled) after the statuses sent.
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
