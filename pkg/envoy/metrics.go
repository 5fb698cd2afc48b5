package envoy

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Metrics is told what the request path does, to count it: Options.Metrics.
// A Service calls it on every request, from as many goroutines as there
// are requests, so an implementation must be safe for concurrent use and
// must not block; it must not keep what Hits is given past the call: the
// slice and the resolutions it points to are reused by the next request.
// The binary counts in Prometheus and statsd (internal/rlsmetrics).
type Metrics interface {
	// Decision records an answer and how long it took: resp, or err when
	// the call failed (its gRPC status says how).
	Decision(d time.Duration, resp *pb.RateLimitResponse, err error)
	// Refused records a request refused before any decision, for reason:
	// one of the Refused constants.
	Refused(reason string)
	// DomainNotFound records a request for a domain no rule declares,
	// answered OK, with its number of descriptors.
	DomainNotFound(domain string, descriptors int)
	// Hits records what a decided request of domain did to each of its
	// descriptors that a limit decided, refunds excepted, resolved in set.
	Hits(set *rules.Set, domain string, hits []DescriptorHits)
	// StoreCall records a call to the Limiter, how long it took and its
	// error.
	StoreCall(d time.Duration, err error)
	// FailureAnswer records a request answered by the failure policy
	// after the Limiter failed: the policy applied (rules.FailureAllow,
	// FailureDeny or FailureUnavailable) and the cause, one of
	// "deadline", "circuit_open", "store_full" and "error" (the same
	// words as the answer's dynamic metadata).
	FailureAnswer(policy rules.FailureMode, cause string)
	// GlobalShadow records a request answered OK only because of
	// Options.ShadowMode.
	GlobalShadow()
}

// DescriptorHits is what a decided request did to one of its
// descriptors, as Metrics.Hits receives it.
type DescriptorHits struct {
	// Resolved is the descriptor as the rules resolved it: its entries,
	// its rule (nil for an override that matched none), whether it
	// carried a limit override, its mode and its limits.
	Resolved *rules.Resolved
	// Rule names the rule the hits count against: its path, or
	// "(override)" for an override that matched no rule.
	Rule string
	// Cost is how many hits the descriptor asked for: the request's
	// hits_addend, or the descriptor's own (Usage), at most 2^53.
	Cost int64
	// Usage reports that Cost is the descriptor's own hits_addend: usage
	// reported after the fact, charged whatever the answer.
	Usage bool
	// Over reports that a limit denied the hits, a limit in shadow mode
	// included (Resolved.Mode is then limit.Advisory).
	Over bool
	// Near is how many hits reached Options.NearLimitRatio of a limit's
	// capacity as they were counted, the most of any of its limits; it
	// may exceed Cost when earlier requests already had.
	Near int64
	// Charged reports that the Limiter charged the request's admitted
	// hits: false when the request was refused, by this descriptor or
	// another (a request is charged all or nothing).
	Charged bool
}

// Reasons for Metrics.Refused. The service refuses requests beyond its
// RequestBounds, malformed ones (an empty domain, key or descriptor list;
// a string that is not UTF-8) and invalid ones (a bad limit override);
// Codec's handler refuses messages that do not decode and those over its
// bound; a listener refuses calls of methods it does not serve.
const (
	RefusedMalformed     = "malformed"
	RefusedTooLarge      = "too_large"
	RefusedUnknownMethod = "unknown_method"
	RefusedBounds        = "bounds"
	RefusedInvalid       = "invalid"
)
