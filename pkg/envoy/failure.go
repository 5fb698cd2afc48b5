package envoy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// failureCause is why a store call failed, a bounded label value.
type failureCause uint8

const (
	// causeError is any failure that is neither of the others: a refused
	// connection, an error reply, a lost connection.
	causeError failureCause = iota
	// causeDeadline: the store's deadline (or the caller's when sooner)
	// passed before the store answered.
	causeDeadline
	// causeCircuitOpen: the store was not tried, its circuit breaker being
	// open (limit.ErrCircuitOpen).
	causeCircuitOpen
	// causeFull: the in-memory store had no room for a new counter
	// (limit.ErrFull).
	causeFull
)

var failureCauseNames = [...]string{"error", "deadline", "circuit_open", "store_full"}

// String returns the cause's name: "error", "deadline", "circuit_open" or
// "store_full".
func (c failureCause) String() string {
	if int(c) < len(failureCauseNames) {
		return failureCauseNames[c]
	}
	return fmt.Sprintf("failureCause(%d)", uint8(c))
}

// failureCauseOf classifies err, returned by a store call made with ctx.
// A deadline is recognised by the error or, since a store may report its
// socket's timeout without wrapping the context's error, by ctx's deadline
// having passed.
func failureCauseOf(ctx context.Context, err error) failureCause {
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

// failureAnswer records that a request was answered by the failure policy.
type failureAnswer struct {
	set    bool
	cause  failureCause
	policy rules.FailureMode // FailureAllow, FailureDeny or FailureUnavailable
}

// storeFailureKey is the name, in an answer's dynamic_metadata, of the
// struct that says the answer comes from the failure policy. Envoy stores
// it under envoy.filters.http.ratelimit, so an access log reads it with
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:storeFailure:cause)%.
const storeFailureKey = "storeFailure"

// markFailure tells, in resp's dynamic_metadata and in the optional
// header named header, that resp was decided by the failure policy, not by
// the store: {"storeFailure": {"cause": "deadline", "policy": "allow"}}.
// It is set whatever Options.DynamicMetadata says, so that such an answer
// can never be taken for "no rule matched".
func markFailure(resp *pb.RateLimitResponse, f failureAnswer, header string) {
	md := resp.DynamicMetadata
	if md == nil {
		md = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		resp.DynamicMetadata = md
	}
	md.Fields[storeFailureKey] = structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"cause":  structpb.NewStringValue(f.cause.String()),
		"policy": structpb.NewStringValue(f.policy.String()),
	}})
	if header != "" {
		resp.ResponseHeadersToAdd = append(resp.ResponseHeadersToAdd, &corev3.HeaderValue{Key: header, Value: f.cause.String()})
	}
}
