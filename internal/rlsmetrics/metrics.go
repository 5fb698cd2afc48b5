// Package rlsmetrics counts what the request path does (envoy.Metrics) in
// Prometheus and, when asked, in statsd under the reference server's
// names, with series bounded whatever values clients send; it keeps each
// rule's most hit counters for the live page (hot.go), and counts the
// rule loads (rules.go).
package rlsmetrics

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"weak"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

var _ envoy.Metrics = (*Metrics)(nil)

// DefaultMaxValueSeries is Options.MaxValueSeries when it is zero.
const DefaultMaxValueSeries = 100

// otherValues follows a rule's path in the label of its hits beyond
// MaxValueSeries distinct values: "test.detailed._other_".
const otherValues = "._other_"

// Options configures Metrics. The zero value is usable.
type Options struct {
	// Store names the Limiter in the store metrics' "store" label
	// ("redis", "memory").
	Store string
	// MaxValueSeries bounds the labels one detailed_metric or
	// value_to_metric rule makes of request values (and the statsd names,
	// and the unknown domains named in statsd): past it, hits count under
	// "<path>._other_". 0 means DefaultMaxValueSeries; negative, none.
	MaxValueSeries int
	// Statsd, when set, also sends the counts to statsd under the
	// reference server's names.
	Statsd *statsd.Client
	// KeepHotValues keeps the request values of every rule's hot
	// counters, for Hot(n, HotAll), not only those of rules that name
	// metrics by values: at most HotCapacity values of HotKeyBytes a rule.
	KeepHotValues bool
}

// Metrics implements envoy.Metrics. Hit counters are labelled by domain
// and rule path, never by request values unless the rule asks
// (detailed_metric, value_to_metric), and then for at most MaxValueSeries
// values. It is safe for concurrent use.
type Metrics struct {
	hitVecs                  [hitKindCount]*prometheus.CounterVec
	charged, charges         *prometheus.CounterVec // usage (usageCounters)
	globalShadowMode         prometheus.Counter
	domainsNotFound          prometheus.Counter
	decisions                *prometheus.HistogramVec
	decisionOK, decisionOver prometheus.Observer
	storeSeconds             prometheus.Histogram
	storeErrors              prometheus.Counter
	failureAnswers           *prometheus.CounterVec
	refused                  *prometheus.CounterVec
	sd                       *statsdStats
	opts                     Options // MaxValueSeries set

	labels sync.Pool // *[]byte, to name series by values

	// cache maps the rules of the set in force to their series, so that
	// a request hashes no label; byLabel keeps each (domain, rule path)
	// for good, so that a reload does not reset a rule's value budget.
	cache   atomic.Pointer[seriesCache]
	mu      sync.Mutex
	byLabel map[[2]string]*ruleSeries
}

// seriesCache maps the rules of one Set to their series.
type seriesCache struct {
	// set is weak: an idle server must not keep a replaced set alive.
	set   weak.Pointer[rules.Set]
	rules sync.Map // *rules.Rule, or the domain string for overrides without a rule -> *ruleSeries
}

// adder is a counter of one sink: prometheus.Counter, *statsd.Counter.
type adder[N any] interface{ Add(N) }

// The hit counters of one name, indices of hitKinds and hitCounters.
const (
	hitsTotal = iota
	overLimit
	nearLimit
	withinLimit
	shadowMode
	notCharged
	hitKindCount
)

// hitKinds name the hit counters: floodgate_<prom> in Prometheus, with
// its help, and <name>.<stat> in statsd, as the reference server but for
// not_charged, ours (the reference charges a refused request's
// descriptors).
var hitKinds = [hitKindCount]struct{ prom, stat, help string }{
	hitsTotal: {"hits_total", "total_hits", "Hits (hits_addend) on descriptors that matched a limit, at most one more than " +
		"the descriptor's largest limit per request; the sum of over_limit, within_limit and not_charged."},
	overLimit: {"over_limit_total", "over_limit", "Hits on descriptors over their limit (shadow-mode ones included), " +
		"at most one more than the largest limit per request."},
	nearLimit: {"near_limit_total", "near_limit", "Charged hits that left a limit at or above the near-limit ratio of its capacity."},
	withinLimit: {"within_limit_total", "within_limit", "Hits on descriptors within their limit, charged: " +
		"never those of a request refused by another descriptor."},
	shadowMode: {"shadow_mode_total", "shadow_mode", "Hits over a limit in shadow mode, admitted."},
	notCharged: {"not_charged_total", "not_charged", "Hits on descriptors within their limit that were not charged, " +
		"because another descriptor of the request was over its limit (a request is charged all or nothing)."},
}

