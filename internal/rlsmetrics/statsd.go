package rlsmetrics

import (
	"regexp"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/statsd"
)

// The reference server's statsd names, which its dashboards read; a
// rule's counters are statRateLimit, its name, "." and a hitKinds stat.
const (
	statRateLimit    = "ratelimit.service.rate_limit."
	statNotFound     = ".domain_not_found"
	statLoadSuccess  = "ratelimit.service.config_load_success"
	statLoadError    = "ratelimit.service.config_load_error"
	statGlobalShadow = "ratelimit.service.global_shadow_mode"
	statRedisError   = "ratelimit.service.call.should_rate_limit.redis_error"
	statServiceError = "ratelimit.service.call.should_rate_limit.service_error"
	statRequests     = "ratelimit_server.ShouldRateLimit.total_requests"
	statResponseTime = "ratelimit_server.ShouldRateLimit.response_time"
)

// statCounters are the statsd hit counters of one name.
type statCounters = hitCounters[*statsd.Counter, uint64]

// statsdStats counts the request path in statsd. Without a client its
// counters are nil and send nothing.
type statsdStats struct {
	client                                             *statsd.Client // nil without statsd
	requests, globalShadow, redisErrors, serviceErrors *statsd.Counter
	responseTime                                       *statsd.Timer

	// At most maxDomains unknown domains get a name, the rest "_other_".
	maxDomains  int
	mu          sync.Mutex
	notFound    map[string]*statsd.Counter
	notFoundEtc *statsd.Counter
}

func newStatsdStats(c *statsd.Client, maxDomains int) *statsdStats {
	if c == nil {
		return &statsdStats{}
	}
	return &statsdStats{
		client:        c,
		requests:      c.Counter(statRequests),
		globalShadow:  c.Counter(statGlobalShadow),
		redisErrors:   c.Counter(statRedisError),
		serviceErrors: c.Counter(statServiceError),
		responseTime:  c.Timer(statResponseTime),
		maxDomains:    maxDomains,
		notFound:      map[string]*statsd.Counter{},
		notFoundEtc:   c.Counter(statRateLimit + strings.TrimPrefix(otherValues, ".") + statNotFound),
	}
}

// hits returns the counters of name: a rule's path, or a descriptor's
// values.
func (sd *statsdStats) hits(name string) *statCounters {
	base := statRateLimit + statName(name) + "."
	c := new(statCounters)
	for k, h := range hitKinds {
		c[k] = sd.client.Counter(base + h.stat)
	}
	return c
}

// decision counts an answer, as the reference's interceptor does, and an
// error not the store's as a service error.
func (sd *statsdStats) decision(d time.Duration, err error) {
	sd.requests.Inc()
	sd.responseTime.Observe(d)
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Internal:
		sd.serviceErrors.Inc()
	}
}

// domainNotFound counts the descriptors of a request for an unknown
// domain, as the reference server does.
func (sd *statsdStats) domainNotFound(domain string, descriptors int) {
	if sd.client == nil {
		return
	}
	sd.mu.Lock()
	c := sd.notFound[domain]
	if c == nil && len(sd.notFound) < sd.maxDomains {
		c = sd.client.Counter(statRateLimit + statName(domain) + statNotFound)
		sd.notFound[domain] = c
	}
	sd.mu.Unlock()
	if c == nil {
		c = sd.notFoundEtc
	}
	c.Add(uint64(descriptors))
}

// ipv4 finds the addresses whose dots the reference server replaces, so
// that they do not split a name into levels.
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statName is name with the dots of IPv4 addresses made '_', as the
// reference server writes it ("remote_address_10_0_0_1").
func statName(name string) string {
	return ipv4.ReplaceAllStringFunc(name, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
