package examples_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"gopkg.in/yaml.v3"
)

// The chart is rendered here without helm, which Debian does not package:
// text/template with the subset of Helm's functions below. text/template
// refuses a template that calls any other function, so the chart cannot
// use one helm has and this renderer lacks without failing the test.
// Helm's own rendering differs in ways the chart avoids: no .Capabilities,
// .Files or .Template, no sub-charts, and a key missing from the values is
// an error here (Helm renders it empty).

const helmChart = "helm/floodgate"

// helmRelease is what a chart sees of the release being installed.
type helmRelease struct {
	Name, Namespace string
}

// helmFuncs are the functions of Helm (and of sprig, which Helm includes)
// the chart may use, with Helm's argument order and meaning. include is
// bound per rendering.
func helmFuncs() template.FuncMap {
	return template.FuncMap{
		"include": func(string, any) (string, error) { return "", errors.New("include is bound when rendering") },
		"toYaml": func(v any) (string, error) {
			var b bytes.Buffer
			enc := yaml.NewEncoder(&b)
			enc.SetIndent(2)
			if err := enc.Encode(v); err != nil {
				return "", err
			}
			return strings.TrimSuffix(b.String(), "\n"), nil
		},
		"indent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"quote": func(v any) string {
			if v == nil {
				return `""`
			}
			return strconv.Quote(fmt.Sprint(v))
		},
		"default": func(def, v any) any {
			if helmEmpty(v) {
				return def
			}
			return v
		},
		"required": func(msg string, v any) (any, error) {
			if v == nil || v == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			return s
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"contains":   func(sub, s string) bool { return strings.Contains(s, sub) },
	}
}

// helmEmpty is sprig's notion of empty, which default replaces.
func helmEmpty(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.String, reflect.Map, reflect.Slice, reflect.Array:
		return rv.Len() == 0
	case reflect.Bool:
		return !rv.Bool()
	case reflect.Int, reflect.Int64, reflect.Int32:
		return rv.Int() == 0
	case reflect.Float64, reflect.Float32:
		return rv.Float() == 0
	}
	return false
}

// mergeValues merges overrides into values as Helm merges a user's values
// into the chart's: maps key by key, a null deleting the key, anything else
// replacing.
func mergeValues(values, overrides map[string]any) {
	for k, v := range overrides {
		if v == nil {
			delete(values, k)
			continue
		}
		src, ok1 := v.(map[string]any)
		dst, ok2 := values[k].(map[string]any)
		if ok1 && ok2 {
			mergeValues(dst, src)
			continue
		}
		values[k] = v
	}
}

