package rlqs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Defaults of Options' fields.
const (
	// DefaultReportInterval is how often Envoy 1.40 reports: every 5 s,
	// whatever the filter's reporting_interval says.
	DefaultReportInterval = 5 * time.Second
	// DefaultAssignmentTTL is three report intervals: an assignment is
	// refreshed at every report, so it outlives two lost reports, and a
	// floodgate that stopped leaves Envoy on it for at most 15 s.
	DefaultAssignmentTTL = 15 * time.Second
	// DefaultIdleTimeout is how long a bucket may go without demand before
	// it is abandoned, and a stream without a report before it is closed.
	DefaultIdleTimeout = time.Minute
	// DefaultMaxStreams bounds the open streams: one per Envoy and domain.
	DefaultMaxStreams = 1024
	// DefaultMaxBuckets bounds the buckets of all streams together.
	DefaultMaxBuckets = 100_000
	// DefaultMaxStreamBuckets bounds the buckets of one stream.
	DefaultMaxStreamBuckets = 10_000
	// DefaultMaxBucketIDBytes bounds a bucket_id: the bytes of its keys
	// and values together.
	DefaultMaxBucketIDBytes = 1024
	// DefaultMaxBucketEntries bounds the entries of a bucket_id, as
	// envoy.DefaultMaxEntries bounds a descriptor's.
	DefaultMaxBucketEntries = 16
)

// Options tune a Service. The zero value is usable: Envoy 1.40's report
// interval, the Default bounds, failing open.
type Options struct {
	// ReportInterval is how often Envoy reports (DefaultReportInterval
	// when 0): the horizon an assignment is computed for, and the length
	// of the demand slots the shares come from. At least 1 s.
	ReportInterval time.Duration
	// AssignmentTTL is the time to live of every assignment
	// (DefaultAssignmentTTL when 0). Envoy 1.40 reads whole seconds only,
	// so it must be whole seconds, and longer than two ReportIntervals so
	// that a refresh at a report always comes before it runs out.
	AssignmentTTL time.Duration
	// IdleTimeout is how long a bucket may report no demand before it is
	// abandoned (Envoy forgets it and reports it again with its next
	// request), and how long a stream may send no report before it is
	// closed (DefaultIdleTimeout when 0). At least two ReportIntervals.
	IdleTimeout time.Duration
	// MaxStreams bounds the open streams; one more is refused
	// (ResourceExhausted). DefaultMaxStreams when 0.
	MaxStreams int
	// MaxBuckets bounds the buckets of all streams, MaxStreamBuckets those
	// of one stream; a bucket over either gets no assignment (Envoy
	// applies its no_assignment_behavior) until abandoned buckets make
	// room. Defaults when 0.
	MaxBuckets, MaxStreamBuckets int
	// MaxBucketIDBytes bounds a bucket_id's keys and values together, and
	// MaxBucketEntries its entries; a bucket_id beyond either, or with an
	// empty key or no entry, is refused like a bucket over MaxBuckets.
	// Defaults when 0.
	MaxBucketIDBytes, MaxBucketEntries int
	// ChargeInterval is the least time between the starts of two store
	// flushes: the streams' rounds that arrive meanwhile are charged
	// together, each counter once per flush whatever the streams that
	// report it (coalesce.go). 0 starts a flush as soon as the one before
	// has ended: the flushes space themselves as the store slows down.
	// Spacing them further trades an assignment's delay for store work
	// (docs/capacity.md).
	ChargeInterval time.Duration
	// FailureMode is what a bucket is assigned when the store fails, for
	// rules that do not say (rules.Rule.FailureMode): allow-all, deny-all,
	// or, for rules.FailureUnavailable, nothing, so that the assignment
	// runs out and Envoy applies its expired_assignment_behavior.
	// rules.FailureDefault means rules.FailureAllow.
	FailureMode rules.FailureMode
	// ShadowMode assigns allow-all to every bucket while the counters
	// count as when enforcing (the server's -shadow-mode).
	ShadowMode bool
	// Logger receives the streams' lifecycle at debug level and refusals
	// and store failures at warn level, each kind at most once per stream
	// or per second; nil discards them.
	Logger *slog.Logger
	// Metrics records streams, buckets, reports, assignments and
	// refusals; nil records nothing.
	Metrics *Metrics
	// Now is the clock of demand and idleness; nil means time.Now.
	Now func() time.Time
}

// Validate reports the first option New refuses as an *option.Error
// ("rlqs.Options.AssignmentTTL 2.5s: want whole seconds"), or nil. Zero
// values are valid: they mean the defaults.
func (o Options) Validate() error {
	if err := o.validateSigns(); err != nil {
		return err
	}
	n := o.withDefaults()
	switch {
	case n.ReportInterval < time.Second:
		return refused("ReportInterval", o.ReportInterval, "want at least 1s")
	case n.AssignmentTTL%time.Second != 0:
		return refused("AssignmentTTL", o.AssignmentTTL, "want whole seconds (Envoy drops the fraction)")
	case n.AssignmentTTL <= 2*n.ReportInterval:
		return refused("AssignmentTTL", n.AssignmentTTL, fmt.Sprintf(
			"want more than two report intervals (%v), so that a refresh at a report always comes before it runs out", 2*n.ReportInterval))
	case n.IdleTimeout < 2*n.ReportInterval:
		return refused("IdleTimeout", n.IdleTimeout, fmt.Sprintf("want at least two report intervals (%v)", 2*n.ReportInterval))
	case o.FailureMode > rules.FailureUnavailable:
		return refused("FailureMode", o.FailureMode, "want allow, deny or unavailable")
	}
	return nil
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "rlqs.Options", Field: field, Value: v, Want: want}
}

// validateSigns names the first duration or bound that is negative.
func (o Options) validateSigns() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReportInterval", o.ReportInterval}, {"AssignmentTTL", o.AssignmentTTL}, {"IdleTimeout", o.IdleTimeout},
		{"ChargeInterval", o.ChargeInterval}} {
		if d.v < 0 {
			return refused(d.name, d.v, "must not be negative (0 is the default)")
		}
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"MaxStreams", o.MaxStreams}, {"MaxBuckets", o.MaxBuckets}, {"MaxStreamBuckets", o.MaxStreamBuckets},
		{"MaxBucketIDBytes", o.MaxBucketIDBytes}, {"MaxBucketEntries", o.MaxBucketEntries}} {
		if b.v < 0 {
			return refused(b.name, b.v, "must not be negative (0 is the default)")
		}
	}
	return nil
}

// withDefaults returns o with every zero field set to its default.
func (o Options) withDefaults() Options {
	def := func(p *time.Duration, d time.Duration) {
		if *p == 0 {
			*p = d
		}
	}
	def(&o.ReportInterval, DefaultReportInterval)
	def(&o.AssignmentTTL, DefaultAssignmentTTL)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	for _, f := range []struct {
		p *int
		d int
	}{{&o.MaxStreams, DefaultMaxStreams}, {&o.MaxBuckets, DefaultMaxBuckets}, {&o.MaxStreamBuckets, DefaultMaxStreamBuckets},
		{&o.MaxBucketIDBytes, DefaultMaxBucketIDBytes}, {&o.MaxBucketEntries, DefaultMaxBucketEntries}} {
		if *f.p == 0 {
			*f.p = f.d
		}
	}
	if o.FailureMode == rules.FailureDefault {
		o.FailureMode = rules.FailureAllow
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
