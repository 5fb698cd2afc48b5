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

// The reference server's statsd names (envoyproxy/ratelimit, which sends
// them with lyft/gostats), which dashboards and alerts written for it read.
// A rule's counters are statRateLimit, its name, then "." and total_hits,
// over_limit, near_limit, within_limit or shadow_mode; an unknown domain's
// are statRateLimit, the domain, then ".domain_not_found".
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

// statsdStats sends what the request path counts to statsd, under the
// reference server's names. A nil *statsdStats sends nothing.
type statsdStats struct {
	client                                             *statsd.Client
	requests, globalShadow, redisErrors, serviceErrors *statsd.Counter
	responseTime                                       *statsd.Timer

	// Clients choose the domain: at most maxDomains unknown ones get a
	// name of their own, the rest count as domain "_other_".
	maxDomains  int
	mu          sync.RWMutex
	notFound    map[string]*statsd.Counter
	notFoundEtc *statsd.Counter
}

func newStatsdStats(c *statsd.Client, maxDomains int) *statsdStats {
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

// hits returns the counters of name: a rule's path ("domain.key_value…"),
// or a descriptor's values for detailed_metric, value_to_metric and
// overrides.
func (sd *statsdStats) hits(name string) *statCounters {
	base := statRateLimit + statName(name) + "."
	return &statCounters{
		hits:   sd.client.Counter(base + "total_hits"),
		over:   sd.client.Counter(base + "over_limit"),
		near:   sd.client.Counter(base + "near_limit"),
		within: sd.client.Counter(base + "within_limit"),
		shadow: sd.client.Counter(base + "shadow_mode"),
		// Not a reference name: the reference charges every descriptor
		// of a refused request and counts them within_limit.
		notCharged: sd.client.Counter(base + "not_charged"),
	}
}

// decision counts an answer, as the reference server's gRPC interceptor
// does, and an error that is not the store's as a service error (the
// store's are counted by storeFailure).
func (sd *statsdStats) decision(d time.Duration, err error) {
	if sd == nil {
		return
	}
	sd.requests.Inc()
	sd.responseTime.Observe(d)
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Internal:
		sd.serviceErrors.Inc()
	}
}

// domainNotFound counts the descriptors of a request for a domain no rule
// file declares: the reference server counts each descriptor it looks up.
func (sd *statsdStats) domainNotFound(domain string, descriptors int) {
	if sd == nil {
		return
	}
	sd.mu.RLock()
	c := sd.notFound[domain]
	full := len(sd.notFound) >= sd.maxDomains
	sd.mu.RUnlock()
	if c == nil && !full {
		sd.mu.Lock()
		if c = sd.notFound[domain]; c == nil && len(sd.notFound) < sd.maxDomains {
			c = sd.client.Counter(statRateLimit + statName(domain) + statNotFound)
			sd.notFound[domain] = c
		}
		sd.mu.Unlock()
	}
	if c == nil {
		c = sd.notFoundEtc
	}
	c.Add(uint64(descriptors))
}

// globalShadowAnswer counts a request answered OK only because of the
// global shadow mode.
func (sd *statsdStats) globalShadowAnswer() {
	if sd != nil {
		sd.globalShadow.Inc()
	}
}

// storeFailure counts a request whose store call failed, which the
// reference server counts as a Redis error whatever its store.
func (sd *statsdStats) storeFailure() {
	if sd != nil {
		sd.redisErrors.Inc()
	}
}

// ipv4 is what the reference server's SanitizeStatName finds to replace
// the dots of: an IPv4 address in a descriptor value would otherwise split
// the name into levels ("remote_address_10.0.0.1" becomes
// "remote_address_10_0_0_1").
var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// statName is name as the reference server writes it in a stat: dots of
// IPv4 addresses replaced by '_'; statsd.Client replaces its ':' and '|',
// as the reference does too.
func statName(name string) string {
	return ipv4.ReplaceAllStringFunc(name, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}
