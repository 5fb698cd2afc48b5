package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterRuleMetrics registers on reg the metrics of the rule loads, read
// from rs.Status at each scrape: floodgate_rules_reloads_total{result}
// (success, failure), floodgate_rules_version and
// floodgate_rules_last_success_timestamp_seconds.
func RegisterRuleMetrics(reg prometheus.Registerer, rs Rules) error {
	reloads := prometheus.NewDesc("floodgate_rules_reloads_total",
		"Reloads of the rules (rule files, or xDS pushes) after the first load, by result.", []string{"result"}, nil)
	cs := []prometheus.Collector{
		&reloadCollector{rs: rs, desc: reloads},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_rules_version",
			Help: "Version of the rules in force: the number of good loads that changed them."},
			func() float64 { return float64(rs.Status().Version) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_rules_last_success_timestamp_seconds",
			Help: "Unix time of the load of the rules in force."},
			func() float64 { return float64(rs.Status().LoadedAt.UnixNano()) / 1e9 }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// reloadCollector exposes the Watcher's counts as one counter vector.
type reloadCollector struct {
	rs   Rules
	desc *prometheus.Desc
}

func (c *reloadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *reloadCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.rs.Status()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Reloads-st.Failures), "success")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Failures), "failure")
}

// RegisterMetrics registers on reg the metrics of the listeners,
// labelled by listener (grpc, http, debug, prometheus) once Run has opened
// them:
// floodgate_connections_open, and floodgate_connections_refused_total
// for those closed at once for being over the listener's bound
// (Options.Conns).
func (s *Server) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(&connCollector{s: s,
		open: prometheus.NewDesc("floodgate_connections_open",
			"Connections open on a listener.", []string{"listener"}, nil),
		refused: prometheus.NewDesc("floodgate_connections_refused_total",
			"Connections closed as soon as accepted because the listener had its maximum open.", []string{"listener"}, nil),
	})
}

type connCollector struct {
	s             *Server
	open, refused *prometheus.Desc
}

func (c *connCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.refused
}

func (c *connCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.mu.Lock()
	ls := c.s.listeners
	c.s.mu.Unlock()
	for _, l := range []*connListener{ls.grpc, ls.http, ls.debug, ls.prom} {
		if l == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(l.open()), l.name)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(l.refused.Load()), l.name)
	}
}
