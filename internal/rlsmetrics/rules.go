package rlsmetrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/pkg/rules"
)

// RegisterRuleLoads registers on reg the metrics of the rule loads that
// status reports (rules.Watcher.Status), read at each scrape.
func RegisterRuleLoads(reg prometheus.Registerer, status func() rules.Status) error {
	reloads := prometheus.NewDesc("floodgate_rules_reloads_total",
		"Reloads of the rules (rule files, or xDS pushes) after the first load, by result.", []string{"result"}, nil)
	cs := []prometheus.Collector{
		&reloadCollector{status: status, desc: reloads},
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

// reloadCollector exposes the loads' counts as one counter vector.
type reloadCollector struct {
	status func() rules.Status
	desc   *prometheus.Desc
}

func (c *reloadCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *reloadCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Reloads-st.Failures), "success")
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(st.Failures), "failure")
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