// hitCounters are the hit counters of one name in one sink.
type hitCounters[C adder[N], N float64 | uint64] [hitKindCount]C

// hitOutcome is what happened to one descriptor's hits.
type hitOutcome struct {
	over    bool // a limit denied them
	shadow  bool // and the rule's shadow mode let them pass
	charged bool // admitted and counted against every limit of the descriptor
}

// add counts n hits, then exactly one of: over the limit (and shadow),
// within it (and near), or not charged, when another descriptor refused
// the request.
func (c *hitCounters[C, N]) add(n, near N, o hitOutcome) {
	c[hitsTotal].Add(n)
	switch {
	case o.over:
		c[overLimit].Add(n)
		if o.shadow {
			c[shadowMode].Add(n)
		}
	case o.charged:
		c[withinLimit].Add(n)
		if near > 0 {
			c[nearLimit].Add(near)
		}
	default:
		c[notCharged].Add(n)
	}
}

// counters are the Prometheus hit counters of one (domain, rule).
type counters = hitCounters[prometheus.Counter, float64]

// series are the counters of one name, in either sink (nil when unused).
type series struct {
	prom counters
	stat *statCounters
}

// ruleSeries are the counters of one rule, and of its request values.
type ruleSeries struct {
	series
	domain, path string
	ruleless     bool // an override's that matched no rule

	mu     sync.Mutex
	values map[string]*series // detailed labels; at most MaxValueSeries
	other  *series
	hot    hotSketch // the most hit counters (hot.go)

	usageOnce sync.Once
	usage     usageCounters
}

// usageCounters count the usage reported with a descriptor's own
// hits_addend: units charged and reports, under the rule's path.
type usageCounters struct{ units, reports prometheus.Counter }

// charge counts a usage report of units against s.
func (m *Metrics) charge(s *ruleSeries, units int64) {
	s.usageOnce.Do(func() {
		s.usage = usageCounters{m.charged.WithLabelValues(s.domain, s.path), m.charges.WithLabelValues(s.domain, s.path)}
	})
	s.usage.units.Add(float64(units))
	s.usage.reports.Inc()
}

// durationBuckets are the buckets of the duration histograms, in seconds.
var durationBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}

// New creates the request-path metrics and registers them on reg.
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	opts.MaxValueSeries = cmp.Or(opts.MaxValueSeries, DefaultMaxValueSeries)
	m := &Metrics{
		opts:    opts,
		byLabel: map[[2]string]*ruleSeries{},
		labels:  sync.Pool{New: func() any { return new([]byte) }},
		sd:      newStatsdStats(opts.Statsd, opts.MaxValueSeries),
	}
	m.newHitCounters()
	m.newRequestMetrics(prometheus.Labels{"store": opts.Store})
	cs := []prometheus.Collector{m.charged, m.charges, m.globalShadowMode, m.domainsNotFound, m.decisions, m.storeSeconds,
		m.storeErrors, m.failureAnswers, m.refused}
	for _, v := range m.hitVecs {
		cs = append(cs, v)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// newHitCounters creates the counters of hits by domain and rule.
func (m *Metrics) newHitCounters() {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: name, Help: help}, []string{"domain", "rule"})
	}
	for k, h := range hitKinds {
		m.hitVecs[k] = counter(h.prom, h.help)
	}
	m.charged = counter("usage_charged_total", "Usage reported after the fact (a descriptor's own hits_addend: "+
		"tokens, bytes), charged whether within the limit or past it: what a budget spent.")
	m.charges = counter("usage_reports_total", "Descriptors that reported usage (a descriptor's own hits_addend), charged.")
}

// newRequestMetrics creates the metrics of requests and store calls.
func (m *Metrics) newRequestMetrics(storeLabel prometheus.Labels) {
	m.globalShadowMode = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "global_shadow_mode_total",
		Help: "Requests answered OK only because of the global shadow mode."})
	m.domainsNotFound = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "domain_not_found_total",
		Help: "Requests for a domain no rule file declares (answered OK)."})
	m.decisions = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "floodgate", Name: "decision_duration_seconds",
		Help:    "Time to answer ShouldRateLimit, by answer: ok, over_limit, or the gRPC error code.",
		Buckets: durationBuckets}, []string{"code"})
	m.decisionOK = m.decisions.WithLabelValues("ok")
	m.decisionOver = m.decisions.WithLabelValues("over_limit")
	m.storeSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "floodgate", Name: "store_duration_seconds",
		Help: "Time of each call to the limit store, failures included.", ConstLabels: storeLabel, Buckets: durationBuckets})
	m.storeErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "floodgate", Name: "store_errors_total",
		Help: "Calls to the limit store that failed (timeouts, connection errors, error replies).", ConstLabels: storeLabel})
	m.failureAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: "store_failure_answers_total",
		Help: "Requests answered by the failure policy after a store failure, by policy (mode: allow, deny, unavailable) " +
			"and cause (deadline: the store deadline passed; circuit_open: the breaker did not try the store; error: any other failure)."},
		[]string{"mode", "cause"})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "floodgate", Name: "requests_refused_total",
		Help: "Requests refused (InvalidArgument, ResourceExhausted, Unimplemented; 400, 405, 413 on /json) before any " +
			"decision, by reason: " + strings.Join(RefusalReasons, ", ") + "."}, []string{"reason"})
	for _, r := range RefusalReasons {
		m.refused.WithLabelValues(r) // present at 0 from the start
	}
}

