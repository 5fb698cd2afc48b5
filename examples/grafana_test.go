package examples_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

const grafanaDashboard = "grafana/floodgate.json"

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	SchemaVersion int `json:"schemaVersion"`
	UID           string
	Title         string
	Panels        []dashboardPanel
	Templating    struct {
		List []struct {
			Name       string
			Type       string
			Query      any
			Definition string
			Datasource any
		}
	}
}

type dashboardPanel struct {
	ID         int
	Type       string
	Title      string
	Datasource any
	Panels     []dashboardPanel // of collapsed rows
	Targets    []struct {
		Expr       string
		Datasource any
	}
}

// loadDashboard reads the Grafana dashboard at path.
func loadDashboard(t *testing.T, path string) dashboard {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where, expr string
}

// queries returns every PromQL expression of the dashboard: the panels'
// targets and the variables' label_values(...) selectors.
func (d dashboard) queries(t *testing.T) []query {
	t.Helper()
	var out []query
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for i, tg := range p.Targets {
				out = append(out, query{fmt.Sprintf("panel %q target %d", p.Title, i), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValuesRE := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		out = append(out, query{"variable " + v.Name, m[1]})
	}
	return out
}

// grafanaIntervalRE finds Grafana's interval variables, which Grafana
// replaces with a duration before it sends a query.
var grafanaIntervalRE = regexp.MustCompile(`\$(?:__rate_interval|__interval|__range)\b|\$\{(?:__rate_interval|__interval|__range)(?::[^}]*)?\}`)

// promqlSelectors parses an expression with Prometheus's PromQL parser,
// once Grafana's interval variables are replaced by a duration as Grafana
// replaces them, and returns its vector selectors. The dashboard's own
// variables ($job, $instance) stay as written: inside a label matcher's
// string the parser reads them as text, and anywhere else they fail.
func promqlSelectors(expr string) ([]*parser.VectorSelector, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaIntervalRE.ReplaceAllString(expr, "5m"))
	if err != nil {
		return nil, err
	}
	var out []*parser.VectorSelector
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out, nil
}

// exportedNames returns the names of the series a scrape of url holds, as
// Prometheus stores them: a histogram's _bucket, _sum and _count, a
// summary's own name and its _sum and _count.
func exportedNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name, mf := range scrapeFamilies(t, url) {
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			names[name+"_bucket"], names[name+"_sum"], names[name+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			names[name], names[name+"_sum"], names[name+"_count"] = true, true, true
		default:
			names[name] = true
		}
	}
	return names
}

// scrapeFamilies returns the metric families a scrape of url holds, as
// Prometheus's text parser reads them.
func scrapeFamilies(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parse := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parse.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", url, err)
	}
	return families
}

// dashboardSubjects are the metrics the dashboard is for.
var dashboardSubjects = []string{"floodgate_hits_total", "floodgate_over_limit_total", "floodgate_decision_duration_seconds_bucket",
	"floodgate_store_duration_seconds_bucket", "floodgate_store_healthy", "floodgate_store_failure_answers_total",
	"floodgate_deny_cache_answers_total", "floodgate_rules_reloads_total", "floodgate_rules_version",
	"floodgate_rules_last_success_timestamp_seconds", "process_cpu_seconds_total", "go_goroutines"}

