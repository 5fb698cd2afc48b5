// Package promsink serves the statsd stats as Prometheus metrics, as the
// reference server does with USE_PROMETHEUS: each flush of a
// statsd.Client goes through prometheus/statsd_exporter's mapper and
// exporter (v0.26.1, the reference's: newer ones refuse the timer_type of
// Envoy Gateway's mapping), and the metrics are served from a registry of
// their own with the Go runtime's, the process's and the exporter's, not
// floodgate_*.
package promsink

import (
	"cmp"
	_ "embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/statsd_exporter/pkg/event"
	"github.com/prometheus/statsd_exporter/pkg/exporter"
	"github.com/prometheus/statsd_exporter/pkg/mapper"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/pkg/option"
)

// DefaultMapping is the reference server's own mapping, used when
// Options.MapperFile is empty; its response time is in seconds.
//
//go:embed default_mapper.yaml
var DefaultMapping string

// millisScale is DefaultMapping's line that Options.ResponseTimeMillis
// removes.
const millisScale = "    scale: 0.001\n"

// Options configure a Sink. The zero value maps with DefaultMapping.
type Options struct {
	// MapperFile is a statsd_exporter mapping file (the reference's
	// PROMETHEUS_MAPPER_YAML); empty means DefaultMapping. A missing file
	// (an optional ConfigMap not there) maps nothing, as in the reference,
	// with a warning; one that cannot be read or parsed is an error.
	MapperFile string
	// ResponseTimeMillis keeps DefaultMapping's response time in
	// milliseconds (PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS).
	ResponseTimeMillis bool
	// Logger receives the warning of a missing MapperFile.
	Logger *slog.Logger
}

const (
	eventBuffer = 1024 // batches waiting for the exporter; a flush is a few hundred
	maxBatch    = 1024 // events in one batch
)

// Sink is a statsd.Sink that feeds statsd_exporter and serves its metrics
// (Handler, safe for concurrent use). Close it when done.
type Sink struct {
	registry *prometheus.Registry
	events   chan event.Events
	done     chan struct{} // closed when the exporter has stopped

	mu     sync.RWMutex // guards closed, and sending on events
	closed bool
}

var _ statsd.Sink = (*Sink)(nil)

// New returns a Sink mapping with opts, its exporter running until Close.
func New(opts Options) (*Sink, error) {
	logger := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	reg := prometheus.NewRegistry()
	m := &mapper.MetricMapper{Registerer: reg}
	if err := loadMapping(m, opts, logger); err != nil {
		return nil, err
	}
	s := &Sink{registry: reg, events: make(chan event.Events, eventBuffer), done: make(chan struct{})}
	// statsd_exporter's own metrics, named as the reference (and the
	// exporter) names them.
	actions := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_actions_total",
		Help: "The total number of StatsD events by action."}, []string{"action"})
	unmapped := prometheus.NewCounter(prometheus.CounterOpts{Name: "statsd_exporter_events_unmapped_total",
		Help: "The total number of StatsD events no mapping was found for."})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_error_total",
		Help: "The total number of StatsD events discarded due to errors."}, []string{"reason"})
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_total",
		Help: "The total number of StatsD events seen."}, []string{"type"})
	conflicts := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "statsd_exporter_events_conflict_total",
		Help: "The total number of StatsD events with conflicting names."}, []string{"type"})
	metrics := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "statsd_exporter_metrics_total",
		Help: "The total number of metrics."}, []string{"type"})
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		actions, unmapped, errs, events, conflicts, metrics)
	// The exporter logs only drops, which its metrics count.
	exp := exporter.NewExporter(reg, m, log.NewNopLogger(), actions, unmapped, errs, events, conflicts, metrics)
	go func() {
		defer close(s.done)
		exp.Listen(s.events)
	}()
	return s, nil
}

// loadMapping reads the mapping opts ask for into m.
func loadMapping(m *mapper.MetricMapper, opts Options, logger *slog.Logger) error {
	if opts.MapperFile == "" {
		mapping := DefaultMapping
		if opts.ResponseTimeMillis {
			mapping = strings.Replace(mapping, millisScale, "", 1)
		}
		if err := m.InitFromYAMLString(mapping); err != nil {
			return fmt.Errorf("promsink: DefaultMapping: %w", err)
		}
		return nil
	}
	data, err := os.ReadFile(opts.MapperFile)
	if errors.Is(err, fs.ErrNotExist) {
		logger.Warn("prometheus: the mapping file does not exist: every stat is served under its escaped statsd name, as the reference serves them then; dashboards that read mapped names stay empty", "file", opts.MapperFile)
		return nil
	}
	if err == nil {
		err = m.InitFromYAMLString(string(data))
	}
	if err != nil {
		return &option.Error{Options: "promsink.Options", Field: "MapperFile", Value: opts.MapperFile, Err: err}
	}
	return nil
}

// Counter adds increase to the counter name maps to.
func (s *Sink) Counter(name string, increase uint64) {
	s.send(event.Events{&event.CounterEvent{CMetricName: name, CValue: float64(increase), CLabels: map[string]string{}}})
}

// Gauge sets the gauge name maps to.
func (s *Sink) Gauge(name string, value uint64) {
	s.send(event.Events{&event.GaugeEvent{GMetricName: name, GValue: float64(value), GLabels: map[string]string{}}})
}

// Timer observes millis count times in the histogram or summary name maps
// to: one event per observation, as the reference sends them.
func (s *Sink) Timer(name string, millis, count uint64) {
	e := &event.ObserverEvent{OMetricName: name, OValue: float64(millis), OLabels: map[string]string{}}
	for count > 0 {
		n := min(count, maxBatch)
		batch := make(event.Events, n)
		for i := range batch {
			// The exporter writes the mapping's labels into the event's
			// map, the same for every copy: one event serves them all.
			batch[i] = e
		}
		s.send(batch)
		count -= n
	}
}

// send queues events for the exporter; after Close they are dropped.
func (s *Sink) send(events event.Events) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if !s.closed {
		s.events <- events
	}
}

// Handler serves the metrics in Prometheus's text format, counting its
// scrapes (promhttp_metric_handler_*), as the reference's handler does.
func (s *Sink) Handler() http.Handler {
	return promhttp.InstrumentMetricHandler(s.registry, promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
}

// Close stops the exporter once it has taken the events sent so far;
// what is sent after is dropped. It may be called more than once.
func (s *Sink) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.events)
	}
	s.mu.Unlock()
	<-s.done
}
