package settings

import (
	"flag"

	"github.com/floodgate/floodgate/internal/capture"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/tracing"
)

var observeRows = section("Observability: logs, metrics, statsd", []Setting{
	{Flag: "log-level",
		Usage:      "log level: debug, info, warn or error",
		Doc:        "`debug`, `info`, `warn`, `error` (`trace`, `warning`, `fatal`, `panic` accepted)",
		DefaultDoc: "`info`",
		At:         func(c *Config) any { return &c.Log.Level },
		Type:       "level"},
	{Flag: "log-format",
		Usage:   "log format: text or json",
		Doc:     "`text` or `json`",
		At:      func(c *Config) any { return &c.Log.Format },
		Default: LogFormat("text"),
		Type:    "string"},
	{Flag: "metric-value-series",
		Usage:   "most distinct value labels per detailed_metric or value_to_metric rule; the rest count under <rule>._other_",
		Doc:     "most distinct value labels a `detailed_metric` or `value_to_metric` rule creates; later values count under `<rule path>._other_`",
		At:      func(c *Config) any { return &c.Metrics.MaxValueSeries },
		Default: rlsmetrics.DefaultMaxValueSeries},
	{Flag: "statsd",
		Usage: "also send the reference server's statsd stats (ratelimit.service.*); Prometheus /metrics stays on",
		Doc:   "also send the reference's statsd stats (`ratelimit.service.*`) to `-statsd-addr` (`STATSD_HOST`, `STATSD_PORT`; `localhost:8125`) every `-statsd-flush-interval` (`STATS_FLUSH_INTERVAL`, 10s), over `-statsd-protocol` (`STATSD_PROTOCOL`), tagged with `-statsd-tags` (`EXTRA_TAGS`); `-dogstatsd` (`USE_DOG_STATSD`) for DogStatsD, with `-dogstatsd-mogrifiers` (`USE_DOG_STATSD_MOGRIFIERS`)",
		At:    func(c *Config) any { return &c.Statsd.On }},
	{Flag: "statsd-addr",
		Usage:   "statsd server, host:port (-statsd)",
		URL:     true,
		At:      func(c *Config) any { return &c.Statsd.Options.Addr },
		Default: statsd.DefaultAddr},
	{Flag: "statsd-protocol",
		Usage: "tcp or udp; empty: tcp for statsd, udp for DogStatsD, as the reference",
		At:    func(c *Config) any { return &c.Statsd.Options.Network }},
	{Flag: "statsd-flush-interval",
		Usage:   "how often statsd counts are sent",
		At:      func(c *Config) any { return &c.Statsd.Options.FlushInterval },
		Default: statsd.DefaultFlushInterval},
	{Flag: "statsd-tags",
		Usage: "tags on every statsd stat, k1:v1,k2:v2 (the reference's EXTRA_TAGS)",
		At:    func(c *Config) any { return &c.Statsd.Options.Tags },
		Value: func(c *Config, _ Lookup) flag.Value {
			return &value[[]statsd.Tag]{p: &c.Statsd.Options.Tags, parse: statsd.ParseTags}
		}},
	{Flag: "dogstatsd",
		Usage: "send DogStatsD (tags as |#k:v) over UDP; implies -statsd",
		At:    func(c *Config) any { return &c.Statsd.Options.DogStatsD }},
	{Flag: "dogstatsd-mogrifiers",
		Usage: "the reference's USE_DOG_STATSD_MOGRIFIERS: names whose DOG_STATSD_MOGRIFIER_<NAME>_* variables rename and tag stats",
		At:    func(c *Config) any { return &c.Statsd.Options.Mogrifiers },
		Value: func(c *Config, env Lookup) flag.Value {
			parse := func(s string) ([]statsd.Mogrifier, error) { return statsd.MogrifiersFromEnv(s, env) }
			return &value[[]statsd.Mogrifier]{p: &c.Statsd.Options.Mogrifiers, parse: parse}
		}},
	{Flag: "prometheus-addr",
		Usage:      "a listener of its own serving the reference server's stats as Prometheus metrics (ratelimit_service_*), mapped by statsd_exporter (-prometheus-mapper), at -prometheus-path; empty: none. floodgate's own metrics stay on the HTTP port's /metrics",
		Doc:        "a listener of its own serving the reference's stats as Prometheus metrics, as the reference does with `USE_PROMETHEUS=true` (`PROMETHEUS_ADDR`, `:9090` when unset): the statsd stats of every `-statsd-flush-interval`, through statsd_exporter's mapper and exporter (`-prometheus-mapper`), with the Go runtime's and the process's; empty: none. floodgate's own `floodgate_*` metrics stay on the HTTP port's `/metrics` (see [operations](docs/operations.md#prometheus-as-the-reference-serves-it))",
		DefaultDoc: "empty",
		At:         func(c *Config) any { return &c.Server.PrometheusAddr }},
	{Flag: "prometheus-path",
		Usage:   "path of -prometheus-addr's metrics",
		At:      func(c *Config) any { return &c.Server.PrometheusPath },
		Default: server.DefaultPrometheusPath},
	{Flag: "prometheus-mapper",
		Usage:      "statsd_exporter mapping file naming -prometheus-addr's series (Envoy Gateway's /etc/statsd-exporter/conf.yaml); empty: the reference server's own mapping",
		Doc:        "statsd_exporter mapping file naming `-prometheus-addr`'s series (Envoy Gateway mounts its own at `/etc/statsd-exporter/conf.yaml`); empty: the reference's own mapping. A file that does not exist maps nothing, as in the reference (every stat under its escaped name), with a warning; one that is not a mapping stops the start",
		DefaultDoc: "empty",
		At:         func(c *Config) any { return &c.Prometheus.MapperFile }},
	{Flag: "prometheus-response-time-ms",
		Usage: "keep the reference's own mapping's response time histogram in milliseconds instead of seconds",
		At:    func(c *Config) any { return &c.Prometheus.ResponseTimeMillis }},
})

