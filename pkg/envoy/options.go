package envoy

import (
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Options tune a Service. The zero value is usable: a zero field means its
// value in DefaultOptions, and no shadow mode, headers, body, logs, metrics
// or traces.
type Options struct {
	// ShadowMode makes every answer's overall code OK while descriptors
	// keep their real statuses and counters count as when enforcing (the
	// reference server's SHADOW_MODE).
	ShadowMode bool
	// NearLimitRatio is the share of a limit's capacity above which an
	// admitted hit counts as near the limit in the metrics. It must be in
	// [0, 1].
	NearLimitRatio float64
	// FailureMode is what to do when the Limiter fails, for rules that do
	// not say (rules.Rule.FailureMode); rules.FailureDefault means
	// rules.FailureAllow (fail open).
	FailureMode rules.FailureMode
	// Headers chooses the rate-limit headers added to responses.
	Headers Headers
	// OverLimitBody adds a JSON body (raw_body) to OVER_LIMIT answers, which
	// Envoy sends as the 429 body.
	OverLimitBody bool
	// StoreFailureHeader, when not empty, names a response header added to
	// every answer the failure policy gave (allow or deny) with the cause
	// as its value: deadline, circuit_open or error. The answer's
	// dynamic_metadata says so too, header or not (markFailure). It must
	// be an HTTP token.
	StoreFailureHeader string
	// Logger receives failure logs (at most one line per second) and, at
	// debug level, one line per answer (logDecision); nil discards them.
	Logger *slog.Logger
	// Metrics is told what each request did, to count it; nil counts
	// nothing.
	Metrics Metrics
	// TracerProvider, when not nil, gets a span per request, named
	// "ShouldRateLimit Execution" and continuing the caller's traceparent
	// or B3 headers, and a child span "ratelimit.store" per store call;
	// nil traces nothing and costs nothing.
	TracerProvider trace.TracerProvider
	// Bounds limit what one request may carry.
	Bounds RequestBounds
	// QuotaMode is the reference server's global quota mode (QUOTA_MODE):
	// every descriptor is a quota, except those only unlimited limits
	// apply to, and a request is refused only when every quota is over. A
	// descriptor that matches no rule, or whose limits were replaced, is a
	// quota that passes, and so is one in shadow mode: with one, the
	// request is never refused. Each descriptor's own status still says
	// OVER_LIMIT when it is over. False: only the descriptors of rules with
	// quota_mode are quotas.
	QuotaMode bool
	// DynamicMetadata puts the request and the metadata of the rules it met
	// into every answer's dynamic_metadata, as the reference server does with
	// RESPONSE_DYNAMIC_METADATA (see requestMetadata). Envoy stores it under
	// envoy.filters.http.ratelimit for later filters and access logs.
	DynamicMetadata bool
	// Now is the clock for the one answer no store decides: the reset of a
	// limit of requests_per_unit 0, the time left in its window; it also
	// paces the log of store failures (a line a second). nil means
	// time.Now.
	Now func() time.Time
}

// DefaultOptions returns the values New gives the zero fields of Options:
// the reference server's near-limit ratio and header names, failing open,
// and the request bounds.
func DefaultOptions() Options {
	return Options{
		NearLimitRatio: 0.8,
		FailureMode:    rules.FailureAllow,
		Headers:        Headers{LimitName: "RateLimit-Limit", RemainingName: "RateLimit-Remaining", ResetName: "RateLimit-Reset"},
		Bounds:         RequestBounds{MaxDescriptors: 64, MaxEntries: 16, MaxKeyBytes: 1 << 10, MaxValueBytes: 4 << 10},
	}
}

// withDefaults returns o with its zero fields set from DefaultOptions.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	setDefault(&o.NearLimitRatio, d.NearLimitRatio)
	setDefault(&o.FailureMode, d.FailureMode)
	setDefault(&o.Headers.LimitName, d.Headers.LimitName)
	setDefault(&o.Headers.RemainingName, d.Headers.RemainingName)
	setDefault(&o.Headers.ResetName, d.Headers.ResetName)
	setDefault(&o.Bounds.MaxDescriptors, d.Bounds.MaxDescriptors)
	setDefault(&o.Bounds.MaxEntries, d.Bounds.MaxEntries)
	setDefault(&o.Bounds.MaxKeyBytes, d.Bounds.MaxKeyBytes)
	setDefault(&o.Bounds.MaxValueBytes, d.Bounds.MaxValueBytes)
	return o
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Validate reports the first option New refuses as an *option.Error
// ("envoy.Options.NearLimitRatio 2: want a number between 0 and 1"), or
// nil. Zero values are valid: they mean the defaults.
func (o Options) Validate() error {
	switch {
	case o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(o.NearLimitRatio):
		return refused("NearLimitRatio", o.NearLimitRatio, "want a number between 0 and 1")
	case o.FailureMode > rules.FailureUnavailable:
		return refused("FailureMode", o.FailureMode, "want allow, deny or unavailable")
	case o.StoreFailureHeader != "" && !isToken(o.StoreFailureHeader):
		return refused("StoreFailureHeader", o.StoreFailureHeader, "not an HTTP token")
	case o.Headers.Style > HeadersIETF:
		return refused("Headers.Style", o.Headers.Style, "want off, reference or ietf")
	}
	h := &o.Headers
	for _, f := range []struct{ name, v string }{{"LimitName", h.LimitName}, {"RemainingName", h.RemainingName}, {"ResetName", h.ResetName}} {
		if f.v != "" && !isToken(f.v) {
			return refused("Headers."+f.name, f.v, "not an HTTP token")
		}
	}
	b := &o.Bounds
	for _, f := range []struct {
		name string
		v    int
	}{{"MaxDescriptors", b.MaxDescriptors}, {"MaxEntries", b.MaxEntries}, {"MaxKeyBytes", b.MaxKeyBytes}, {"MaxValueBytes", b.MaxValueBytes}} {
		if f.v < 0 {
			return refused("Bounds."+f.name, f.v, "must not be negative")
		}
	}
	return nil
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "envoy.Options", Field: field, Value: v, Want: want}
}
