package store

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Register exposes the store's metrics on reg: for Redis and Memcached,
// floodgate_store_healthy; for Redis, floodgate_store_node_healthy per
// node; for memory, its fill and refusals; with the deny cache, its
// answers, misses and entries. Call it once.
func (s *Store) Register(reg prometheus.Registerer) error {
	var cs []prometheus.Collector
	if s.mem == nil {
		cs = append(cs, s.healthGauge())
	}
	if s.redis != nil {
		cs = append(cs, nodeCollector{s: s, desc: prometheus.NewDesc("floodgate_store_node_healthy",
			"Redis only: 1 while calls reach the node, 0 while its circuit breaker is open or probing (the requests that need it are answered by the failure policy). "+
				"One series per node: node is the address configured (on a Cluster, that series is its slot map) or a Cluster master's.",
			[]string{"redis", "node"}, nil)})
	}
	if s.mem != nil {
		cs = append(cs, s.memoryMetrics()...)
	}
	if s.cache != nil {
		cs = append(cs, s.denyCacheMetrics()...)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("store metrics: %w", err)
		}
	}
	return nil
}

// healthGauge is floodgate_store_healthy.
func (s *Store) healthGauge() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "store_healthy",
		Help: "1 while calls reach the limit store, 0 while a circuit breaker of it is open or probing (answers then come from the failure policy; on a Redis Cluster, only those on the failing master's slots, see floodgate_store_node_healthy)."},
		func() float64 {
			if s.Health().Healthy {
				return 1
			}
			return 0
		})
}

// nodeCollector is floodgate_store_node_healthy, one series per Redis
// node, so that an alert names the one that fails.
type nodeCollector struct {
	s    *Store
	desc *prometheus.Desc
}

// Describe sends the one family's description.
func (c nodeCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect sends one series per node.
func (c nodeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.s.redis {
		for _, n := range d.lim.Nodes() {
			addr := n.Addr
			if addr == "" {
				addr = d.addr
			}
			v := 0.0
			if n.Healthy() {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, d.role, addr)
		}
	}
}

// memoryMetrics are the in-memory store's fill and refusals.
func (s *Store) memoryMetrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "memory_entries",
			Help: "Counters held by the in-memory store (expired ones dropped), at most -memory-max-entries."},
			func() float64 { return float64(s.mem.Len()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "memory_refused_total",
			Help: "Requests refused because a shard of the in-memory store was full of live counters; answered by the failure policy."},
			func() float64 { return float64(s.mem.Refused()) }),
	}
}

// denyCacheMetrics are the deny cache's counts.
func (s *Store) denyCacheMetrics() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "deny_cache_answers_total",
			Help: "Store calls answered from the deny cache, without Redis."},
			func() float64 { return float64(s.cache.Stats().Answered) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "floodgate", Name: "deny_cache_misses_total",
			Help: "Store calls the deny cache passed to Redis."},
			func() float64 { return float64(s.cache.Stats().Evaluated) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "floodgate", Name: "deny_cache_entries",
			Help: "Denials held by the deny cache, expired ones included until swept."},
			func() float64 { return float64(s.cache.Len()) }),
	}
}
