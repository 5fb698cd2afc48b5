package envoy

import (
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Metrics records the request path in Prometheus metrics. Hit counters are
// labelled by domain and rule (the rule's path in its file, a bounded set),
// never by a request's values unless the rule asks for detailed_metric or
// value_to_metric. A nil *Metrics records nothing. It is safe for concurrent
// use.
type Metrics struct {
	hits, overLimit, nearLimit, withinLimit, shadowMode *prometheus.CounterVec
	globalShadowMode                                    prometheus.Counter
	domainsNotFound                                     prometheus.Counter
	decisions                                           *prometheus.HistogramVec
	storeSeconds                                        prometheus.Histogram
	storeErrors                                         prometheus.Counter
	failureAnswers                                      *prometheus.CounterVec
}

// NewMetrics creates the request-path metrics and registers them on reg.
// store names the Limiter in the store metrics' "store" label ("redis",
// "memory").
func NewMetrics(reg prometheus.Registerer, store string) (*Metrics, error) {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: name, Help: help}, []string{"domain", "rule"})
	}
	storeLabel := prometheus.Labels{"store": store}
	m := &Metrics{
		hits:        counter("hits_total", "Hits (hits_addend) on descriptors that matched a limit."),
		overLimit:   counter("over_limit_total", "Hits on descriptors over their limit (shadow-mode ones included)."),
		nearLimit:   counter("near_limit_total", "Admitted hits that left a limit at or above the near-limit ratio of its capacity."),
		withinLimit: counter("within_limit_total", "Hits on descriptors within their limit."),
		shadowMode:  counter("shadow_mode_total", "Hits over a limit in shadow mode, admitted."),
		globalShadowMode: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "global_shadow_mode_total",
			Help: "Requests answered OK only because of the global shadow mode."}),
		domainsNotFound: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "domain_not_found_total",
			Help: "Requests for a domain no rule file declares (answered OK)."}),
		decisions: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "floodgate", Name: "decision_duration_seconds",
			Help:    "Time to answer ShouldRateLimit, by answer: ok, over_limit, or the gRPC error code.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}, []string{"code"}),
		storeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "floodgate", Name: "store_duration_seconds",
			Help:        "Time of each call to the limit store, failures included.",
			ConstLabels: storeLabel,
			Buckets:     []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}}),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "store_errors_total",
			Help: "Calls to the limit store that failed (timeouts, connection errors, error replies).", ConstLabels: storeLabel}),
		failureAnswers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: "store_failure_answers_total",
			Help: "Requests answered by the failure policy after a store failure, by policy: allow, deny, unavailable."}, []string{"mode"}),
	}
	for _, c := range []prometheus.Collector{m.hits, m.overLimit, m.nearLimit, m.withinLimit, m.shadowMode,
		m.globalShadowMode, m.domainsNotFound, m.decisions, m.storeSeconds, m.storeErrors, m.failureAnswers} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observeDecision(d time.Duration, resp *pb.RateLimitResponse, err error) {
	if m == nil {
		return
	}
	code := "ok"
	switch {
	case err != nil:
		code = strings.ToLower(status.Code(err).String())
	case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
		code = "over_limit"
	}
	m.decisions.WithLabelValues(code).Observe(d.Seconds())
}

func (m *Metrics) observeStore(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.storeSeconds.Observe(d.Seconds())
	if err != nil {
		m.storeErrors.Inc()
	}
}

func (m *Metrics) domainNotFound() {
	if m != nil {
		m.domainsNotFound.Inc()
	}
}

func (m *Metrics) globalShadow() {
	if m != nil {
		m.globalShadowMode.Inc()
	}
}

func (m *Metrics) failureAnswer(mode rules.FailureMode) {
	if m != nil {
		m.failureAnswers.WithLabelValues(mode.String()).Inc()
	}
}

// countMetrics adds each limited descriptor's hits to its counters.
func (sc *scratch) countMetrics(m *Metrics, domain string, v verdict) {
	if m == nil {
		return
	}
	for di := range sc.descs {
		ds := &sc.descs[di]
		out := &v.codes[di]
		if ds.ruleMetric == "" || out.best < 0 || ds.refund {
			continue
		}
		rule := ds.ruleMetric
		if ds.rule != nil && (ds.rule.DetailedMetric || ds.rule.ValueToMetric) {
			rule = detailedLabel(domain, sc.entries[ds.from:ds.to])
		}
		n := float64(ds.cost)
		m.hits.WithLabelValues(domain, rule).Add(n)
		switch {
		case out.wouldDeny:
			m.overLimit.WithLabelValues(domain, rule).Add(n)
			if ds.shadow {
				m.shadowMode.WithLabelValues(domain, rule).Add(n)
			}
		default:
			m.withinLimit.WithLabelValues(domain, rule).Add(n)
			if out.near {
				m.nearLimit.WithLabelValues(domain, rule).Add(n)
			}
		}
	}
}

// detailedLabel names a descriptor with its values, in the reference
// server's detailed_metric form: domain.key_value.key_value.
func detailedLabel(domain string, entries []rules.Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}
