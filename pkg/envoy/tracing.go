package envoy

import (
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/tracing"
)

// endTrace ends the request's span with what decided it. It reads sc, so
// it runs before sc is reset; with the span not recording (a request not
// sampled) it reads nothing.
func endTrace(span tracing.Request, sc *scratch, resp *pb.RateLimitResponse, err error) {
	if !span.Recording() {
		span.End(tracing.Outcome{})
		return
	}
	var o tracing.Outcome
	if err != nil {
		o.Err = err
		o.GRPCCode = int(status.Code(err))
	} else {
		o.Code = resp.GetOverallCode().String()
	}
	// The deciding rule is the first descriptor's over its limit; in
	// shadow mode the answer may still be OK, which Code says.
	for i, st := range resp.GetStatuses() {
		if st.GetCode() == pb.RateLimitResponse_OVER_LIMIT && i < len(sc.descs) {
			o.Rule, o.Descriptor = sc.descs[i].metric, i
			break
		}
	}
	if sc.failure.set {
		o.Failure, o.Policy = sc.failure.cause.String(), sc.failure.policy.String()
	}
	span.End(o)
}