var tracingRows = section("Observability: tracing (OpenTelemetry)", []Setting{
	{Flag: "tracing",
		Usage: "export OpenTelemetry traces over OTLP: a span per request, continuing the caller's W3C traceparent, and one per store call; the endpoint is OTEL_EXPORTER_OTLP_ENDPOINT's (see docs/operations.md)",
		Doc:   "export OpenTelemetry traces over OTLP (`-tracing-protocol`/`TRACING_EXPORTER_PROTOCOL` http or grpc; `-tracing-service-name`, `-tracing-service-namespace`, `-tracing-service-instance-id`, `-tracing-sampling-rate` from the `TRACING_SERVICE_*`/`TRACING_SAMPLING_RATE` variables; the endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT`): a span per request continuing the caller's `traceparent`, and one per store call (see [operations](docs/operations.md#tracing))",
		At:    func(c *Config) any { return &c.Tracing.On }},
	{Flag: "tracing-protocol",
		Usage:   "OTLP protocol: http (port 4318) or grpc (port 4317)",
		At:      func(c *Config) any { return &c.Tracing.Options.Protocol },
		Default: tracing.ProtocolHTTP},
	{Flag: "tracing-service-name",
		Usage:   "the spans' service.name",
		At:      func(c *Config) any { return &c.Tracing.Options.ServiceName },
		Default: tracing.DefaultServiceName},
	{Flag: "tracing-service-namespace",
		Usage: "the spans' service.namespace; empty: none",
		At:    func(c *Config) any { return &c.Tracing.Options.ServiceNamespace }},
	{Flag: "tracing-service-instance-id",
		Usage: "the spans' service.instance.id; empty: a random UUID at each start",
		At:    func(c *Config) any { return &c.Tracing.Options.ServiceInstanceID }},
	{Flag: "tracing-sampling-rate",
		Usage:   "share of the traces starting here that are sampled, 0 to 1; a caller's traceparent decides for its own trace",
		At:      func(c *Config) any { return &c.Tracing.Options.SamplingRate },
		Default: tracing.DefaultSamplingRate},
})

var captureRows = section("Traffic capture (for floodgate replay)", []Setting{
	{Flag: "capture",
		Usage:      "record the requests served to this file (JSON lines, appended) for floodgate replay; empty: off",
		Doc:        "append the requests served to this file, one JSON line each (the `/json` body plus its time), for `floodgate replay`; written off the request path (a request finding the writer behind is not recorded, and counted in `floodgate_capture_lines_total{outcome=\"dropped\"}`). The lines hold the descriptor values as sent (API keys, client addresses, user ids): the file is created mode 0600, an existing one keeps its mode (with a warning if others may read it); handle it as you would an access log",
		DefaultDoc: "none: off",
		At:         func(c *Config) any { return &c.Capture.Path }},
	{Flag: "capture-sample",
		Usage:   "with -capture, the share of requests recorded, in (0, 1], chosen by descriptor: a kept descriptor keeps all its requests",
		Doc:     "share of requests recorded, chosen by a hash of the domain and descriptors: a kept descriptor keeps all its requests",
		At:      func(c *Config) any { return &c.Capture.Options.Sample },
		Default: capture.DefaultSample},
	{Flag: "capture-max-bytes",
		Usage:   "with -capture, the largest the file may grow, in bytes; then recording stops",
		Doc:     "the largest the file may grow (what it held before counts); then recording stops, with a warning",
		At:      func(c *Config) any { return &c.Capture.Options.MaxBytes },
		Default: capture.DefaultMaxBytes},
})

var commandRows = section("Commands", []Setting{
	{Flag: "check",
		Usage:   "validate the rules, print a summary or every error (file:line), and exit 0 or 1",
		At:      func(c *Config) any { return &c.Command.Check },
		Command: true},
	{Flag: "explain",
		Usage:   "print which rule a descriptor (arguments: domain key=value...) matches, and exit",
		At:      func(c *Config) any { return &c.Command.Explain },
		Command: true},
	{Flag: "version",
		Usage:   "print the version and the commit it was built from, and exit",
		At:      func(c *Config) any { return &c.Command.Version },
		Command: true},
})
