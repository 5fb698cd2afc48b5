package envoy

import (
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Metrics is told what each request did (Options.Metrics), concurrently:
// an implementation must be safe for concurrent use, must not block, and
// must not keep what Hits is given, which the next request reuses.
type Metrics interface {
	// Decision records an answer, or the call's gRPC error, and its time.
	Decision(d time.Duration, resp *pb.RateLimitResponse, err error)
	// Refused records a request refused before any decision, for its
	// reason: "malformed" (it does not decode, a string is not UTF-8, the
	// domain, a key or the descriptors are empty, or Codec.VetJSON refused
	// it), "too_large" (beyond Codec.MaxRequestBytes), "bounds" (beyond
	// Options.Bounds), "invalid" (a limit override the rules refuse), or
	// "unknown_method" (JSONHandler's, for a method other than POST; a
	// server's own listeners may give it too).
	Refused(reason string)
	// DomainNotFound records a request, answered OK, for a domain no rule
	// declares.
	DomainNotFound(domain string, descriptors int)
	// Hits records what a decided request did to each descriptor a limit
	// decided, refunds excepted.
	Hits(set *rules.Set, domain string, hits []DescriptorHits)
	// StoreCall records a call to the Limiter, its time and error.
	StoreCall(d time.Duration, err error)
	// FailureAnswer records a request answered by the failure policy after
	// the Limiter failed, and the cause: "deadline", "circuit_open",
	// "store_full" or "error", as in the answer's dynamic metadata.
	FailureAnswer(policy rules.FailureMode, cause string)
	// GlobalShadow records a request answered OK only because of
	// Options.ShadowMode.
	GlobalShadow()
}

// noMetrics counts nothing: Options.Metrics when nil.
type noMetrics struct{}

func (noMetrics) Decision(time.Duration, *pb.RateLimitResponse, error) {}
func (noMetrics) Refused(string)                                       {}
func (noMetrics) DomainNotFound(string, int)                           {}
func (noMetrics) Hits(*rules.Set, string, []DescriptorHits)            {}
func (noMetrics) StoreCall(time.Duration, error)                       {}
func (noMetrics) FailureAnswer(rules.FailureMode, string)              {}
func (noMetrics) GlobalShadow()                                        {}

// DescriptorHits is what a decided request did to one descriptor.
type DescriptorHits struct {
	// Resolved is the descriptor as the rules resolved it.
	Resolved *rules.Resolved
	// Rule names the rule the hits count against: its path, or
	// "(override)" for an override that matched no rule.
	Rule string
	// Cost is the hits asked for: the request's hits_addend, or the
	// descriptor's own (Usage), at most 2^53.
	Cost int64
	// Usage reports that Cost is the descriptor's own hits_addend,
	// charged whatever the answer.
	Usage bool
	// Over reports that a limit denied the hits, in shadow mode too.
	Over bool
	// Near is how many hits reached Options.NearLimitRatio of a limit's
	// capacity, the most of any of its limits.
	Near int64
	// Charged reports that the admitted hits were charged: not when any
	// descriptor refused the request.
	Charged bool
}

// The reasons given to Metrics.Refused, which documents them.
const (
	refusedMalformed     = "malformed"
	refusedTooLarge      = "too_large"
	refusedUnknownMethod = "unknown_method"
	refusedBounds        = "bounds"
	refusedInvalid       = "invalid"
)
