package dropin

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/floodgate/floodgate/internal/harness"
)

// mapping is the statsd_exporter mapping a scenario's servers serve
// their stats to Prometheus with (USE_PROMETHEUS=true).
type mapping int

const (
	noPrometheus     mapping = iota
	envoyGateway             // Envoy Gateway's, at PROMETHEUS_MAPPER_YAML as it deploys them
	referenceMapping         // none given: the reference's own
)

// envoyGatewayMapping is Envoy Gateway's file (testdata/envoy-gateway).
var envoyGatewayMapping = filepath.Join("..", "..", "testdata", "envoy-gateway", "statsd_conf.yaml")

// vars returns the variables that have a server serve its stats to
// Prometheus with m on a free port, and the URL to scrape.
func (m mapping) vars(t *testing.T) (url string, env []string) {
	t.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(harness.FreePort(t))
	env = []string{"USE_STATSD=false", "USE_PROMETHEUS=true", "PROMETHEUS_ADDR=" + addr,
		"STATS_FLUSH_INTERVAL=" + statsFlush.String()}
	if m == envoyGateway {
		file, err := filepath.Abs(envoyGatewayMapping)
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "PROMETHEUS_MAPPER_YAML="+file)
	}
	return "http://" + addr + "/metrics", env
}

// sample is one series' value and its family's type.
type sample struct {
	typ   string
	value float64
}

// scrapePrometheus returns every series url serves, by name and labels as
// Prometheus's text format writes them (a histogram as its _bucket, _sum
// and _count, a summary as its quantiles, _sum and _count).
func scrapePrometheus(t *testing.T, url string) map[string]sample {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %d %v\n%s", url, resp.StatusCode, err, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	out := map[string]sample{}
	for name, mf := range families {
		typ := strings.ToLower(mf.GetType().String())
		for _, m := range mf.GetMetric() {
			for suffix, v := range values(mf.GetType(), m) {
				out[seriesName(name+suffix.name, m.GetLabel(), suffix.label)] = sample{typ, v}
			}
		}
	}
	return out
}

// suffix is a part of a series of a histogram or summary: its name's
// suffix and the label it adds (le, quantile).
type suffix struct{ name, label string }

// values returns the values of m, a metric of a family of type typ, by
// the part of it they are.
func values(typ dto.MetricType, m *dto.Metric) map[suffix]float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return map[suffix]float64{{}: m.GetCounter().GetValue()}
	case dto.MetricType_GAUGE:
		return map[suffix]float64{{}: m.GetGauge().GetValue()}
	case dto.MetricType_UNTYPED:
		return map[suffix]float64{{}: m.GetUntyped().GetValue()}
	case dto.MetricType_HISTOGRAM:
		h := m.GetHistogram()
		out := map[suffix]float64{{name: "_sum"}: h.GetSampleSum(), {name: "_count"}: float64(h.GetSampleCount())}
		for _, b := range h.GetBucket() {
			out[suffix{"_bucket", `le="` + strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64) + `"`}] = float64(b.GetCumulativeCount())
		}
		return out
	case dto.MetricType_SUMMARY:
		s := m.GetSummary()
		out := map[suffix]float64{{name: "_sum"}: s.GetSampleSum(), {name: "_count"}: float64(s.GetSampleCount())}
		for _, q := range s.GetQuantile() {
			out[suffix{"", `quantile="` + strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64) + `"`}] = q.GetValue()
		}
		return out
	}
	return nil
}

// seriesName is name{labels}, the labels sorted, extra among them.
func seriesName(name string, labels []*dto.LabelPair, extra string) string {
	var parts []string
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	if extra != "" {
		parts = append(parts, extra)
	}
	if len(parts) == 0 {
		return name
	}
	sort.Strings(parts)
	return name + "{" + strings.Join(parts, ",") + "}"
}

// settled scrapes a server's Prometheus port until its statsd series
// (ratelimit*) have not changed for five flush intervals, by when it has
// flushed what the calls counted, and returns the last scrape. A scrape
// reads the exporter's series one after the other, so the last one is
// taken after the series stopped changing.
func settled(t *testing.T, s server) map[string]sample {
	t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for since := time.Now(); time.Since(since) < 5*statsFlush; time.Sleep(statsFlush / 4) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: its Prometheus series kept changing for 30 s", s.Name())
		}
		if now := statsdSeries(scrapePrometheus(t, s.prometheus)); now != last {
			last, since = now, time.Now()
		}
	}
	return scrapePrometheus(t, s.prometheus)
}

