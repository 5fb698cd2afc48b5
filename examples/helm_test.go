package examples_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/loader"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	rv1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
)

// The chart is rendered and linted by Helm's own code (helm.sh/helm/v4),
// as `helm template` and `helm lint --strict` do it, without a cluster.

const helmChart = "helm/floodgate"

var (
	kubeVersionOnce sync.Once
	kubeVersion     *common.KubeVersion
	kubeVersionErr  error
)

// helmKubeVersion is the Kubernetes version that the helm binary built
// with this module's k8s.io/client-go assumes without a cluster: client-go
// v0.X.Y is Kubernetes 1.X. Helm reads it from the binary's build
// information, which a test binary lacks (Helm then assumes 1.20), so the
// tests ask the go command.
func helmKubeVersion() (*common.KubeVersion, error) {
	kubeVersionOnce.Do(func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/client-go").Output()
		if err != nil {
			kubeVersionErr = fmt.Errorf("go list -m k8s.io/client-go: %w", err)
			return
		}
		var minor int
		if _, err := fmt.Sscanf(string(out), "v0.%d.", &minor); err != nil {
			kubeVersionErr = fmt.Errorf("k8s.io/client-go %s: %w", out, err)
			return
		}
		kubeVersion, kubeVersionErr = common.ParseKubeVersion(fmt.Sprintf("v1.%d.0", minor))
	})
	return kubeVersion, kubeVersionErr
}

// helmRelease is what a chart sees of the release being installed.
type helmRelease struct {
	Name, Namespace string
}

// helmTemplate renders the chart in dir for a release through Helm's
// install action in client-only dry-run mode, which is what `helm
// template` runs: the chart's values with overrides (a values file, as
// `-f` takes) merged in. It returns the manifest and the rendered NOTES.txt.
func helmTemplate(dir string, rel helmRelease, overrides string) (manifest, notes string, err error) {
	ch, err := loader.Load(dir)
	if err != nil {
		return "", "", err
	}
	vals, err := chartloader.LoadValues(strings.NewReader(overrides))
	if err != nil {
		return "", "", fmt.Errorf("overrides: %w", err)
	}
	install := action.NewInstall(action.NewConfiguration())
	if install.KubeVersion, err = helmKubeVersion(); err != nil {
		return "", "", err
	}
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace = rel.Name, rel.Namespace
	install.Replace = true // no release store to check the name against
	r, err := install.Run(ch, vals)
	if err != nil {
		return "", "", err
	}
	out, ok := r.(*rv1.Release)
	if !ok {
		return "", "", fmt.Errorf("helm returned a %T", r)
	}
	return out.Manifest, out.Info.Notes, nil
}

// helmLint runs `helm lint --strict` on the chart in dir: a warning fails
// too.
func helmLint(dir string) error {
	l := action.NewLint()
	var err error
	if l.KubeVersion, err = helmKubeVersion(); err != nil {
		return err
	}
	l.Strict = true
	l.Namespace = kubeNamespace
	res := l.Run([]string{dir}, nil)
	if res.TotalChartsLinted == 0 {
		return errors.Join(res.Errors...) // the chart did not load
	}
	var errs []error
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			errs = append(errs, errors.New(m.Error()))
		}
	}
	return errors.Join(errs...)
}

// checkChart lints the chart in dir, renders its defaults, decodes each
// rendered object strictly into its type and checks their selectors.
func checkChart(dir string) error {
	if err := helmLint(dir); err != nil {
		return fmt.Errorf("helm lint --strict: %w", err)
	}
	manifest, _, err := helmTemplate(dir, helmRelease{Name: "floodgate", Namespace: kubeNamespace}, "")
	if err != nil {
		return fmt.Errorf("helm template: %w", err)
	}
	objs, err := decodeManifests("helm template", []byte(manifest))
	if err != nil {
		return err
	}
	return errors.Join(checkSelectors(objs)...)
}

// chartObjects renders the chart and decodes its objects.
func chartObjects(t *testing.T, rel helmRelease, overrides string) ([]kubeObject, string) {
	t.Helper()
	manifest, notes, err := helmTemplate(helmChart, rel, overrides)
	if err != nil {
		t.Fatalf("rendering %s: %v", helmChart, err)
	}
	objs := parseManifests(t, "helm template", []byte(manifest))
	for _, err := range checkSelectors(objs) {
		t.Error(err)
	}
	return objs, notes
}

