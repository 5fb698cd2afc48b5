package examples_test

import (
	"bufio"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/floodgate/floodgate/internal/otlptest"
)

// egStat is the reference's statsd name of the pushed rule.
const egStat = "ratelimit.service.rate_limit.first-listener.first-route_first-route.rule-0-match-0"

// checkPrometheus scrapes the metrics port where the pod's annotations
// say, as Envoy Gateway's Prometheus does, once the first statsd flush
// has fed it: the pushed rule's series are there, named by Envoy
// Gateway's mapping, and floodgate's own are not (they stay on the HTTP
// port). Without Prometheus there is no metrics port.
func (r *egRun) checkPrometheus(t *testing.T) {
	t.Helper()
	ports := map[string]int32{}
	for _, p := range r.c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if r.promURL == "" {
		if _, ok := ports["metrics"]; ok {
			t.Error("a metrics port without PROMETHEUS_ADDR")
		}
		return
	}
	_, addrPort, _ := net.SplitHostPort(r.env("PROMETHEUS_ADDR"))
	if a := r.dep.Spec.Template.Annotations["prometheus.io/port"]; a != addrPort || strconv.Itoa(int(ports["metrics"])) != a {
		t.Errorf("scraped on %s, the metrics port is %d, PROMETHEUS_ADDR's %s: want one port", a, ports["metrics"], addrPort)
	}
	series := `ratelimit_service_rate_limit_total_hits{domain="first-listener",key1="first-route_first-route",key2="rule-0-match-0"}`
	want := strconv.Itoa(r.calls)
	body := waitFor(t, r.promURL, series, want, 30*time.Second)
	over := `ratelimit_service_rate_limit_over_limit{domain="first-listener",key1="first-route_first-route",key2="rule-0-match-0"} ` + strconv.Itoa(r.over)
	if !strings.Contains(body, over+"\n") {
		t.Errorf("no %s in:\n%s", over, body)
	}
	if strings.Contains(body, "floodgate_") {
		t.Error("floodgate_* metrics on the Prometheus port; they belong on the HTTP port's /metrics")
	}
	if _, own := httpGet(t, "http://"+r.f.HTTPAddr+"/metrics"); !strings.Contains(own, "floodgate_hits_total") {
		t.Error("no floodgate_hits_total on the HTTP port's /metrics")
	}
}

// waitFor scrapes url until series has the value want, and returns the
// last scrape.
func waitFor(t *testing.T, url, series, want string, timeout time.Duration) string {
	t.Helper()
	var body string
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		var code int
		if code, body = httpGet(t, url); code == http.StatusOK && strings.Contains(body, series+" "+want+"\n") {
			return body
		}
	}
	t.Fatalf("%s: no %s %s after %v:\n%s", url, series, want, timeout, body)
	return ""
}

// checkStatsd: with USE_STATSD=true too, the rule's counters reach the
// statsd server, beside Prometheus.
func (r *egRun) checkStatsd(t *testing.T) {
	t.Helper()
	if r.statsd == nil {
		return
	}
	if !r.statsd.wait(egStat+".total_hits:", 30*time.Second) {
		t.Errorf("no %s.total_hits on the statsd server; got %q", egStat, r.statsd.all())
	}
}

// checkTraces: with TRACING_ENABLED=true, spans reach the collector at
// OTEL_EXPORTER_OTLP_ENDPOINT, with the service's name, namespace and the
// pod's name as Envoy Gateway sets them.
func (r *egRun) checkTraces(t *testing.T) {
	t.Helper()
	if r.traces == nil {
		if r.env("TRACING_ENABLED") == "true" {
			t.Error("tracing on, but no collector endpoint moved")
		}
		return
	}
	spans := r.traces.Wait(t, "ShouldRateLimit Execution", 1, 30*time.Second)
	s, _ := otlptest.Find(spans, "ShouldRateLimit Execution")
	for k, want := range map[string]string{"service.name": r.env("TRACING_SERVICE_NAME"),
		"service.namespace": r.env("TRACING_SERVICE_NAMESPACE"), "service.instance.id": r.pod} {
		if s.Resource[k] != want {
			t.Errorf("span resource %s = %v, want %q", k, s.Resource[k], want)
		}
	}
}

// tcpLines is a statsd server over TCP, floodgate's protocol for plain
// statsd as the reference's: it keeps the lines it receives.
type tcpLines struct {
	l     net.Listener
	mu    sync.Mutex
	lines []string
}

