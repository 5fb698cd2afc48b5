package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// RegisterMetrics registers on reg, once Run has opened the listeners,
// floodgate_connections_open and floodgate_connections_refused_total (for
// those over the listener's bound), labelled by listener: grpc, http,
// debug, prometheus.
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
	defer c.s.mu.Unlock()
	for _, sl := range c.s.listeners {
		l := sl.conns
		if l == nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(l.open()), l.name)
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(l.refused.Load()), l.name)
	}
}