// Decision counts an answer, or a failed call, and how long it took.
func (m *Metrics) Decision(d time.Duration, resp *pb.RateLimitResponse, err error) {
	m.sd.decision(d, err)
	switch {
	case err != nil:
		m.decisions.WithLabelValues(strings.ToLower(status.Code(err).String())).Observe(d.Seconds())
	case resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT:
		m.decisionOver.Observe(d.Seconds())
	default:
		m.decisionOK.Observe(d.Seconds())
	}
}

// RefusedOther is the reason Refused counts an unknown one under.
const RefusedOther = "other"

// RefusalReasons are the values of floodgate_requests_refused_total's
// reason label: the reasons envoy.Metrics.Refused documents, then
// RefusedOther.
var RefusalReasons = []string{"malformed", "too_large", "unknown_method", "bounds", "invalid", RefusedOther}

// Refused counts a request refused for reason. The listeners call it too.
func (m *Metrics) Refused(reason string) {
	if !slices.Contains(RefusalReasons, reason) {
		reason = RefusedOther
	}
	m.refused.WithLabelValues(reason).Inc()
}

// StoreCall counts a call to the limit store, and its failure.
func (m *Metrics) StoreCall(d time.Duration, err error) {
	m.storeSeconds.Observe(d.Seconds())
	if err != nil {
		m.storeErrors.Inc()
	}
}

// DomainNotFound counts a request for a domain no rule file declares.
func (m *Metrics) DomainNotFound(domain string, descriptors int) {
	m.domainsNotFound.Inc()
	m.sd.domainNotFound(domain, descriptors)
}

// GlobalShadow counts a request answered OK only because of the global
// shadow mode.
func (m *Metrics) GlobalShadow() {
	m.globalShadowMode.Inc()
	m.sd.globalShadow.Inc()
}

// FailureAnswer counts a request answered by the failure policy, by
// policy and cause.
func (m *Metrics) FailureAnswer(mode rules.FailureMode, cause string) {
	m.failureAnswers.WithLabelValues(mode.String(), cause).Inc()
	m.sd.redisErrors.Inc() // a Redis error to the reference server
}

// series returns the series of a descriptor's rule r (nil for an override
// without a rule, then labelled "(override)") in set.
func (m *Metrics) series(set *rules.Set, domain string, r *rules.Rule, label string) *ruleSeries {
	c := m.cache.Load()
	if c == nil || c.set.Value() != set {
		fresh := &seriesCache{set: weak.Make(set)}
		if m.cache.CompareAndSwap(c, fresh) {
			c = fresh
		} else if c = m.cache.Load(); c.set.Value() != set {
			c = fresh // a concurrent request has another set; don't fight over the cache
		}
	}
	// The domain only without a rule: a string converted to any allocates.
	var key any
	if r != nil {
		key = r
	} else {
		key = domain
	}
	if s, ok := c.rules.Load(key); ok {
		return s.(*ruleSeries)
	}
	m.mu.Lock()
	s := m.byLabel[[2]string{domain, label}]
	if s == nil {
		s = &ruleSeries{domain: domain, path: label, ruleless: r == nil}
		m.byLabel[[2]string{domain, label}] = s
	}
	// A rule labelled by values has no series of its own (checked per
	// rule: a reload can change it), nor, in statsd, an override.
	if r == nil || !r.NamedByValues() {
		statName := ""
		if r != nil {
			statName = label
		}
		m.fill(&s.series, domain, label, statName)
	}
	m.mu.Unlock()
	c.rules.Store(key, s)
	return s
}