func listenTCPLines(t *testing.T) *tcpLines {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpLines{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					s.mu.Lock()
					s.lines = append(s.lines, sc.Text())
					s.mu.Unlock()
				}
			}()
		}
	}()
	return s
}

func (s *tcpLines) port() string {
	_, port, _ := net.SplitHostPort(s.l.Addr().String())
	return port
}

func (s *tcpLines) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// wait reports whether a line starting with prefix arrives within timeout.
func (s *tcpLines) wait(prefix string, timeout time.Duration) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if slices.ContainsFunc(s.all(), func(l string) bool { return strings.HasPrefix(l, prefix) }) {
			return true
		}
	}
	return false
}

// unservedPanels are the metrics Envoy Gateway's dashboard queries that
// neither floodgate nor the reference serves, with why: its panel stays
// empty either way.
var unservedPanels = map[string]string{
	"go_memstats_gc_cpu_fraction": "client_golang stopped exporting it in v1.12; the reference (v1.19.1) and floodgate (v1.25) serve go_* without it",
}

// checkDashboard checks the panels of Envoy Gateway's rate-limit
// dashboard against what its Prometheus scrapes from the default
// Deployment's metrics port, once the dashboard's rule has been called
// to its limit and past it: every selector, parsed with Prometheus's
// PromQL parser, selects a series, its DefaultDomain variable at its
// default, the labels Prometheus adds from the pod's labels
// (app_kubernetes_io_component) matched against the Deployment's pod
// labels.
func (r *egRun) checkDashboard(t *testing.T) {
	t.Helper()
	if !r.dashboard() {
		return
	}
	d := loadDashboard(t, filepath.Join(envoyGatewayDir, "global-ratelimit.json"))
	domain := d.variable(t, "DefaultDomain")
	served := scrapeSeries(t, r.promURL)
	podLabels := map[string]string{}
	for k, v := range r.dep.Spec.Template.Labels {
		podLabels[model.EscapeName(k, model.UnderscoreEscaping)] = v
	}
	checked := 0
	for _, q := range d.queries(t) {
		if !strings.HasPrefix(q.where, "panel") {
			continue // its variables list Envoy Gateway's controller, not this process
		}
		sels, err := promqlSelectors(strings.ReplaceAll(q.expr, "$DefaultDomain", domain))
		if err != nil {
			t.Fatalf("%s: %v", q.where, err)
		}
		for _, sel := range sels {
			if why, ok := unservedPanels[sel.Name]; ok {
				if len(served[sel.Name]) > 0 {
					t.Errorf("%s: %s is served, which unservedPanels says is not (%s)", q.where, sel.Name, why)
				}
				continue
			}
			if !selects(sel, served[sel.Name], podLabels) {
				t.Errorf("%s: %s selects none of %d series %q serves", q.where, sel, len(served[sel.Name]), sel.Name)
			}
			checked++
		}
	}
	if checked < 5 {
		t.Errorf("%d of the dashboard's selectors checked, want its 5 panels' at least", checked)
	}
}

// selects reports whether one of series (each one's labels) matches every
// matcher of sel, a label the pod's labels give matched against those.
func selects(sel *parser.VectorSelector, series []map[string]string, podLabels map[string]string) bool {
	for _, labels := range series {
		all := true
		for _, m := range sel.LabelMatchers {
			v, fromPod := podLabels[m.Name]
			if !fromPod {
				v = labels[m.Name]
			}
			if m.Name != "__name__" && !m.Matches(v) {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// variable returns the current value of the dashboard's custom variable
// name.
func (d dashboard) variable(t *testing.T, name string) string {
	t.Helper()
	for _, v := range d.Templating.List {
		if q, ok := v.Query.(string); ok && v.Name == name && v.Type == "custom" {
			return q
		}
	}
	t.Fatalf("the dashboard has no custom variable %s", name)
	return ""
}

// scrapeSeries returns the series a scrape of url serves, by metric
// name, as their labels; a histogram's also as name_bucket, _sum and
// _count, as Prometheus stores them.
func scrapeSeries(t *testing.T, url string) map[string][]map[string]string {
	t.Helper()
	out := map[string][]map[string]string{}
	for name, mf := range scrapeFamilies(t, url) {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			names := []string{name}
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				names = append(names, name+"_bucket", name+"_sum", name+"_count")
			}
			for _, n := range names {
				out[n] = append(out[n], labels)
			}
		}
	}
	return out
}