// checkQueries parses every query of the dashboard with the PromQL parser
// and checks that each selector names a metric that floodgate exports and
// filters on the job and instance variables (the variables' own queries
// on those before them), and that the dashboard shows dashboardSubjects.
func checkQueries(t *testing.T, d dashboard, exported map[string]bool) []error {
	t.Helper()
	var errs []error
	used := map[string][]string{} // metric -> where
	for _, q := range d.queries(t) {
		sels, err := promqlSelectors(q.expr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", q.where, err))
			continue
		}
		if len(sels) == 0 {
			errs = append(errs, fmt.Errorf("%s: %q selects no metric", q.where, q.expr))
		}
		for _, s := range sels {
			if s.Name == "" {
				errs = append(errs, fmt.Errorf("%s: selector %s names no metric", q.where, s))
				continue
			}
			used[s.Name] = append(used[s.Name], q.where)
			want := []string{"job", "instance"}
			if strings.HasPrefix(q.where, "variable job") {
				want = nil
			} else if strings.HasPrefix(q.where, "variable instance") {
				want = want[:1]
			}
			for _, v := range want {
				if !slices.ContainsFunc(s.LabelMatchers, func(m *labels.Matcher) bool {
					return m.Type == labels.MatchRegexp && m.Name == v && m.Value == "$"+v
				}) {
					errs = append(errs, fmt.Errorf("%s: %s does not filter on %s=~\"$%s\"", q.where, s, v, v))
				}
			}
		}
	}
	for _, m := range dashboardSubjects {
		if used[m] == nil {
			errs = append(errs, fmt.Errorf("no panel shows %s", m))
		}
	}
	var missing []string
	for m, where := range used {
		if !exported[m] {
			missing = append(missing, fmt.Sprintf("the dashboard queries %s, which floodgate does not export (%s)", m, strings.Join(where, "; ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		errs = append(errs, errors.New(m))
	}
	return errs
}

// brokenDashboards are edits of the dashboard's queries that checkQueries
// must refuse, with what the error says.
var brokenDashboards = []struct {
	name, old, new, want string
}{
	{"an unbalanced parenthesis", `sum by (code) (rate(`, `sum by (code) (rate((`, "unclosed left parenthesis"},
	{"a function PromQL lacks", `histogram_quantile(0.5, sum by (le) (`, `histogram_quantil(0.5, sum by (le) (`, `unknown function with name "histogram_quantil"`},
	{"a variable where a duration goes", `rate(process_cpu_seconds_total{job=~\"$job\",instance=~\"$instance\"}[$__rate_interval])`,
		`rate(process_cpu_seconds_total{job=~\"$job\",instance=~\"$instance\"}[$interval])`, "unexpected character in duration expression: '$'"},
	{"a metric floodgate does not export", "floodgate_store_errors_total{", "floodgate_store_error_total{", "floodgate_store_error_total, which floodgate does not export"},
	{"a selector without the instance filter", `"floodgate_rules_version{job=~\"$job\",instance=~\"$instance\"}"`, `"floodgate_rules_version{job=~\"$job\"}"`,
		`floodgate_rules_version{job=~"$job"} does not filter on instance`},
	{"a panel that no longer shows a subject", "go_goroutines{", "go_threads{", "no panel shows go_goroutines"},
}

// TestGrafanaDashboard checks that examples/grafana/floodgate.json is a
// dashboard Grafana imports (a schema version, a Prometheus data source
// variable used by every panel, job and instance variables every query
// filters on), that Prometheus's PromQL parser reads every query, and that
// every metric they name is one the binary exports: it runs floodgate with
// Redis, sends requests that make every labelled series appear (allowed,
// denied, near the limit, shadow mode, an unknown domain, a store failure
// answered by the failure policy), and compares the names with a scrape of
// /metrics. Broken copies of the queries must fail the same checks.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t, grafanaDashboard)
	if d.SchemaVersion < 36 || d.UID == "" || d.Title == "" {
		t.Errorf("schemaVersion %d, uid %q, title %q: want a schema version of Grafana 9 or later (36+), a uid and a title", d.SchemaVersion, d.UID, d.Title)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Name == "datasource" && v.Query != "prometheus" {
			t.Errorf("variable datasource: query %v, want prometheus", v.Query)
		}
	}
	if want := map[string]string{"datasource": "datasource", "job": "query", "instance": "query"}; !maps.Equal(vars, want) {
		t.Errorf("templating variables %v, want %v", vars, want)
	}
	usesVariable := func(ds any) bool {
		m, _ := ds.(map[string]any)
		return m["uid"] == "${datasource}"
	}
	var walk func([]dashboardPanel)
	ids := map[int]string{}
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type != "row" && (!usesVariable(p.Datasource) || len(p.Targets) == 0) {
				t.Errorf("panel %q: data source %v and %d queries: want ${datasource} and at least one", p.Title, p.Datasource, len(p.Targets))
			}
			for _, tg := range p.Targets {
				if !usesVariable(tg.Datasource) {
					t.Errorf("panel %q: a query's data source is %v, want ${datasource}", p.Title, tg.Datasource)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)

	redis := redistest.Start(t)
	p := startFloodgate(t, "-redis", redis.Addr)
	send := func(body string, want int) {
		t.Helper()
		code, resp, err := p.postJSON(t.Context(), []byte(body))
		if err != nil || code != want {
			t.Fatalf("/json %s: HTTP %d %s %v, want %d", body, code, resp, err, want)
		}
	}
	desc := func(k, v string) string {
		return fmt.Sprintf(`{"entries":[{"key":%q,"value":%q}]}`, k, v)
	}
	send(`{"domain":"demo","descriptors":[`+desc("remote_address", "198.51.100.1")+`]}`, 200)
	// 17 of the bucket of 20: near the limit.
	send(`{"domain":"demo","hitsAddend":17,"descriptors":[`+desc("remote_address", "198.51.100.2")+`]}`, 200)
	// Denied, twice: the second from the deny cache.
	send(`{"domain":"demo","descriptors":[`+desc("remote_address", "192.0.2.66")+`]}`, 429)
	send(`{"domain":"demo","descriptors":[`+desc("remote_address", "192.0.2.66")+`]}`, 429)
	// Over a shadow-mode limit (30 per minute): admitted.
	send(`{"domain":"demo","hitsAddend":31,"descriptors":[`+desc("user_agent", "crawlbot")+`]}`, 200)
	send(`{"domain":"no-such-domain","descriptors":[`+desc("remote_address", "198.51.100.1")+`]}`, 200)
	// Redis gone: the failure policy (allow) answers.
	redis.Stop()
	send(`{"domain":"demo","descriptors":[`+desc("remote_address", "198.51.100.3")+`]}`, 200)

	exported := exportedNames(t, "http://"+p.HTTPAddr+"/metrics")
	if !exported["floodgate_hits_total"] {
		t.Fatalf("the scrape has no floodgate_hits_total: the requests made no series:\n%s", p.Logs)
	}
	// Every query parses, every selector filters on the variables, so that
	// picking a job or an instance changes every panel, and names a metric
	// floodgate exports.
	for _, err := range checkQueries(t, d, exported) {
		t.Error(err)
	}
	if t.Failed() {
		var names []string
		for n := range exported {
			if strings.HasPrefix(n, "floodgate_") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		t.Logf("floodgate exports: %s", strings.Join(names, " "))
	}

	// Proof that the checks can fail: broken copies are refused.
	data, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range brokenDashboards {
		if !bytes.Contains(data, []byte(b.old)) {
			t.Fatalf("%s: %s has no %q to break", b.name, grafanaDashboard, b.old)
		}
		var broken dashboard
		if err := json.Unmarshal(bytes.Replace(data, []byte(b.old), []byte(b.new), 1), &broken); err != nil {
			t.Fatalf("%s: %v", b.name, err)
		}
		err := errors.Join(checkQueries(t, broken, exported)...)
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("%s: %s with %q replaced by %q: %v, want an error with %q", b.name, grafanaDashboard, b.old, b.new, err, b.want)
			continue
		}
		t.Logf("%s: %v", b.name, err)
	}
}
