package rlqs

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Reasons a stream, a bucket or a report is refused, as
// floodgate_rlqs_refused_total labels them.
const (
	// RefusedStreams: a stream over Options.MaxStreams.
	RefusedStreams = "too_many_streams"
	// RefusedBuckets: a bucket over Options.MaxBuckets or
	// MaxStreamBuckets (counted once per report that carries it).
	RefusedBuckets = "too_many_buckets"
	// RefusedBucketID: an empty bucket_id, or one beyond
	// MaxBucketEntries or MaxBucketIDBytes.
	RefusedBucketID = "bucket_id"
	// RefusedDomain: a first report without a domain, or one changing it.
	RefusedDomain = "domain"
	// RefusedMalformed: a report that is not a RateLimitQuotaUsageReports.
	RefusedMalformed = "malformed"
	// RefusedTooLarge: a report over the listener's size bound.
	RefusedTooLarge = "too_large"
	// RefusedSilent: a stream closed after Options.IdleTimeout without a
	// report.
	RefusedSilent = "silent"
)

// Metrics records the RLQS streams in Prometheus metrics, all named
// floodgate_rlqs_*, with bounded labels (never a domain or a bucket). A
// nil *Metrics records nothing. It is safe for concurrent use.
type Metrics struct {
	streams, buckets prometheus.Gauge
	reports          prometheus.Counter
	usage            *prometheus.CounterVec
	assignments      *prometheus.CounterVec
	refused          *prometheus.CounterVec
	storeErrors      prometheus.Counter
}

// NewMetrics registers the RLQS metrics with reg:
//
//	floodgate_rlqs_streams                  open streams (gauge)
//	floodgate_rlqs_buckets                  buckets held, all streams (gauge)
//	floodgate_rlqs_reports_total            reports received
//	floodgate_rlqs_requests_total{outcome}  requests the reports count: allowed, denied
//	floodgate_rlqs_assignments_total{action} actions sent: allow_all, deny_all, token_bucket, abandon
//	floodgate_rlqs_refused_total{reason}    streams, buckets and reports refused (the Refused* reasons)
//	floodgate_rlqs_store_errors_total       store calls that failed
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_rlqs_streams",
			Help: "RLQS streams open (one per Envoy and domain)."}),
		buckets: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_rlqs_buckets",
			Help: "RLQS buckets held, over every stream."}),
		reports: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_reports_total",
			Help: "RLQS usage reports received."}),
		usage: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_rlqs_requests_total",
			Help: "Requests the RLQS reports count, by what Envoy did with them (allowed, denied)."}, []string{"outcome"}),
		assignments: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_rlqs_assignments_total",
			Help: "RLQS bucket actions sent, by action (allow_all, deny_all, token_bucket, abandon)."}, []string{"action"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "floodgate_rlqs_refused_total",
			Help: "RLQS streams, buckets and reports refused, by reason."}, []string{"reason"}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_rlqs_store_errors_total",
			Help: "RLQS store calls that failed (the buckets get their failure mode's assignment)."}),
	}
	for _, c := range []prometheus.Collector{m.streams, m.buckets, m.reports, m.usage, m.assignments, m.refused, m.storeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every series exists from the start, so that rates work before the
	// first event.
	for _, o := range []string{"allowed", "denied"} {
		m.usage.WithLabelValues(o)
	}
	for _, a := range []string{"allow_all", "deny_all", "token_bucket", "abandon"} {
		m.assignments.WithLabelValues(a)
	}
	for _, r := range []string{RefusedStreams, RefusedBuckets, RefusedBucketID, RefusedDomain, RefusedMalformed, RefusedTooLarge, RefusedSilent} {
		m.refused.WithLabelValues(r)
	}
	return m, nil
}

func (m *Metrics) stream(delta float64) {
	if m != nil {
		m.streams.Add(delta)
	}
}

func (m *Metrics) bucket(delta float64) {
	if m != nil {
		m.buckets.Add(delta)
	}
}

func (m *Metrics) report(allowed, denied int64) {
	if m != nil {
		m.reports.Inc()
		m.usage.WithLabelValues("allowed").Add(float64(allowed))
		m.usage.WithLabelValues("denied").Add(float64(denied))
	}
}

func (m *Metrics) assigned(action string) {
	if m != nil {
		m.assignments.WithLabelValues(action).Inc()
	}
}

func (m *Metrics) refuse(reason string) {
	if m != nil {
		m.refused.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) storeError() {
	if m != nil {
		m.storeErrors.Inc()
	}
}