// fill creates the missing counters of v, labelled promLabel and named
// statName ("" for none). Counters are never replaced, so that requests
// reading them race with nothing.
func (m *Metrics) fill(v *series, domain, promLabel, statName string) {
	if promLabel != "" && v.prom[hitsTotal] == nil {
		for k, vec := range m.hitVecs {
			v.prom[k] = vec.WithLabelValues(domain, promLabel)
		}
	}
	if statName != "" && m.sd.client != nil && v.stat == nil {
		v.stat = m.sd.hits(statName)
	}
}

// valueSeries returns the series of the values named buf in s, or its
// "_other_" series once s is full, with Prometheus counters if prom.
func (s *ruleSeries) valueSeries(m *Metrics, buf []byte, prom bool) *series {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.values[string(buf)]
	// Prometheus refuses label values that are not UTF-8.
	if v == nil && (len(s.values) >= m.opts.MaxValueSeries || !utf8.Valid(buf)) {
		if s.other == nil {
			s.other = &series{}
		}
		v = s.other
	}
	if v != nil && (v.prom[hitsTotal] != nil || !prom) && (v.stat != nil || m.sd.client == nil) {
		return v // the usual case, without building a name
	}
	label, statName := string(buf), string(buf)
	switch {
	case v == nil:
		v = &series{}
		if s.values == nil {
			s.values = map[string]*series{}
		}
		s.values[label] = v
	case v == s.other:
		label, statName = s.path+otherValues, s.path+otherValues
		// An override without a rule is named from its domain.
		if s.ruleless {
			statName = s.domain + otherValues
		}
	}
	if !prom {
		label = ""
	}
	m.fill(v, s.domain, label, statName)
	return v
}

// Hits adds each decided descriptor's hits to its counters.
func (m *Metrics) Hits(set *rules.Set, domain string, hits []envoy.DescriptorHits) {
	buf := m.labels.Get().(*[]byte)
	for i := range hits {
		m.count(set, domain, &hits[i], buf)
	}
	m.labels.Put(buf)
}

// count adds a descriptor's hits to its series and hot counters.
func (m *Metrics) count(set *rules.Set, domain string, h *envoy.DescriptorHits, buf *[]byte) {
	rd := h.Resolved
	s := m.series(set, domain, rd.Rule, h.Rule)
	bv := rd.Rule != nil && rd.Rule.NamedByValues() // named by values (rules.Rule.AppendStatName)
	prom, stat := &s.prom, s.stat
	// The reference server names an override's stats by its values.
	if bv || (rd.Override && m.sd.client != nil) {
		if bv {
			*buf = rd.Rule.AppendStatName((*buf)[:0], rd.Entries)
		} else {
			*buf = appendDetailedLabel((*buf)[:0], domain, rd.Entries)
		}
		v := s.valueSeries(m, *buf, bv)
		if bv {
			prom = &v.prom
		}
		stat = v.stat
	}
	o := hitOutcome{over: h.Over, shadow: rd.Mode == limit.Advisory, charged: h.Charged}
	// At most one more than the largest capacity: a larger cost is refused
	// alike, and must not put 10^16 into counters that dashboards sum.
	capacity := maxCapacity(rd)
	n := min(h.Cost, capacity+1) // cost <= 2^53: no overflow
	if h.Usage && h.Cost > 0 && capacity > 0 {
		n, o.charged = min(h.Cost, limit.MaxCount), true
		m.charge(s, n)
	}
	near := min(n, h.Near)
	var label []byte
	keep := bv || m.opts.KeepHotValues
	if keep {
		// Named by the values, which a series name may not show.
		*buf = appendDetailedLabel((*buf)[:0], domain, rd.Entries)
		label = *buf
	}
	s.hot.add(rd.Entries, keep, bv, label, uint64(n), o.over)
	prom.add(float64(n), float64(near), o)
	if stat != nil {
		stat.add(uint64(n), uint64(near), o)
	}
}

// maxCapacity is the largest capacity among rd's counted limits.
func maxCapacity(rd *rules.Resolved) int64 {
	var capacity int64
	for i := range rd.Limits {
		if l := &rd.Limits[i]; l.Counted() {
			capacity = max(capacity, l.Limit.Spec.Capacity())
		}
	}
	return capacity
}

// appendDetailedLabel names a descriptor with its values, in the reference
// server's detailed_metric form: domain.key_value.key_value.
func appendDetailedLabel(dst []byte, domain string, entries []rules.Entry) []byte {
	dst = append(dst, domain...)
	for _, e := range entries {
		dst = append(dst, '.')
		dst = append(dst, e.Key...)
		if e.Value != "" {
			dst = append(dst, '_')
			dst = append(dst, e.Value...)
		}
	}
	return dst
}