// renderChart renders every template of the chart in dir for a release,
// with the chart's values.yaml merged with overrides (YAML). It returns
// each template's output by path, e.g. "templates/deployment.yaml".
func renderChart(dir string, rel helmRelease, overrides string) (map[string]string, error) {
	var chart struct {
		Name, Version string
		AppVersion    string `yaml:"appVersion"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, &chart); err != nil {
		return nil, fmt.Errorf("Chart.yaml: %w", err)
	}
	values := map[string]any{}
	data, err = os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return nil, err
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	over := map[string]any{}
	if err := yaml.Unmarshal([]byte(overrides), &over); err != nil {
		return nil, fmt.Errorf("overrides: %w", err)
	}
	mergeValues(values, over)
	root := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": rel.Name, "Namespace": rel.Namespace, "Service": "Helm"},
		"Chart":   map[string]any{"Name": chart.Name, "Version": chart.Version, "AppVersion": chart.AppVersion},
	}

	funcs := helmFuncs()
	tpl := template.New("chart").Option("missingkey=error").Funcs(funcs)
	funcs["include"] = func(name string, data any) (string, error) {
		var b strings.Builder
		err := tpl.ExecuteTemplate(&b, name, data)
		return b.String(), err
	}
	tpl.Funcs(funcs)
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name := filepath.ToSlash(filepath.Join("templates", filepath.Base(f)))
		if _, err := tpl.New(name).Parse(string(src)); err != nil {
			return nil, err
		}
		names = append(names, name)
	}
	out := map[string]string{}
	for _, name := range names {
		// Helm renders files starting with _ only through include.
		if strings.HasPrefix(filepath.Base(name), "_") {
			continue
		}
		var b strings.Builder
		if err := tpl.ExecuteTemplate(&b, name, root); err != nil {
			return nil, err
		}
		out[name] = b.String()
	}
	return out, nil
}

// chartManifests renders the chart and parses its YAML templates.
func chartManifests(t *testing.T, rel helmRelease, overrides string) ([]manifest, map[string]string) {
	t.Helper()
	out, err := renderChart(helmChart, rel, overrides)
	if err != nil {
		t.Fatalf("rendering %s: %v", helmChart, err)
	}
	var names []string
	for name := range out {
		names = append(names, name)
	}
	sort.Strings(names)
	var ms []manifest
	for _, name := range names {
		if filepath.Ext(name) == ".yaml" {
			ms = append(ms, parseManifests(t, name, []byte(out[name]))...)
		}
	}
	return ms, out
}

// valuesWithRules returns values.yaml with its final rules: map rewritten
// from config/, as the ConfigMap of examples/kubernetes is.
func valuesWithRules(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join(helmChart, "values.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head, _, ok := bytes.Cut(data, []byte("\nrules:\n"))
	if !ok {
		t.Fatalf("%s has no final rules: key", path)
	}
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("config/: %v", err)
	}
	var b bytes.Buffer
	b.Write(head)
	b.WriteString("\nrules:\n")
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  %s: |\n", filepath.Base(f))
		for _, l := range strings.SplitAfter(string(content), "\n") {
			if strings.TrimSpace(l) != "" {
				b.WriteString("    ")
			}
			b.WriteString(l)
		}
	}
	return b.Bytes()
}

// kubeToChart is the name each object of examples/kubernetes has in the
// chart installed as release "floodgate": the chart's Redis is named after
// the release, so that two releases in one namespace do not collide.
var kubeToChart = map[string]string{"redis": "floodgate-redis"}

// normalized is a manifest without what the chart may add to or name
// differently from examples/kubernetes: names, namespaces, labels and
// selectors (checked apart) and the Redis address.
func normalized(m manifest, redisAddr string) any {
	var walk func(v any, key string) any
	walk = func(v any, key string) any {
		switch x := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, e := range x {
				switch {
				case k == "labels" || k == "selector" || k == "matchLabels" || k == "labelSelector" || k == "namespace":
					continue
				case k == "name" && key == "metadata":
					continue
				}
				out[k] = walk(e, k)
			}
			return out
		case []any:
			out := make([]any, len(x))
			for i, e := range x {
				if s, ok := e.(string); ok && s == redisAddr {
					e = "<redis>"
				}
				out[i] = walk(e, key)
			}
			return out
		}
		return v
	}
	return walk(m.obj, "")
}

// podsOf returns the pod template labels of a Deployment.
func podsOf(t *testing.T, ms []manifest, name string) map[string]string {
	return labels(find(t, ms, "Deployment", name).obj, "spec", "template", "metadata", "labels")
}

// selectorOf returns an object's selector labels, wherever its kind puts
// them.
func selectorOf(m manifest) map[string]string {
	if m.kind == "Service" {
		return labels(m.obj, "spec", "selector")
	}
	return labels(m.obj, "spec", "selector", "matchLabels")
}

func floodgateContainer(t *testing.T, ms []manifest, name string) (any, []string) {
	t.Helper()
	ctr := dig(find(t, ms, "Deployment", name).obj, "spec", "template", "spec", "containers", 0)
	var args []string
	for _, a := range list(ctr, "args") {
		args = append(args, fmt.Sprint(a))
	}
	return ctr, args
}

// checkRulesLoad runs floodgate -check with a Deployment's arguments on
// the rules of a ConfigMap, mounted where the arguments say.
func checkRulesLoad(t *testing.T, cm manifest, args []string) {
	t.Helper()
	flags := floodgateFlags(t, args)
	dir := t.TempDir()
	for k, v := range cm.obj["data"].(map[string]any) {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(fmt.Sprint(v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mapped := mapPaths(args, map[string]string{flags["config"]: dir}, "")
	if out, code := runFloodgate(t, ".", append(mapped, "-check")...); code != 0 {
		t.Errorf("floodgate %s -check exits %d:\n%s", strings.Join(mapped, " "), code, out)
	}
}

func TestHelm(t *testing.T) {
	valuesPath := filepath.Join(helmChart, "values.yaml")
	want := valuesWithRules(t)
	if *update {
		if err := os.WriteFile(valuesPath, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(valuesPath); !bytes.Equal(got, want) {
		t.Errorf("%s: the rules differ from config/: run go test ./examples -run TestHelm -update", valuesPath)
	}

	t.Run("defaults render examples/kubernetes", func(t *testing.T) {
		kube := loadManifests(t, kubeDir)
		chart, out := chartManifests(t, helmRelease{Name: "floodgate", Namespace: kubeNamespace}, "")
		_, kubeArgs := floodgateContainer(t, kube, "floodgate")
		_, chartArgs := floodgateContainer(t, chart, "floodgate")
		kubeRedis, chartRedis := floodgateFlags(t, kubeArgs)["redis"], floodgateFlags(t, chartArgs)["redis"]

		var wantObjs, gotObjs []string
		for _, m := range kube {
			if m.kind == "Namespace" {
				continue // helm install --create-namespace
			}
			name := m.name
			if n, ok := kubeToChart[name]; ok {
				name = n
			}
			wantObjs = append(wantObjs, m.kind+"/"+name)
			c := find(t, chart, m.kind, name)
			if c.namespace != kubeNamespace {
				t.Errorf("%s %s: namespace %q, want the release's, %q", c.kind, c.name, c.namespace, kubeNamespace)
			}
			for _, path := range [][]any{{"metadata", "labels"}, {"spec", "template", "metadata", "labels"}} {
				got := labels(c.obj, path...)
				for k, v := range labels(m.obj, path...) {
					if got[k] != v {
						t.Errorf("%s %s: label %s=%q at %v, examples/kubernetes has %q", c.kind, c.name, k, got[k], path, v)
					}
				}
			}
			if g, w := normalized(c, chartRedis), normalized(m, kubeRedis); !reflect.DeepEqual(g, w) {
				gy, _ := yaml.Marshal(g)
				wy, _ := yaml.Marshal(w)
				t.Errorf("%s %s differs from examples/kubernetes/%s (names, labels, selectors and the Redis address aside):\nchart:\n%s\nkubernetes:\n%s", c.kind, c.name, m.file, gy, wy)
			}
		}
		for _, m := range chart {
			gotObjs = append(gotObjs, m.kind+"/"+m.name)
		}
		sort.Strings(wantObjs)
		sort.Strings(gotObjs)
		if !slices.Equal(gotObjs, wantObjs) {
			t.Errorf("the chart makes %v; examples/kubernetes has %v", gotObjs, wantObjs)
		}

		// Each selector takes its own pods and not the others.
		fg, rd := podsOf(t, chart, "floodgate"), podsOf(t, chart, "floodgate-redis")
		for _, m := range chart {
			sel := selectorOf(m)
			if len(sel) == 0 {
				continue
			}
			own, other := fg, rd
			if strings.HasSuffix(m.name, "-redis") {
				own, other = rd, fg
			}
			if !selects(sel, own) || selects(sel, other) {
				t.Errorf("%s %s: selector %v: want the pods %v and not %v", m.kind, m.name, sel, own, other)
			}
		}
		spread := labels(find(t, chart, "Deployment", "floodgate").obj, "spec", "template", "spec", "topologySpreadConstraints", 0, "labelSelector", "matchLabels")
		if !selects(spread, fg) || selects(spread, rd) {
			t.Errorf("topologySpreadConstraints select %v: want the floodgate pods %v", spread, fg)
		}

		// floodgate reaches the chart's Redis through its Service.
		host, p, _ := strings.Cut(chartRedis, ":")
		svc := find(t, chart, "Service", host)
		if p != "6379" || str(svc.obj, "spec", "ports", 0, "port") != "6379" {
			t.Errorf("-redis %s: want Service %s port 6379", chartRedis, host)
		}
		checkRulesLoad(t, find(t, chart, "ConfigMap", "floodgate-rules"), chartArgs)
		if notes := out["templates/NOTES.txt"]; !strings.Contains(notes, "floodgate.floodgate.svc:8081") {
			t.Errorf("NOTES.txt does not name the gRPC Service:\n%s", notes)
		}
	})

	t.Run("overrides", func(t *testing.T) {
		chart, _ := chartManifests(t, helmRelease{Name: "edge", Namespace: "rl"}, `
replicaCount: 3
image: {tag: "1.2.3"}
extraArgs: [-failure-mode, deny]
env: [{name: FLOODGATE_REDIS_AUTH, valueFrom: {secretKeyRef: {name: redis, key: password}}}]
podDisruptionBudget: {minAvailable: 2}
redis: {enabled: false, address: "redis.example:6379"}
rules:
  demo.yaml: null
  api.yaml: |
    domain: api
    descriptors:
      - key: api_key
        rate_limit: {unit: second, requests_per_unit: 5}
`)
		var objs []string
		for _, m := range chart {
			objs = append(objs, m.kind+"/"+m.name)
			if m.namespace != "rl" {
				t.Errorf("%s %s: namespace %q, want rl", m.kind, m.name, m.namespace)
			}
		}
		sort.Strings(objs)
		if want := []string{"ConfigMap/edge-floodgate-rules", "Deployment/edge-floodgate", "PodDisruptionBudget/edge-floodgate", "Service/edge-floodgate"}; !slices.Equal(objs, want) {
			t.Errorf("objects %v, want %v (no Redis)", objs, want)
		}
		dep := find(t, chart, "Deployment", "edge-floodgate")
		ctr, args := floodgateContainer(t, chart, "edge-floodgate")
		flags := floodgateFlags(t, args)
		for flag, want := range map[string]string{"redis": "redis.example:6379", "failure-mode": "deny", "config": "/etc/floodgate/config"} {
			if flags[flag] != want {
				t.Errorf("-%s %q, want %q (args %q)", flag, flags[flag], want, args)
			}
		}
		for _, c := range []struct {
			got  any
			want string
		}{
			{dig(dep.obj, "spec", "replicas"), "3"},
			{dig(ctr, "image"), "floodgate:1.2.3"},
			{dig(ctr, "env", 1, "name"), "FLOODGATE_REDIS_AUTH"},
			{dig(ctr, "env", 0, "name"), "GOMEMLIMIT"},
			{dig(find(t, chart, "PodDisruptionBudget", "edge-floodgate").obj, "spec", "minAvailable"), "2"},
			{dig(dep.obj, "spec", "template", "spec", "volumes", 0, "configMap", "name"), "edge-floodgate-rules"},
		} {
			if fmt.Sprint(c.got) != c.want {
				t.Errorf("rendered %v, want %s", c.got, c.want)
			}
		}
		cm := find(t, chart, "ConfigMap", "edge-floodgate-rules")
		var keys []string
		for k := range cm.obj["data"].(map[string]any) {
			keys = append(keys, k)
		}
		if !slices.Equal(keys, []string{"api.yaml"}) {
			t.Errorf("ConfigMap keys %v, want [api.yaml]: a null drops the default demo.yaml", keys)
		}
		checkRulesLoad(t, cm, args)
	})

	t.Run("the docs install this chart", func(t *testing.T) {
		found := 0
		for _, doc := range []string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "docs", "deploying.md")} {
			data, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(string(data), "\n") {
				f := strings.Fields(l)
				if len(f) < 4 || f[0] != "helm" || f[1] != "install" {
					continue
				}
				found++
				// The release name decides the objects' names: "floodgate"
				// makes examples/kubernetes's, which the README's kubectl
				// commands use.
				if f[2] != "floodgate" || filepath.Clean(f[3]) != filepath.Join("examples", helmChart) {
					t.Errorf("%s: %q: want helm install floodgate examples/%s", doc, l, helmChart)
				}
				if ns := flagValue(f, "-n"); ns != "" && ns != kubeNamespace {
					t.Errorf("%s: %q: namespace %s, the kubernetes example's is %s", doc, l, ns, kubeNamespace)
				}
			}
		}
		if found == 0 {
			t.Error("no helm install command in the README or docs/deploying.md")
		}
	})

	t.Run("no Redis and no address is refused", func(t *testing.T) {
		_, err := renderChart(helmChart, helmRelease{Name: "floodgate", Namespace: "floodgate"}, "redis: {enabled: false}")
		if err == nil || !strings.Contains(err.Error(), "redis.address is required when redis.enabled is false") {
			t.Errorf("rendering without Redis or redis.address: %v, want the required message", err)
		}
	})

	t.Run("a function outside the subset fails", func(t *testing.T) {
		dir := t.TempDir()
		copyDir(t, helmChart, dir)
		if err := os.WriteFile(filepath.Join(dir, "templates", "secret.yaml"), []byte(`data: {{ "x" | b64enc }}`), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := renderChart(dir, helmRelease{Name: "floodgate", Namespace: "floodgate"}, ""); err == nil || !strings.Contains(err.Error(), `"b64enc" not defined`) {
			t.Errorf("a template calling b64enc: %v, want function not defined", err)
		}
	})
}