// brokenCharts are edits of the chart that Helm, the strict decoding of
// what it renders or the selector check must refuse.
var brokenCharts = []struct {
	name, file, old, new, want string
}{
	{"a function Helm lacks", "templates/configmap.yaml", "{{ include ", "{{ nosuchfunc }}{{ include ", `function "nosuchfunc" not defined`},
	{"YAML that does not parse", "templates/service.yaml", "spec:", "spec: [", "unable to parse YAML"},
	{"Chart.yaml without a version", "Chart.yaml", "version: 0.1.0", "", "version is required"},
	{"a name Kubernetes refuses", "values.yaml", `fullnameOverride: ""`, `fullnameOverride: "Flood_gate"`, `Invalid value: "Flood_gate"`},
	{"an API version removed from Kubernetes", "templates/pdb.yaml", "policy/v1", "policy/v1beta1", "policy/v1beta1 PodDisruptionBudget is deprecated"},
	{"a field the type lacks", "templates/deployment.yaml", "imagePullPolicy:", "pullPolicy:", `unknown field "spec.template.spec.containers[0].pullPolicy"`},
	{"a selector missing its pods", "templates/service.yaml", `include "floodgate.selectorLabels"`, `include "floodgate.redisSelectorLabels"`,
		`Service floodgate: selector app.kubernetes.io/instance=floodgate,app.kubernetes.io/name=redis selects the pods of the Deployments ["floodgate-redis"], want those of Deployment floodgate`},
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

// withoutNames returns a copy of obj without what the chart names after
// the release or adds: names, namespace and labels, the selectors (which
// checkSelectors checks) and the Redis address in the arguments, replaced
// by <redis>.
func withoutNames(obj runtime.Object, redisAddr string) runtime.Object {
	c := obj.DeepCopyObject()
	if m, err := meta.Accessor(c); err == nil {
		m.SetName("")
		m.SetNamespace("")
		m.SetLabels(nil)
	}
	switch o := c.(type) {
	case *appsv1.Deployment:
		o.Spec.Selector = nil
		pod := &o.Spec.Template
		pod.Labels = nil
		for i := range pod.Spec.TopologySpreadConstraints {
			pod.Spec.TopologySpreadConstraints[i].LabelSelector = nil
		}
		for i := range pod.Spec.Containers {
			for j, a := range pod.Spec.Containers[i].Args {
				if a == redisAddr {
					pod.Spec.Containers[i].Args[j] = "<redis>"
				}
			}
		}
	case *corev1.Service:
		o.Spec.Selector = nil
	case *policyv1.PodDisruptionBudget:
		o.Spec.Selector = nil
	}
	return c
}

// objectLabels returns the labels of an object and, for a Deployment, of
// its pods.
func objectLabels(obj runtime.Object) map[string]map[string]string {
	out := map[string]map[string]string{}
	if m, err := meta.Accessor(obj); err == nil {
		out["metadata.labels"] = m.GetLabels()
	}
	if d, ok := obj.(*appsv1.Deployment); ok {
		out["spec.template.metadata.labels"] = d.Spec.Template.Labels
	}
	return out
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
		t.Errorf("%s: the rules differ from config/: run cd examples && go test -run TestHelm -update", valuesPath)
	}

	t.Run("helm lint --strict passes, and refuses broken copies", func(t *testing.T) {
		if err := checkChart(helmChart); err != nil {
			t.Fatal(err)
		}
		for _, b := range brokenCharts {
			dir := filepath.Join(t.TempDir(), "floodgate")
			copyDir(t, helmChart, dir)
			path := filepath.Join(dir, b.file)
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(b.old)) {
				t.Fatalf("%s: %s has no %q to break", b.name, b.file, b.old)
			}
			if err := os.WriteFile(path, bytes.Replace(data, []byte(b.old), []byte(b.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			err = checkChart(dir)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: %s with %q replaced by %q: %v, want an error with %q", b.name, b.file, b.old, b.new, err, b.want)
			} else {
				first, _, _ := strings.Cut(err.Error(), "\n")
				t.Logf("%s: %s", b.name, first)
			}
		}
	})

	t.Run("defaults render examples/kubernetes", func(t *testing.T) {
		kube := loadManifests(t, kubeDir)
		chart, notes := chartObjects(t, helmRelease{Name: "floodgate", Namespace: kubeNamespace}, "")
		kubeArgs := get[*appsv1.Deployment](t, kube, "floodgate").Spec.Template.Spec.Containers[0].Args
		chartArgs := get[*appsv1.Deployment](t, chart, "floodgate").Spec.Template.Spec.Containers[0].Args
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
			gotLabels := objectLabels(c.obj)
			for where, ls := range objectLabels(m.obj) {
				for k, v := range ls {
					if gotLabels[where][k] != v {
						t.Errorf("%s %s: label %s=%q in %s, examples/kubernetes has %q", c.kind, c.name, k, gotLabels[where][k], where, v)
					}
				}
			}
			g, w := withoutNames(c.obj, chartRedis), withoutNames(m.obj, kubeRedis)
			if !equality.Semantic.DeepEqual(g, w) {
				t.Errorf("%s %s differs from examples/kubernetes/%s (names, labels, selectors and the Redis address aside):\n%s", c.kind, c.name, m.file, diff.Diff(w, g))
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

		// floodgate reaches the chart's Redis through its Service.
		host, p, _ := strings.Cut(chartRedis, ":")
		checkReachesRedis(t, chart, host, p)
		checkRulesLoad(t, get[*corev1.ConfigMap](t, chart, "floodgate-rules"), chartArgs)
		if !strings.Contains(notes, "floodgate.floodgate.svc:8081") {
			t.Errorf("NOTES.txt does not name the gRPC Service:\n%s", notes)
		}
	})

	t.Run("overrides", func(t *testing.T) {
		chart, _ := chartObjects(t, helmRelease{Name: "edge", Namespace: "rl"}, `
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
		dep := get[*appsv1.Deployment](t, chart, "edge-floodgate")
		ctr := dep.Spec.Template.Spec.Containers[0]
		flags := floodgateFlags(t, ctr.Args)
		for flag, want := range map[string]string{"redis": "redis.example:6379", "failure-mode": "deny", "config": "/etc/floodgate/config"} {
			if flags[flag] != want {
				t.Errorf("-%s %q, want %q (args %q)", flag, flags[flag], want, ctr.Args)
			}
		}
		var env []string
		for _, e := range ctr.Env {
			env = append(env, e.Name)
		}
		pdb := get[*policyv1.PodDisruptionBudget](t, chart, "edge-floodgate")
		for _, c := range []struct {
			got  any
			want string
		}{
			{*dep.Spec.Replicas, "3"},
			{ctr.Image, "floodgate:1.2.3"},
			{env, "[GOMEMLIMIT FLOODGATE_REDIS_AUTH]"},
			{pdb.Spec.MinAvailable.String(), "2"},
			{dep.Spec.Template.Spec.Volumes[0].ConfigMap.Name, "edge-floodgate-rules"},
		} {
			if fmt.Sprint(c.got) != c.want {
				t.Errorf("rendered %v, want %s", c.got, c.want)
			}
		}
		cm := get[*corev1.ConfigMap](t, chart, "edge-floodgate-rules")
		var keys []string
		for k := range cm.Data {
			keys = append(keys, k)
		}
		if !slices.Equal(keys, []string{"api.yaml"}) {
			t.Errorf("ConfigMap keys %v, want [api.yaml]: a null drops the default demo.yaml", keys)
		}
		checkRulesLoad(t, cm, ctr.Args)
	})

	t.Run("the docs install this chart", func(t *testing.T) {
		found := 0
		for _, doc := range []string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "docs", "deploying.md")} {
			var lines []string
			for _, b := range readMarkdown(t, doc).blocks {
				lines = append(lines, b.lines...)
			}
			for _, l := range lines {
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
		_, _, err := helmTemplate(helmChart, helmRelease{Name: "floodgate", Namespace: "floodgate"}, "redis: {enabled: false}")
		if err == nil || !strings.Contains(err.Error(), "redis.address is required when redis.enabled is false") {
			t.Errorf("rendering without Redis or redis.address: %v, want the required message", err)
		}
	})
}
