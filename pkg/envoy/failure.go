package envoy

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// The causes of a store failure, a bounded label value: the answer's
// dynamic metadata and header, Metrics.FailureAnswer, logs and spans.
const (
	causeError       = "error"        // any other failure
	causeDeadline    = "deadline"     // the store's or the caller's deadline passed
	causeCircuitOpen = "circuit_open" // not tried: limit.ErrCircuitOpen
	causeFull        = "store_full"   // no room for a new counter: limit.ErrFull
)

// failureCauseOf classifies err, returned by a store call made with ctx.
// A deadline is known by the error or by ctx's deadline having passed, as
// a store may report its socket's timeout without the context's error.
func failureCauseOf(ctx context.Context, err error) string {
	switch {
	case errors.Is(err, limit.ErrCircuitOpen):
		return causeCircuitOpen
	case errors.Is(err, limit.ErrFull):
		return causeFull
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return causeDeadline
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return causeDeadline
	}
	return causeError
}

// failureAnswer records that a request was answered by the failure
// policy; its zero value, that it was not.
type failureAnswer struct {
	cause  string            // never "" when set
	policy rules.FailureMode // FailureAllow, FailureDeny or FailureUnavailable
}

// storeFailureKey marks in dynamic_metadata an answer of the failure
// policy; an access log reads it with
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:storeFailure:cause)%.
const storeFailureKey = "storeFailure"

// markFailure says in resp's dynamic_metadata, whatever
// Options.DynamicMetadata, and in header when not empty, that the failure
// policy decided resp: {"storeFailure": {"cause": "deadline", "policy":
// "allow"}}, never to be taken for "no rule matched".
func markFailure(resp *pb.RateLimitResponse, f failureAnswer, header string) {
	md := resp.DynamicMetadata
	if md == nil {
		md = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		resp.DynamicMetadata = md
	}
	md.Fields[storeFailureKey] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"cause":  structpb.NewStringValue(f.cause),
		"policy": structpb.NewStringValue(f.policy.String()),
	}})
	if header != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: header, Value: f.cause})
	}
}

// failureLog counts the store failures between two log lines.
type failureLog struct {
	mu     sync.Mutex
	last   time.Time // of the last line, on Options.Now
	unseen int       // failures since the last line
}

// logFailure counts a store failure and logs it, with the failures since
// the previous line, unless that line is less than a second old.
func (s *Service) logFailure(err error) {
	now := s.opts.Now()
	f := &s.failures
	f.mu.Lock()
	f.unseen++
	if !f.last.IsZero() && now.Sub(f.last) < time.Second {
		f.mu.Unlock()
		return
	}
	n := f.unseen
	f.unseen = 0
	f.last = now
	f.mu.Unlock()
	s.opts.Logger.Warn("rate-limit store failed; applying the failure policy", "err", err, "failures", n)
}
