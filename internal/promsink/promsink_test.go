package promsink_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/floodgate/floodgate/internal/promsink"
	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/option"
)

// envoyGatewayMapping is the mapping Envoy Gateway ships in its
// statsd-exporter-config ConfigMap (testdata/envoy-gateway/README.md).
var envoyGatewayMapping = filepath.Join("..", "..", "testdata", "envoy-gateway", "statsd_conf.yaml")

// feed sends the stats of a rate-limit server through a statsd.Client
// into a Sink of opts, as the binary does, and returns the series its
// handler serves once the exporter has taken them.
func feed(t *testing.T, opts promsink.Options) map[string]string {
	t.Helper()
	sink, err := promsink.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	c, err := statsd.New(statsd.Options{Sink: sink, NoServer: true, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.Counter("ratelimit.service.rate_limit.d.k.total_hits").Add(3)
	c.Counter("ratelimit.service.rate_limit.d.k.within_limit").Add(2)
	c.Counter("ratelimit.service.rate_limit.d.k.over_limit").Add(1)
	c.Counter("ratelimit.service.rate_limit.d.a_x.b.total_hits").Add(4)
	c.Counter("ratelimit.service.rate_limit.nope.domain_not_found").Add(1)
	c.Counter("ratelimit.service.call.should_rate_limit.redis_error").Add(1)
	c.Counter("ratelimit_server.ShouldRateLimit.total_requests").Add(5)
	c.CounterFunc("ratelimit.service.config_load_success", func() uint64 { return 1 })
	rt := c.Timer("ratelimit_server.ShouldRateLimit.response_time")
	for _, ms := range []int{0, 0, 3, 3, 1500} {
		rt.Observe(time.Duration(ms) * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// The exporter takes the events in its own goroutine: the last ones
	// (the timer's, last created) are in once it has counted 5
	// observations. A scrape reads its collectors one after the other, so
	// the one that saw that count may have missed a series registered
	// while it ran: the next one has them all.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if scrape(t, sink)[`statsd_exporter_events_total{type="observer"}`] == "5" {
			return scrape(t, sink)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the exporter did not take the 5 observations in 5 s: %v", keys(scrape(t, sink)))
		}
	}
}

// scrape returns the series the sink's handler serves, by name and
// labels as Prometheus's text format writes them, with their values, and
// the type of each family as "# TYPE name".
func scrape(t *testing.T, sink *promsink.Sink) map[string]string {
	t.Helper()
	rec := httptest.NewRecorder()
	sink.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for name, mf := range families {
		out["# TYPE "+name] = strings.ToLower(mf.GetType().String())
		for _, m := range mf.GetMetric() {
			series := name + labelString(m.GetLabel())
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[series] = fmt.Sprint(m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				out[series] = fmt.Sprint(m.GetGauge().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[name+"_count"+labelString(m.GetLabel())] = fmt.Sprint(h.GetSampleCount())
				out[name+"_sum"+labelString(m.GetLabel())] = fmt.Sprint(h.GetSampleSum())
			}
		}
	}
	return out
}

func labelString(labels []*dto.LabelPair) string {
	if len(labels) == 0 {
		return ""
	}
	var parts []string
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// TestEnvoyGatewayMapping: the stats of a server, through Envoy Gateway's
// mapping, are the series its dashboard reads: a rule's counters by
// domain and keys, the errors by type, the response time as a histogram
// of milliseconds (its mapping has no scale), and what the mapping does
// not name under statsd_exporter's escaped name; nothing for what was not
// counted; and the runtime's, the process's and the exporter's own
// metrics beside them, as the reference serves them.
func TestEnvoyGatewayMapping(t *testing.T) {
	got := feed(t, promsink.Options{MapperFile: envoyGatewayMapping})
	for series, want := range map[string]string{
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="k"}`:                 "3",
		`ratelimit_service_rate_limit_within_limit{domain="d",key1="k"}`:               "2",
		`ratelimit_service_rate_limit_over_limit{domain="d",key1="k"}`:                 "1",
		`ratelimit_service_rate_limit_total_hits{domain="d",key1="a_x",key2="b"}`:      "4",
		`ratelimit_service_rate_limit_nope_domain_not_found`:                           "1",
		`ratelimit_service_should_rate_limit_error{err_type="redis_error"}`:            "1",
		`ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}`:              "5",
		`ratelimit_service_config_load_success`:                                        "1",
		`ratelimit_service_response_time_seconds_count{grpc_method="ShouldRateLimit"}`: "5",
		`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"}`:   "1506",
		"# TYPE ratelimit_service_response_time_seconds":                               "histogram",
		"# TYPE ratelimit_service_rate_limit_total_hits":                               "counter",
		`statsd_exporter_events_total{type="observer"}`:                                "5",
		"# TYPE go_goroutines":                                                "gauge",
		"# TYPE process_resident_memory_bytes":                                "gauge",
		"# TYPE ratelimit_service_rate_limit_near_limit":                      "",
		`ratelimit_service_should_rate_limit_error{err_type="service_error"}`: "",
	} {
		if want == "" {
			if v, ok := got[series]; ok {
				t.Errorf("%s = %s, want no such series", series, v)
			}
			continue
		}
		if got[series] != want {
			t.Errorf("%s = %q, want %s", series, got[series], want)
		}
	}
}

// TestDefaultMapping: without a mapping file the reference's own mapping
// applies, whose response time is in seconds, or in milliseconds with
// ResponseTimeMillis (the reference's
// PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS); the rest maps as Envoy
// Gateway's, a copy of it.
func TestDefaultMapping(t *testing.T) {
	for _, tc := range []struct {
		opts promsink.Options
		sum  string
	}{
		{promsink.Options{}, "1.506"},
		{promsink.Options{ResponseTimeMillis: true}, "1506"},
		// A mapping file is used as it is.
		{promsink.Options{MapperFile: envoyGatewayMapping, ResponseTimeMillis: true}, "1506"},
	} {
		got := feed(t, tc.opts)
		if s := got[`ratelimit_service_response_time_seconds_sum{grpc_method="ShouldRateLimit"}`]; s != tc.sum {
			t.Errorf("%+v: response time sum %s, want %s", tc.opts, s, tc.sum)
		}
		if v := got[`ratelimit_service_rate_limit_total_hits{domain="d",key1="a_x",key2="b"}`]; v != "4" {
			t.Errorf("%+v: a nested rule's total_hits %q, want 4", tc.opts, v)
		}
	}
}

// TestMissingMappingFile: a mapping file that does not exist (an optional
// ConfigMap that is missing) maps nothing, as the reference then serves,
// with a warning naming it; one that is not YAML is refused, naming the
// file and the line.
func TestMissingMappingFile(t *testing.T) {
	logs := &testlog.Buffer{}
	missing := filepath.Join(t.TempDir(), "conf.yaml")
	got := feed(t, promsink.Options{MapperFile: missing, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if v := got["ratelimit_service_rate_limit_d_k_total_hits"]; v != "3" {
		t.Errorf("unmapped total_hits %q, want 3 under its escaped name; got %v", v, keys(got))
	}
	if !strings.Contains(logs.String(), "the mapping file does not exist") || !strings.Contains(logs.String(), missing) {
		t.Errorf("no warning naming %s:\n%s", missing, logs)
	}

	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("mappings:\n  - match: a.b\n    name: x\n   labels: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := promsink.New(promsink.Options{MapperFile: bad})
	var oe *option.Error
	if !errors.As(err, &oe) || oe.Field != "MapperFile" || oe.Value != bad || !strings.Contains(err.Error(), "yaml: line 3") {
		t.Errorf("a bad mapping: %v, want an error naming the file and line 3", err)
	}
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		if !strings.HasPrefix(k, "go_") && !strings.HasPrefix(k, "process_") && !strings.HasPrefix(k, "# ") {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
