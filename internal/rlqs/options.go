package rlqs

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// The defaults of Options' fields. Envoy 1.40 reports every 5 s whatever
// the filter says; an assignment outlives two lost reports.
const (
	DefaultReportInterval   = 5 * time.Second
	DefaultAssignmentTTL    = 15 * time.Second
	DefaultIdleTimeout      = time.Minute
	DefaultMaxStreams       = 1024
	DefaultMaxBuckets       = 100_000
	DefaultMaxStreamBuckets = 10_000
	DefaultMaxBucketIDBytes = 1024
)

// defaultMaxBucketEntries is the RLS service's default bound on a
// descriptor's entries.
const defaultMaxBucketEntries = 16

// Options tune a Service. A zero field means its default.
type Options struct {
	// ReportInterval is how often Envoy reports: the horizon an assignment
	// is computed for, and the length of a demand slot. At least 1 s.
	ReportInterval time.Duration
	// AssignmentTTL is the time to live of every assignment: whole seconds
	// (Envoy drops the fraction), more than two ReportIntervals.
	AssignmentTTL time.Duration
	// IdleTimeout is how long a bucket may report no demand before it is
	// abandoned, and a stream send no report before it is closed. At least
	// two ReportIntervals.
	IdleTimeout time.Duration
	// MaxStreams bounds the open streams; one more is refused with
	// ResourceExhausted.
	MaxStreams int
	// MaxBuckets bounds the buckets of all streams, MaxStreamBuckets those
	// of one. A bucket over either gets no assignment (Envoy applies its
	// no_assignment_behavior) until idle buckets are abandoned.
	MaxBuckets, MaxStreamBuckets int
	// MaxBucketIDBytes bounds a bucket_id's keys and values together, and
	// MaxBucketEntries (16 by default) its entries. A bucket_id beyond
	// either, or with an empty key or no entry, is refused like a bucket
	// over MaxBuckets.
	MaxBucketIDBytes, MaxBucketEntries int
	// ChargeInterval is the least time between the starts of two store
	// flushes, which charge together the rounds of every stream (0: as
	// soon as the last one has ended).
	ChargeInterval time.Duration
	// FailureMode is what a bucket is assigned when the store fails, for
	// rules that do not say: allow-all (the default), deny-all, or nothing
	// (rules.FailureUnavailable: Envoy applies its
	// expired_assignment_behavior once the assignment runs out).
	FailureMode rules.FailureMode
	// ShadowMode assigns allow-all to every bucket while the counters count
	// as when enforcing.
	ShadowMode bool
	// Logger receives the streams' lifecycle at debug level, refusals and
	// store failures at warn level (once per stream and reason, once a
	// second); nil discards them.
	Logger *slog.Logger
	// Metrics records the streams; nil records nothing.
	Metrics *Metrics
	// Now is the clock of demand and idleness; nil means time.Now.
	Now func() time.Time
}

// field is one of Options' durations or bounds, with its default.
type field[T time.Duration | int] struct {
	name string
	p    *T
	def  T
}

// fields returns o's durations and bounds, with their defaults.
func (o *Options) fields() ([]field[time.Duration], []field[int]) {
	return []field[time.Duration]{
			{"ReportInterval", &o.ReportInterval, DefaultReportInterval},
			{"AssignmentTTL", &o.AssignmentTTL, DefaultAssignmentTTL},
			{"IdleTimeout", &o.IdleTimeout, DefaultIdleTimeout},
			{"ChargeInterval", &o.ChargeInterval, 0},
		}, []field[int]{
			{"MaxStreams", &o.MaxStreams, DefaultMaxStreams},
			{"MaxBuckets", &o.MaxBuckets, DefaultMaxBuckets},
			{"MaxStreamBuckets", &o.MaxStreamBuckets, DefaultMaxStreamBuckets},
			{"MaxBucketIDBytes", &o.MaxBucketIDBytes, DefaultMaxBucketIDBytes},
			{"MaxBucketEntries", &o.MaxBucketEntries, defaultMaxBucketEntries},
		}
}

// Validate reports the first option New refuses as an *option.Error, or
// nil.
func (o Options) Validate() error {
	durations, bounds := o.fields()
	if err := negative(durations); err != nil {
		return err
	}
	if err := negative(bounds); err != nil {
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

func refused(field string, v any, want string) error {
	return &option.Error{Options: "rlqs.Options", Field: field, Value: v, Want: want}
}

func negative[T time.Duration | int](fs []field[T]) error {
	for _, f := range fs {
		if *f.p < 0 {
			return refused(f.name, *f.p, "must not be negative (0 is the default)")
		}
	}
	return nil
}

func (o Options) withDefaults() Options {
	durations, bounds := o.fields()
	setDefaults(durations)
	setDefaults(bounds)
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

func setDefaults[T time.Duration | int](fs []field[T]) {
	for _, f := range fs {
		if *f.p == 0 {
			*f.p = f.def
		}
	}
}