// statsdSeries is the series of the statsd stats, but the runtime's,
// which move at every flush, as one string.
func statsdSeries(all map[string]sample) string {
	var lines []string
	for name, s := range all {
		if strings.HasPrefix(name, "ratelimit") && !strings.HasPrefix(name, "ratelimit_go_") {
			lines = append(lines, fmt.Sprintf("%s %s %v", name, s.typ, s.value))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// prometheusRow is docs/migrating.md's row of the differences between the
// series the two servers serve to Prometheus.
const prometheusRow = "What differs: Prometheus on `PROMETHEUS_ADDR` (`USE_PROMETHEUS=true`)"

// promDifference is one of prometheusRow's differences: the series it
// concerns and how they differ.
type promDifference struct {
	what   string
	series *regexp.Regexp
	how    differs
}

// differs is how a promDifference's series differ.
type differs int

const (
	referenceOnly differs = iota // served by the reference alone
	eitherOnly                   // each server serves some the other does not
	inValue                      // both serve them, of one type, with other values
	plusJSON                     // floodgate's value is the reference's and one per /json call
)

var promDifferences = []promDifference{
	{"the stats floodgate does not send, as in statsd", regexp.MustCompile(`^(ratelimit_redis_pool_|runtime_)`), referenceOnly},
	{"gRPC health checks, which floodgate does not count", regexp.MustCompile(`grpc_method="Check"`), referenceOnly},
	{"total_requests and response_time count /json answers too", regexp.MustCompile(`^ratelimit_service_(total_requests|response_time_seconds_count|response_time_seconds_bucket\{.*le="\+Inf")`), plusJSON},
	{"the response times each server measures of itself", regexp.MustCompile(`^ratelimit_service_response_time_seconds_(sum|bucket)`), inValue},
	{"the Go runtime's and the process's series of client_golang v1.25 (the reference's v1.19.1)", regexp.MustCompile(`^(go|process)_`), eitherOnly},
	{"each process's own runtime and scrapes", regexp.MustCompile(`^(ratelimit_go_|promhttp_)`), inValue},
	{"statsd_exporter's counts of each flush's events", regexp.MustCompile(`^statsd_exporter_`), inValue},
}

// checkPrometheus compares the series both servers serve to Prometheus
// once the calls are made: the same names, labels, types and values, but
// for the differences docs/migrating.md names (promDifferences), each of
// which must hold as it says.
func checkPrometheus(t *testing.T, ref, fg server, steps []played) {
	t.Helper()
	checkRow(t, prometheusRow)
	jsonCalls := 0
	for _, p := range steps {
		if p.json != "" {
			jsonCalls++
		}
	}
	r, f := settled(t, ref), settled(t, fg)
	for _, name := range keys(r, f) {
		rs, inRef := r[name]
		fs, inFg := f[name]
		if inRef && inFg && rs == fs {
			continue
		}
		d, ok := promDifferenceOf(name)
		if !ok || !d.holds(rs, inRef, fs, inFg, jsonCalls) {
			t.Errorf("prometheus %s: reference %s, floodgate %s%s", name, shown(rs, inRef), shown(fs, inFg), d.String())
		}
	}
}

// promDifferenceOf returns the difference of series, if one names it.
func promDifferenceOf(series string) (promDifference, bool) {
	for _, d := range promDifferences {
		if d.series.MatchString(series) {
			return d, true
		}
	}
	return promDifference{}, false
}

// holds reports whether the series' samples differ as d says.
func (d promDifference) holds(r sample, inRef bool, f sample, inFg bool, jsonCalls int) bool {
	switch d.how {
	case referenceOnly:
		return inRef && !inFg
	case eitherOnly:
		return inRef != inFg || r.typ == f.typ
	case inValue:
		return inRef && inFg && r.typ == f.typ
	case plusJSON:
		return inRef && inFg && r.typ == f.typ && f.value == r.value+float64(jsonCalls)
	}
	return false
}

func (d promDifference) String() string {
	if d.series == nil {
		return ""
	}
	return " (docs/migrating.md: " + prometheusRow + ": " + d.what + ", which this does not show)"
}

// checkRow fails t unless docs/migrating.md has row ("What differs: X" for
// the table row whose first cell is X).
func checkRow(t *testing.T, row string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "migrating.md"))
	if err != nil {
		t.Fatal(err)
	}
	if cell, ok := strings.CutPrefix(row, "What differs: "); !ok || !strings.Contains(string(doc), "\n| "+cell+" |") {
		t.Errorf("docs/migrating.md has no row %q", row)
	}
}

func shown(s sample, ok bool) string {
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%s %v", s.typ, s.value)
}
