package envoy

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Service answers ShouldRateLimit. It is safe for concurrent use.
type Service struct {
	pb.UnimplementedRateLimitServiceServer

	rules    func() *rules.Set
	limiter  limit.Limiter
	opts     Options
	failures failureLog
	tracer   trace.Tracer // nil with tracing off
	scratch  sync.Pool    // *scratch
}

// New returns a Service that matches each request against the rules
// current returns (such as rules.Watcher.Current: called once per request,
// it must be cheap and safe for concurrent use) and evaluates them with
// one call to l under the request's context; l bounds its own calls.
func New(current func() *rules.Set, l limit.Limiter, opts Options) (*Service, error) {
	if current == nil || l == nil {
		return nil, errors.New("envoy: nil rule source or limiter")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := &Service{rules: current, limiter: l, opts: opts}
	if opts.TracerProvider != nil {
		s.tracer = opts.TracerProvider.Tracer(instrumentation)
	}
	s.scratch.New = func() any { return new(scratch) }
	return s, nil
}

// ShouldRateLimit decides a request (see the package doc). It returns
// InvalidArgument, naming the field, for an empty domain or key, no
// descriptors, a string that is not UTF-8, a request beyond Options.Bounds
// or an invalid limit override; Unavailable when the store failed and the
// failure policy says so; Internal, logged with its stack, if answering
// panicked.
func (s *Service) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (resp *pb.RateLimitResponse, err error) {
	start := time.Now()
	sc := s.scratch.Get().(*scratch)
	var span trace.Span
	var overHTTP bool
	if s.tracer != nil {
		ctx, span, overHTTP = s.startSpan(ctx, req)
	}
	defer func() {
		if p := recover(); p != nil {
			s.opts.Logger.Error("answering a request panicked; it gets Internal", "panic", p, "domain", req.GetDomain(), "stack", string(debug.Stack()))
			resp, err = nil, status.Error(codes.Internal, "internal error")
		}
		d := time.Since(start)
		s.opts.Metrics.Decision(d, resp, err)
		if s.opts.Logger.Enabled(ctx, slog.LevelDebug) {
			s.logDecision(ctx, d, req, sc, resp, err)
		}
		if span != nil {
			endSpan(span, overHTTP, sc, resp, err)
		}
		// Reused after a panic too: reset clears it all.
		sc.reset()
		s.scratch.Put(sc)
	}()
	return s.decide(ctx, req, sc)
}

func (s *Service) decide(ctx context.Context, req *pb.RateLimitRequest, sc *scratch) (*pb.RateLimitResponse, error) {
	if reason, err := s.opts.Bounds.check(req); err != nil {
		s.opts.Metrics.Refused(reason)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	domain := req.GetDomain()
	set := s.rules()
	if set == nil || !set.HasDomain(domain) {
		s.opts.Metrics.DomainNotFound(domain, len(req.Descriptors))
		resp := allOK(len(req.Descriptors))
		if s.opts.DynamicMetadata {
			resp.DynamicMetadata = requestFields(req)
		}
		return resp, nil
	}

	if err := sc.plan(set, req, s.opts.FailureMode, s.opts.QuotaMode); err != nil {
		s.opts.Metrics.Refused(refusedInvalid)
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	blocked, err := s.evaluate(ctx, sc.hits, sc.decisions)
	if err != nil {
		return s.failed(ctx, sc, req, err)
	}
	over := sc.judge(s.opts.NearLimitRatio, false)
	// A blocked call charged no hit.
	s.opts.Metrics.Hits(set, domain, sc.hitsOf(!blocked))
	return s.respond(sc, req, over), nil
}

// evaluate calls the Limiter, unless there are no hits, in a client span
// of its own when tracing.
func (s *Service) evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) (blocked bool, err error) {
	if len(hits) == 0 {
		return false, nil
	}
	var span trace.Span
	if s.tracer != nil {
		ctx, span = s.tracer.Start(ctx, storeSpan, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.Int("ratelimit.store.counters", len(hits))))
	}
	start := time.Now()
	blocked, err = s.limiter.Evaluate(ctx, hits, decisions)
	s.opts.Metrics.StoreCall(time.Since(start), err)
	if span != nil {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
		}
		span.End()
	}
	return blocked, err
}

// failed applies the failure policy after the Limiter returned err (see
// the package doc); the error of Unavailable names the cause.
func (s *Service) failed(ctx context.Context, sc *scratch, req *pb.RateLimitRequest, err error) (*pb.RateLimitResponse, error) {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// The caller went away; nobody reads the answer.
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if errors.Is(err, limit.ErrInvalidSpec) {
		// Not an outage: the limiter refuses a hit we built.
		s.opts.Logger.Error("the limiter refused a hit", "err", err, "domain", req.GetDomain())
		return nil, status.Errorf(codes.Internal, "invalid limit: %v", err)
	}
	s.logFailure(err)
	unavailable := sc.applyFailure()
	over := sc.judge(s.opts.NearLimitRatio, true)
	f := failureAnswer{cause: failureCauseOf(ctx, err), policy: rules.FailureAllow}
	switch {
	case over:
		f.policy = rules.FailureDeny
	case unavailable:
		f.policy = rules.FailureUnavailable
	}
	sc.failure = f
	s.opts.Metrics.FailureAnswer(f.policy, f.cause)
	if f.policy == rules.FailureUnavailable {
		return nil, status.Errorf(codes.Unavailable, "rate-limit store failed (%s): %v", f.cause, err)
	}
	resp := s.respond(sc, req, over)
	markFailure(resp, f, s.opts.StoreFailureHeader)
	return resp, nil
}

// allOK answers n descriptors that no limit applies to.
func allOK(n int) *pb.RateLimitResponse {
	resp := &pb.RateLimitResponse{
		OverallCode: pb.RateLimitResponse_OK,
		Statuses:    make([]*pb.RateLimitResponse_DescriptorStatus, n),
	}
	for i := range resp.Statuses {
		resp.Statuses[i] = &pb.RateLimitResponse_DescriptorStatus{Code: pb.RateLimitResponse_OK}
	}
	return resp
}
