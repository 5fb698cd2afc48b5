package examples_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/floodgate/floodgate/internal/redistest"
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

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
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

// selector is a metric name in a PromQL expression and its label matchers
// (without braces; empty when it has none).
type selector struct {
	metric, matchers string
}

// promqlKeywords are PromQL's words that are neither functions nor metrics.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	// Aggregations, which may be followed by by (...) before their argument.
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true,
	"limitk": true, "limit_ratio": true,
}

// promqlClauses are followed by a parenthesised list of label names.
var promqlClauses = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

// promqlSelectors returns the metric names an expression selects, with
// their label matchers: what remains once strings, label matchers, ranges,
// numbers and durations, Grafana's variables, function names, keywords and
// the label lists of by(), without(), on() and the like are set aside.
func promqlSelectors(expr string) ([]selector, error) {
	var out []selector
	rs := []rune(expr)
	depth := 0 // of parentheses outside clauses
	skipSpace := func(i int) int {
		for i < len(rs) && unicode.IsSpace(rs[i]) {
			i++
		}
		return i
	}
	// closing returns the index after the bracket closing the one at i,
	// skipping quoted strings.
	closing := func(i int, open, close rune) (int, error) {
		depth := 0
		for j := i; j < len(rs); j++ {
			switch rs[j] {
			case '"', '\'', '`':
				q := rs[j]
				for j++; j < len(rs) && rs[j] != q; j++ {
					if rs[j] == '\\' && q != '`' {
						j++
					}
				}
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("%q: unbalanced %c at %d", expr, open, i)
	}
	isIdent := func(r rune, first bool) bool {
		return r == '_' || r == ':' || unicode.IsLetter(r) || (!first && unicode.IsDigit(r))
	}
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case r == '"' || r == '\'' || r == '`':
			for i++; i < len(rs) && rs[i] != r; i++ {
				if rs[i] == '\\' && r != '`' {
					i++
				}
			}
			if i >= len(rs) {
				return nil, fmt.Errorf("%q: unterminated string", expr)
			}
			i++
		case r == '{':
			j, err := closing(i, '{', '}')
			if err != nil {
				return nil, err
			}
			// A selector without a metric name ({__name__=...}) would be
			// missed: refuse it rather than check less than it seems.
			if len(out) == 0 || out[len(out)-1].matchers != "" || !strings.HasSuffix(strings.TrimSpace(string(rs[:i])), out[len(out)-1].metric) {
				return nil, fmt.Errorf("%q: label matchers at %d follow no metric name", expr, i)
			}
			out[len(out)-1].matchers = string(rs[i+1 : j-1])
			i = j
		case r == '[':
			j, err := closing(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = j
		case r == '$':
			// Grafana variables: $name, ${name}, ${name:format}.
			i++
			if i < len(rs) && rs[i] == '{' {
				j, err := closing(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = j
				continue
			}
			for i < len(rs) && isIdent(rs[i], false) {
				i++
			}
		case unicode.IsDigit(r) || (r == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1])):
			// Numbers and durations (5m, 1e3, 0x1f).
			for i < len(rs) && (isIdent(rs[i], false) || rs[i] == '.') {
				i++
			}
		case isIdent(r, true):
			j := i
			for j < len(rs) && isIdent(rs[j], false) {
				j++
			}
			word := string(rs[i:j])
			next := skipSpace(j)
			switch {
			case promqlClauses[word]:
				if next < len(rs) && rs[next] == '(' {
					k, err := closing(next, '(', ')')
					if err != nil {
						return nil, err
					}
					j = k
				}
			case promqlKeywords[word]:
			case next < len(rs) && rs[next] == '(':
				// A function call.
			default:
				out = append(out, selector{metric: word})
			}
			i = j
		case r == '(':
			depth++
			i++
		case r == ')':
			if depth--; depth < 0 {
				return nil, fmt.Errorf("%q: unbalanced ) at %d", expr, i)
			}
			i++
		default:
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("%q: unbalanced (", expr)
	}
	return out, nil
}

func TestPromqlSelectors(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`rate(a_total[5m])`, []string{"a_total"}},
		{`sum by (domain, rule) (rate(a_total{job=~"$job",instance=~"$instance"}[$__rate_interval])) / sum by (domain, rule) (rate(b_total{rule="x)"}[1m]))`, []string{"a_total", "b_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(d_seconds_bucket{code!="ok"}[5m])))`, []string{"d_seconds_bucket"}},
		{`time() - c_timestamp_seconds`, []string{"c_timestamp_seconds"}},
		{`a / on(instance) group_left(version) b_info offset 5m`, []string{"a", "b_info"}},
		{`sum without (instance) (x) > bool 0.5 and y unless z{a="b"}`, []string{"x", "y", "z"}},
		{`topk(5, sum by (rule) (increase(hits_total[${__range}])))`, []string{"hits_total"}},
		{`sum(rate(e[1h:5m])) * 1e3 + 0.5`, []string{"e"}},
	} {
		sels, err := promqlSelectors(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			got = append(got, s.metric)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: metrics %q, want %q", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `rate(x[5m]`, `x{a="b"`, `x{a="b}`} {
		if s, err := promqlSelectors(bad); err == nil {
			t.Errorf("%s: no error (selectors %v)", bad, s)
		}
	}
}

// scrapeNames returns the sample names of a Prometheus text exposition
// (a histogram's _bucket, _sum and _count, a summary's _sum and _count and
// its own name).
func scrapeNames(t *testing.T, url string) map[string]bool {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	names := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			names[l[:i]] = true
		}
	}
	if err := sc.Err(); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	return names
}

// TestGrafanaDashboard checks that examples/grafana/floodgate.json is a
// dashboard Grafana imports (a schema version, a Prometheus data source
// variable used by every panel, job and instance variables every query
// filters on) and that every metric its queries name is one the binary
// exports: it runs floodgate with Redis, sends requests that make every
// labelled series appear (allowed, denied, near the limit, shadow mode, an
// unknown domain, a store failure answered by the failure policy), and
// compares the names with a scrape of /metrics.
func TestGrafanaDashboard(t *testing.T) {
	d := loadDashboard(t)
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

	// Every selector filters on the variables, so that picking a job or an
	// instance changes every panel.
	queries := d.queries(t)
	used := map[string][]string{} // metric -> where
	for _, q := range queries {
		sels, err := promqlSelectors(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		if len(sels) == 0 {
			t.Errorf("%s: %q selects no metric", q.where, q.expr)
		}
		for _, s := range sels {
			used[s.metric] = append(used[s.metric], q.where)
			wantVars := []string{`job=~"$job"`, `instance=~"$instance"`}
			if strings.HasPrefix(q.where, "variable job") {
				wantVars = nil
			} else if strings.HasPrefix(q.where, "variable instance") {
				wantVars = wantVars[:1]
			}
			for _, w := range wantVars {
				if !strings.Contains(s.matchers, w) {
					t.Errorf("%s: %s{%s} does not filter on %s", q.where, s.metric, s.matchers, w)
				}
			}
		}
	}
	// The subjects the dashboard is for.
	for _, m := range []string{"floodgate_hits_total", "floodgate_over_limit_total", "floodgate_decision_duration_seconds_bucket",
		"floodgate_store_duration_seconds_bucket", "floodgate_store_healthy", "floodgate_store_failure_answers_total",
		"floodgate_deny_cache_answers_total", "floodgate_rules_reloads_total", "floodgate_rules_version",
		"floodgate_rules_last_success_timestamp_seconds", "process_cpu_seconds_total", "go_goroutines"} {
		if used[m] == nil {
			t.Errorf("no panel shows %s", m)
		}
	}

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

	scraped := scrapeNames(t, "http://"+p.HTTP+"/metrics")
	if !scraped["floodgate_hits_total"] {
		t.Fatalf("the scrape has no floodgate_hits_total: the requests made no series:\n%s", p.logs)
	}
	var missing []string
	for m, where := range used {
		if !scraped[m] {
			missing = append(missing, fmt.Sprintf("%s (%s)", m, strings.Join(where, "; ")))
		}
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Errorf("the dashboard queries %s, which floodgate does not export", m)
	}
	if t.Failed() {
		var names []string
		for n := range scraped {
			if strings.HasPrefix(n, "floodgate_") {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		t.Logf("floodgate exports: %s", strings.Join(names, " "))
	}
}
