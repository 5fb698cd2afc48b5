package rlsmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/pkg/rules"
)

// RegisterRuleLoads registers on reg the metrics of the rule loads that
// status reports (rules.Watcher.Status), read at each scrape.
func RegisterRuleLoads(reg prometheus.Registerer, status func() rules.Status) error {
	reloads := func(result string, n func(rules.Status) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floodgate_rules_reloads_total",
			Help:        "Reloads of the rules (rule files, or xDS pushes) after the first load, by result.",
			ConstLabels: prometheus.Labels{"result": result}}, func() float64 { return float64(n(status())) })
	}
	cs := []prometheus.Collector{
		reloads("success", func(st rules.Status) uint64 { return st.Reloads - st.Failures }),
		reloads("failure", func(st rules.Status) uint64 { return st.Failures }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_rules_version",
			Help: "Version of the rules in force: the number of good loads that changed them."},
			func() float64 { return float64(status().Version) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floodgate_rules_last_success_timestamp_seconds",
			Help: "Unix time of the load of the rules in force."},
			func() float64 { return float64(status().LoadedAt.UnixNano()) / 1e9 }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// StatsdRuleLoads sends the rule loads that status reports as the
// reference server's config_load_success (the first load and good
// reloads) and config_load_error.
func StatsdRuleLoads(c *statsd.Client, status func() rules.Status) {
	c.CounterFunc(statLoadSuccess, func() uint64 {
		st := status()
		return 1 + st.Reloads - st.Failures
	})
	c.CounterFunc(statLoadError, func() uint64 { return status().Failures })
}
