package rlqs

import (
	"cmp"
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

// Validate reports the first option New refuses as an *option.Error, or
// nil.
func (o Options) Validate() error {
	for _, f := range []struct {
		name     string
		v        any
		negative bool
	}{
		{"ReportInterval", o.ReportInterval, o.ReportInterval < 0},
		{"AssignmentTTL", o.AssignmentTTL, o.AssignmentTTL < 0},
		{"IdleTimeout", o.IdleTimeout, o.IdleTimeout < 0},
		{"ChargeInterval", o.ChargeInterval, o.ChargeInterval < 0},
		{"MaxStreams", o.MaxStreams, o.MaxStreams < 0},
		{"MaxBuckets", o.MaxBuckets, o.MaxBuckets < 0},
		{"MaxStreamBuckets", o.MaxStreamBuckets, o.MaxStreamBuckets < 0},
		{"MaxBucketIDBytes", o.MaxBucketIDBytes, o.MaxBucketIDBytes < 0},
		{"MaxBucketEntries", o.MaxBucketEntries, o.MaxBucketEntries < 0},
	} {
		if f.negative {
			return refused(f.name, f.v, "must not be negative (0 is the default)")
		}
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

func (o Options) withDefaults() Options {
	o.ReportInterval = cmp.Or(o.ReportInterval, DefaultReportInterval)
	o.AssignmentTTL = cmp.Or(o.AssignmentTTL, DefaultAssignmentTTL)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, DefaultIdleTimeout)
	o.MaxStreams = cmp.Or(o.MaxStreams, DefaultMaxStreams)
	o.MaxBuckets = cmp.Or(o.MaxBuckets, DefaultMaxBuckets)
	o.MaxStreamBuckets = cmp.Or(o.MaxStreamBuckets, DefaultMaxStreamBuckets)
	o.MaxBucketIDBytes = cmp.Or(o.MaxBucketIDBytes, DefaultMaxBucketIDBytes)
	o.MaxBucketEntries = cmp.Or(o.MaxBucketEntries, defaultMaxBucketEntries)
	o.FailureMode = cmp.Or(o.FailureMode, rules.FailureAllow)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}
