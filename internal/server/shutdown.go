package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// shutdown turns health NOT_SERVING, waits DrainDelay, then stops the
// servers gracefully within ShutdownTimeout, after which it closes every
// connection left, whatever its state. It returns ErrRequestsCut (wrapped)
// when requests were in flight at the timeout.
func (s *Server) shutdown() error {
	s.setServing(false)
	s.opts.Logger.Info("shutting down: health is NOT_SERVING, finishing in-flight requests",
		"drain_delay", s.opts.DrainDelay, "timeout", s.opts.ShutdownTimeout)
	time.Sleep(s.opts.DrainDelay)
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	if s.opts.RLQS != nil {
		// RLQS streams last as long as their Envoy.
		s.opts.RLQS.Shutdown()
	}

	// cut is the most requests in flight when the timeout passed.
	var cut atomic.Int64
	noteCut := func() int64 {
		n := s.inflight.Load()
		for c := cut.Load(); n > c && !cut.CompareAndSwap(c, n); c = cut.Load() {
		}
		return n
	}
	var wg sync.WaitGroup
	for _, l := range s.listeners {
		if l.http == nil {
			wg.Go(func() { s.stopGRPC(ctx, l.conns, noteCut) })
		} else {
			wg.Go(func() { s.stopHTTP(ctx, l.http, l.conns, noteCut) })
		}
	}
	wg.Wait()
	if n := cut.Load(); n > 0 {
		s.opts.Logger.Warn("stopped, cutting in-flight requests", "cut", n)
		return fmt.Errorf("%w: %d", ErrRequestsCut, n)
	}
	s.opts.Logger.Info("stopped")
	return nil
}

// stopGRPC stops the gRPC server gracefully until ctx ends, then cuts it.
// gRPC's Stop and GracefulStop wait for every handshake (TLS, HTTP/2
// preface) to end, which a silent client makes last the whole connection
// timeout: closing the socket on the listener's side ends it at once.
func (s *Server) stopGRPC(ctx context.Context, l *connListener, noteCut func() int64) {
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	// GracefulStop sends the others their GOAWAY only once every handshake
	// has ended: those stalled in theirs are closed as they pass silentGrace.
	stalled := time.NewTicker(silentGrace / 4)
	defer stalled.Stop()
	for waiting := true; waiting; {
		l.closeHandshaking()
		select {
		case <-done:
			return
		case <-ctx.Done():
			waiting = false
		case <-stalled.C:
			// By the first tick health watches have sent NOT_SERVING.
			s.health.endWatches()
		}
	}
	s.opts.Logger.Warn("shutdown timeout: cutting the remaining gRPC requests and connections",
		"in_flight", noteCut(), "connections", l.open())
	l.closeAll()
	s.grpc.Stop()
	// A handler that ignores its cancelled context must not hold the exit.
	select {
	case <-done:
	case <-time.After(time.Second):
		s.opts.Logger.Warn("shutdown: gRPC handlers still running after their connections closed; exiting anyway")
	}
}

// stopHTTP shuts srv, serving l, down until ctx ends, then cuts it.
func (s *Server) stopHTTP(ctx context.Context, srv *http.Server, l *connListener, noteCut func() int64) {
	l.closeSilent(time.Now())
	if err := srv.Shutdown(ctx); err != nil {
		noteCut()
		s.opts.Logger.Warn("shutdown timeout: cutting the remaining HTTP requests and connections",
			"listener", l.name, "connections", l.open(), "err", err)
		srv.Close()
		// And those accepted that http.Server does not track yet.
		l.closeAll()
	}
}
