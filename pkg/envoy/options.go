package envoy

import (
	"cmp"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Options tune a Service. A zero field means its value in DefaultOptions,
// or none of what it adds.
type Options struct {
	// ShadowMode makes every overall code OK; statuses and counters stay
	// real (the reference server's SHADOW_MODE).
	ShadowMode bool
	// NearLimitRatio is the share of a limit's capacity from which an
	// admitted hit counts as near the limit, in [0, 1].
	NearLimitRatio float64
	// FailureMode is what to do when the Limiter fails, for rules that do
	// not say (rules.Rule.FailureMode).
	FailureMode rules.FailureMode
	// Headers chooses the rate-limit headers added to responses.
	Headers Headers
	// OverLimitBody adds a JSON body to OVER_LIMIT answers, Envoy's 429
	// body.
	OverLimitBody bool
	// StoreFailureHeader, when not empty, names a header added to every
	// answer the failure policy gave, with the cause as value (deadline,
	// circuit_open, store_full or error). It must be an HTTP token.
	StoreFailureHeader string
	// Logger receives store failures (a line a second at most) and, at
	// debug level, a line per answer; nil discards them.
	Logger *slog.Logger
	// Metrics is told what each request did; nil counts nothing.
	Metrics Metrics
	// TracerProvider, when not nil, gets a span per request, "ShouldRateLimit
	// Execution", continuing the caller's traceparent or B3 headers, and a
	// child span "ratelimit.store" per store call.
	TracerProvider trace.TracerProvider
	// Bounds limit what one request may carry.
	Bounds RequestBounds
	// QuotaMode is the reference server's QUOTA_MODE: every descriptor but
	// those with only unlimited limits is a quota, else only those of rules
	// with quota_mode. A request is refused only when every quota is over
	// (one that matches no rule or is in shadow mode always passes); each
	// descriptor's status still says OVER_LIMIT.
	QuotaMode bool
	// DynamicMetadata puts the request and its rules' metadata into every
	// answer's dynamic_metadata, as the reference server's
	// RESPONSE_DYNAMIC_METADATA.
	DynamicMetadata bool
	// Now is the clock of the failure log and of the reset of a limit of
	// requests_per_unit 0, which no store decides; nil means time.Now.
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

// withDefaults returns o with its zero fields set from DefaultOptions, a
// nil Logger discarding, nil Metrics counting nothing and a nil Now
// time.Now.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	o.NearLimitRatio = cmp.Or(o.NearLimitRatio, d.NearLimitRatio)
	o.FailureMode = cmp.Or(o.FailureMode, d.FailureMode)
	h, b := &o.Headers, &o.Bounds
	h.LimitName = cmp.Or(h.LimitName, d.Headers.LimitName)
	h.RemainingName = cmp.Or(h.RemainingName, d.Headers.RemainingName)
	h.ResetName = cmp.Or(h.ResetName, d.Headers.ResetName)
	b.MaxDescriptors = cmp.Or(b.MaxDescriptors, d.Bounds.MaxDescriptors)
	b.MaxEntries = cmp.Or(b.MaxEntries, d.Bounds.MaxEntries)
	b.MaxKeyBytes = cmp.Or(b.MaxKeyBytes, d.Bounds.MaxKeyBytes)
	b.MaxValueBytes = cmp.Or(b.MaxValueBytes, d.Bounds.MaxValueBytes)
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	o.Metrics = cmp.Or(o.Metrics, Metrics(noMetrics{}))
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Validate reports the first option New refuses as an *option.Error
// ("envoy.Options.NearLimitRatio 2: want a number between 0 and 1"), or
// nil. Zero values mean the defaults.
func (o Options) Validate() error {
	switch {
	case o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(o.NearLimitRatio):
		return refused("NearLimitRatio", o.NearLimitRatio, "want a number between 0 and 1")
	case o.FailureMode > rules.FailureUnavailable:
		return refused("FailureMode", o.FailureMode, "want allow, deny or unavailable")
	case o.StoreFailureHeader != "" && !httpguts.ValidHeaderFieldName(o.StoreFailureHeader):
		return refused("StoreFailureHeader", o.StoreFailureHeader, "not an HTTP token")
	case o.Headers.Style > HeadersIETF:
		return refused("Headers.Style", o.Headers.Style, "want off, reference or ietf")
	}
	h := &o.Headers
	for _, f := range []struct{ name, v string }{{"LimitName", h.LimitName}, {"RemainingName", h.RemainingName}, {"ResetName", h.ResetName}} {
		if f.v != "" && !httpguts.ValidHeaderFieldName(f.v) {
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
