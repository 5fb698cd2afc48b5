package rlqs

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The reasons of floodgate_rlqs_refused_total.
const (
	refusedStreams   = "too_many_streams" // over MaxStreams
	refusedBuckets   = "too_many_buckets" // over MaxBuckets or MaxStreamBuckets, once per report
	refusedBucketID  = "bucket_id"        // empty, or beyond MaxBucketEntries or MaxBucketIDBytes
	refusedDomain    = "domain"           // a first report without a domain, or one changing it
	refusedMalformed = "malformed"        // not a RateLimitQuotaUsageReports
	refusedTooLarge  = "too_large"        // over the listener's size bound
	refusedSilent    = "silent"           // no report for IdleTimeout
)

// Metrics records the RLQS streams in the floodgate_rlqs_* metrics, whose
// labels never name a domain or a bucket. It is safe for concurrent use.
type Metrics struct {
	streams, buckets prometheus.Gauge
	reports          prometheus.Counter
	usage            *prometheus.CounterVec
	assignments      *prometheus.CounterVec
	refused          *prometheus.CounterVec
	storeErrors      prometheus.Counter
}

// NewMetrics registers the RLQS metrics with reg; docs/operations.md lists
// them.
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
	for vec, labels := range map[*prometheus.CounterVec][]string{
		m.usage:       {"allowed", "denied"},
		m.assignments: {"allow_all", "deny_all", "token_bucket", "abandon"},
		m.refused:     {refusedStreams, refusedBuckets, refusedBucketID, refusedDomain, refusedMalformed, refusedTooLarge, refusedSilent},
	} {
		for _, l := range labels {
			vec.WithLabelValues(l)
		}
	}
	return m, nil
}

func (m *Metrics) report(allowed, denied int64) {
	m.reports.Inc()
	m.usage.WithLabelValues("allowed").Add(float64(allowed))
	m.usage.WithLabelValues("denied").Add(float64(denied))
}

func (m *Metrics) refuse(reason string) { m.refused.WithLabelValues(reason).Inc() }

func (m *Metrics) assigned(action string) { m.assignments.WithLabelValues(action).Inc() }
