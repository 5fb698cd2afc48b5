package rlqs

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// ClientMetadata is the gRPC metadata key naming a stream's Envoy in the
// logs (the filter's rlqs_server.initial_metadata), else its peer address.
const ClientMetadata = "x-rlqs-client"

// Service serves StreamRateLimitQuotas. It is safe for concurrent use.
type Service struct {
	rlqspb.UnimplementedRateLimitQuotaServiceServer

	rules  func() *rules.Set
	opts   Options
	demand limit.Spec // DemandSpec
	store  *coalescer
	bufs   sync.Pool // of *charge, shared by the streams' rounds

	streams, buckets atomic.Int64
	ids              atomic.Uint64
	done             chan struct{}
	stop             sync.Once
	storeLogged      atomic.Int64 // unix ns
}

// New returns a Service assigning quotas from the rules current returns
// (as rules.Watcher.Current; nil for none yet: every bucket is allowed)
// and the counters of l, or the error of an option it refuses.
func New(current func() *rules.Set, l limit.Limiter, opts Options) (*Service, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if opts.Metrics == nil {
		opts.Metrics, _ = NewMetrics(prometheus.NewRegistry())
	}
	s := &Service{rules: current, opts: opts, demand: DemandSpec(opts),
		store: &coalescer{limiter: l, every: opts.ChargeInterval}, done: make(chan struct{})}
	s.bufs.New = func() any { return &charge{} }
	return s, nil
}

// Shutdown ends every stream with Unavailable, so that each Envoy reopens
// its stream on another instance, and refuses new ones. It returns at
// once; calls after the first do nothing.
func (s *Service) Shutdown() {
	s.stop.Do(func() { close(s.done) })
}

var errShutdown = status.Error(codes.Unavailable, "rlqs: this floodgate is shutting down; report to another instance")

// StreamRateLimitQuotas serves one Envoy's stream for one domain until it
// ends, Shutdown is called, or the stream breaks a rule: more streams than
// MaxStreams (ResourceExhausted), a report without a domain or changing
// it, or not a report at all (InvalidArgument), no report for IdleTimeout
// (DeadlineExceeded). A panic is logged and ends the stream with Internal.
func (s *Service) StreamRateLimitQuotas(gs rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.opts.Logger.Error("rlqs: serving a stream panicked; it ends with Internal", "panic", p, "stack", string(debug.Stack()))
			err = status.Error(codes.Internal, "rlqs: internal error")
		}
	}()
	select {
	case <-s.done:
		return errShutdown
	default:
	}
	if n := s.streams.Add(1); n > int64(s.opts.MaxStreams) {
		s.streams.Add(-1)
		s.opts.Metrics.refuse(refusedStreams)
		return status.Errorf(codes.ResourceExhausted, "rlqs: %d streams open, the bound (max streams) is %d", n-1, s.opts.MaxStreams)
	}
	s.opts.Metrics.streams.Inc()
	st := s.newStream(gs, clientName(gs))
	defer func() {
		s.releaseBuckets(len(st.buckets))
		s.streams.Add(-1)
		s.opts.Metrics.streams.Dec()
	}()
	s.opts.Logger.Debug("rlqs: stream opened", "stream", st.id, "client", st.client)
	err = st.run(gs.Context())
	s.opts.Logger.Debug("rlqs: stream ended", "stream", st.id, "client", st.client, "domain", st.domain, "err", err)
	return err
}

func clientName(gs rlqspb.RateLimitQuotaService_StreamRateLimitQuotasServer) string {
	ctx := gs.Context()
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(ClientMetadata); len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return "unknown"
}

// reserveBucket takes room for one bucket among MaxBuckets, or reports
// that there is none.
func (s *Service) reserveBucket() bool {
	if s.buckets.Add(1) > int64(s.opts.MaxBuckets) {
		s.buckets.Add(-1)
		return false
	}
	s.opts.Metrics.buckets.Inc()
	return true
}

func (s *Service) releaseBuckets(n int) {
	s.buckets.Add(int64(-n))
	s.opts.Metrics.buckets.Sub(float64(n))
}

// storeFailed counts a store failure and logs it, at most once a second
// over all streams.
func (s *Service) storeFailed(err error, buckets int) {
	s.opts.Metrics.storeErrors.Inc()
	now := time.Now().UnixNano()
	last := s.storeLogged.Load()
	if now-last < int64(time.Second) || !s.storeLogged.CompareAndSwap(last, now) {
		return
	}
	s.opts.Logger.Warn("rlqs: the store failed; the buckets get their failure mode's assignment",
		"buckets", buckets, "err", fmt.Errorf("rlqs: charging reports: %w", err))
}
