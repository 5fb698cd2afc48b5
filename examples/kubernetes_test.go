package examples_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/pkg/rules"
)

var update = flag.Bool("update", false, "rewrite the rules generated from config/ (examples/kubernetes/rules.yaml, examples/helm/floodgate/values.yaml)")

const (
	kubeDir       = "kubernetes"
	rulesMapFile  = "rules.yaml"
	rulesMapName  = "floodgate-rules"
	kubeNamespace = "floodgate"
)

// kubernetesImage is the image the floodgate Deployment runs.
func kubernetesImage(t testing.TB) string {
	dep := get[*appsv1.Deployment](t, loadManifests(t, kubeDir), "floodgate")
	return dep.Spec.Template.Spec.Containers[0].Image
}

// rulesConfigMap renders config/ as the ConfigMap the Deployment mounts.
func rulesConfigMap(t testing.TB) []byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("config/: %v", err)
	}
	var b bytes.Buffer
	b.WriteString("# The rules as a ConfigMap, mounted by floodgate.yaml as a directory.\n")
	b.WriteString("# Generated from config/ by: cd examples && go test -run TestKubernetes -update\n")
	b.WriteString("# Edit it in place on a cluster (kubectl edit configmap floodgate-rules);\n")
	b.WriteString("# floodgate reloads it when the kubelet swaps the mounted files.\n")
	data := map[string]string{}
	for _, f := range files {
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		data[filepath.Base(f)] = string(content)
	}
	type meta struct{ Name, Namespace string }
	cm := struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string
		Metadata   meta
		Data       map[string]string
	}{"v1", "ConfigMap", meta{rulesMapName, kubeNamespace}, data}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(cm); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// brokenManifests are edits of examples/kubernetes that the decoding or the
// selector check must refuse, with what the error says.
var brokenManifests = []struct {
	name, file, old, new, want string
}{
	{"a field the type lacks", "floodgate.yaml", "imagePullPolicy: IfNotPresent", "imagePullPolicy: IfNotPresent\n          pullPolicy: Always",
		`unknown field "spec.template.spec.containers[0].pullPolicy"`},
	{"a field given twice", "floodgate.yaml", "replicas: 2", "replicas: 2\n  replicas: 3", `"replicas" already set`},
	{"a value of the wrong type", "floodgate.yaml", "terminationGracePeriodSeconds: 30", `terminationGracePeriodSeconds: "30s"`,
		"terminationGracePeriodSeconds"},
	{"an unknown kind", "floodgate.yaml", "kind: PodDisruptionBudget", "kind: PodDisruptionBudjet", `no kind "PodDisruptionBudjet"`},
	{"a Service selecting no pod", "floodgate.yaml", "spec:\n  selector:\n    app.kubernetes.io/name: floodgate\n",
		"spec:\n  selector:\n    app.kubernetes.io/name: floodgat\n", `Service floodgate: selector app.kubernetes.io/name=floodgat selects the pods of the Deployments []`},
	{"a Deployment whose selector misses its pods", "redis.yaml", "    matchLabels:\n      app.kubernetes.io/name: redis\n",
		"    matchLabels:\n      app.kubernetes.io/name: redis\n      tier: cache\n", "Deployment redis: selector app.kubernetes.io/name=redis,tier=cache does not select its pod template"},
	{"a Service selecting another Deployment's pods", "redis.yaml", "spec:\n  selector:\n    app.kubernetes.io/name: redis\n",
		"spec:\n  selector:\n    app.kubernetes.io/name: floodgate\n", `Service redis: selector app.kubernetes.io/name=floodgate selects the pods of the Deployments ["floodgate"], want those of Deployment redis`},
}

// checkManifestsDir decodes dir's manifests, with file's contents replaced
// by data, and checks their selectors.
func checkManifestsDir(t *testing.T, dir, file string, data []byte) error {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []kubeObject
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		content, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == file {
			content = data
		}
		o, err := decodeManifests(filepath.Base(f), content)
		if err != nil {
			return err
		}
		objs = append(objs, o...)
	}
	return errors.Join(checkSelectors(objs)...)
}

func TestKubernetes(t *testing.T) {
	path := filepath.Join(kubeDir, rulesMapFile)
	want := rulesConfigMap(t)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ms := loadManifests(t, kubeDir)

	t.Run("each object decodes strictly into its type and selects the right pods", func(t *testing.T) {
		for _, err := range checkSelectors(ms) {
			t.Error(err)
		}
		// Proof that the checks can fail: broken copies are refused.
		for _, b := range brokenManifests {
			data, err := os.ReadFile(filepath.Join(kubeDir, b.file))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(data, []byte(b.old)) {
				t.Fatalf("%s: %s has no %q to break", b.name, b.file, b.old)
			}
			err = checkManifestsDir(t, kubeDir, b.file, bytes.Replace(data, []byte(b.old), []byte(b.new), 1))
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: %s with %q replaced by %q: %v, want an error with %q", b.name, b.file, b.old, b.new, err, b.want)
				continue
			}
			t.Logf("%s: %v", b.name, err)
		}
	})

	t.Run("kustomization lists every file, one namespace", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(kubeDir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Namespace string
			Resources []string
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatal(err)
		}
		files := map[string]bool{}
		for _, m := range ms {
			files[m.file] = true
			if m.namespace != k.Namespace && m.kind != "Namespace" {
				t.Errorf("%s: %s %s is in namespace %q, the kustomization's is %q", m.file, m.kind, m.name, m.namespace, k.Namespace)
			}
		}
		var listed []string
		for _, r := range k.Resources {
			listed = append(listed, r)
			if !files[r] {
				t.Errorf("kustomization lists %s, which holds no manifest", r)
			}
		}
		for f := range files {
			if !slices.Contains(listed, f) {
				t.Errorf("%s is not in the kustomization's resources", f)
			}
		}
		get[*corev1.Namespace](t, ms, k.Namespace)
	})

	t.Run("the rules ConfigMap is config/", func(t *testing.T) {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from config/: run cd examples && go test -run TestKubernetes -update", path)
		}
		cm := get[*corev1.ConfigMap](t, ms, rulesMapName)
		files := map[string][]byte{}
		for k, v := range cm.Data {
			if ext := filepath.Ext(k); ext != ".yaml" && ext != ".yml" {
				t.Errorf("ConfigMap key %q: floodgate reads only *.yaml and *.yml files", k)
			}
			files[k] = []byte(v)
		}
		if _, err := rules.Parse(files, rules.Options{}); err != nil {
			t.Errorf("the ConfigMap's rules do not load:\n%v", err)
		}
	})

	dep := get[*appsv1.Deployment](t, ms, "floodgate")
	pod := dep.Spec.Template
	ctr := pod.Spec.Containers[0]
	flags := floodgateFlags(t, ctr.Args)
	httpPort, grpcPort := port(t, flags["http-addr"]), port(t, flags["grpc-addr"])

	t.Run("deployment", func(t *testing.T) {
		if r := dep.Spec.Replicas; r == nil || *r < 2 {
			t.Errorf("replicas %v: want at least 2 so that one can go while another serves", r)
		}
		for _, p := range []struct{ name, want string }{{"http", httpPort}, {"grpc", grpcPort}} {
			if got, ok := containerPort(ctr, intstr.FromString(p.name)); !ok || got != p.want {
				t.Errorf("container port %s is %q, floodgate listens on %s", p.name, got, p.want)
			}
		}
		// Declared ports are what a Service or a scraper may target: each
		// must be one floodgate listens on beyond the pod's loopback (the
		// debug listener's default is loopback; port-forward reaches it).
		for _, cp := range ctr.Ports {
			p := strconv.Itoa(int(cp.ContainerPort))
			reachable := false
			for _, f := range []string{"http-addr", "grpc-addr", "debug-addr"} {
				if host, fp, err := net.SplitHostPort(flags[f]); err == nil && fp == p && !isLoopback(host) {
					reachable = true
				}
			}
			if !reachable {
				t.Errorf("container port %s (%s): floodgate listens on it only on loopback or not at all", p, cp.Name)
			}
		}
		ready := ctr.ReadinessProbe
		if ready == nil || ready.HTTPGet == nil || ready.HTTPGet.Path != "/healthcheck" {
			t.Fatalf("readiness probe %v: want httpGet /healthcheck", ready)
		}
		if p, _ := containerPort(ctr, ready.HTTPGet.Port); p != httpPort {
			t.Errorf("readiness probe port %v is not floodgate's HTTP port %s", ready.HTTPGet.Port.String(), httpPort)
		}
		live := ctr.LivenessProbe
		if live == nil || live.GRPC == nil {
			t.Fatalf("liveness probe %v: want grpc", live)
		}
		if p, _ := containerPort(ctr, intstr.FromInt32(live.GRPC.Port)); p != grpcPort {
			t.Errorf("liveness probe port %d is not floodgate's gRPC port %s", live.GRPC.Port, grpcPort)
		}
		if svc := live.GRPC.Service; svc == nil || !slices.Contains(server.HealthServices, *svc) {
			t.Errorf("liveness probe checks gRPC service %v; floodgate reports %q", svc, server.HealthServices)
		}
		for _, r := range []struct {
			list corev1.ResourceList
			name corev1.ResourceName
			what string
		}{{ctr.Resources.Requests, corev1.ResourceCPU, "requests.cpu"}, {ctr.Resources.Requests, corev1.ResourceMemory, "requests.memory"},
			{ctr.Resources.Limits, corev1.ResourceMemory, "limits.memory"}} {
			if _, ok := r.list[r.name]; !ok {
				t.Errorf("no resources.%s", r.what)
			}
		}
		drain, _ := time.ParseDuration(flags["drain-delay"])
		shutdown, _ := time.ParseDuration(flags["shutdown-timeout"])
		var grace int64
		if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
			grace = *g
		}
		if time.Duration(grace)*time.Second < drain+shutdown {
			t.Errorf("terminationGracePeriodSeconds %d is shorter than -drain-delay %v plus -shutdown-timeout %v: the kubelet would kill in-flight requests", grace, drain, shutdown)
		}
		if drain == 0 {
			t.Error("-drain-delay is 0: endpoints may still send to a pod that stopped listening")
		}
		if sc := pod.Spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Error("the pod does not require a non-root user")
		}
	})

	t.Run("rules are mounted as a directory from the ConfigMap", func(t *testing.T) {
		i := slices.IndexFunc(ctr.VolumeMounts, func(vm corev1.VolumeMount) bool { return vm.MountPath == flags["config"] })
		if i < 0 {
			t.Fatalf("-config %s is not a mounted volume", flags["config"])
		}
		mount := ctr.VolumeMounts[i]
		if mount.SubPath != "" {
			t.Error("the rules are mounted with subPath, which the kubelet never updates: live reload would not happen")
		}
		i = slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
		if i < 0 || pod.Spec.Volumes[i].ConfigMap == nil {
			t.Fatalf("volume %q is not a ConfigMap", mount.Name)
		}
		vol := pod.Spec.Volumes[i].ConfigMap
		if vol.Name != rulesMapName {
			t.Errorf("volume %q mounts ConfigMap %q, want %q", mount.Name, vol.Name, rulesMapName)
		}
		if vol.Items != nil {
			t.Error("the volume lists items: keys added later would not be mounted")
		}
		// The mounted directory holds what the ConfigMap holds: the binary
		// accepts it.
		checkRulesLoad(t, get[*corev1.ConfigMap](t, ms, rulesMapName), ctr.Args)
	})

	t.Run("a ConfigMap update reaches the server through the ..data swap", func(t *testing.T) {
		// The directory as the kubelet lays out a ConfigMap volume: the
		// files in a timestamped directory, ..data linking to it, and one
		// link per key through ..data. An update writes a new directory
		// and renames a new ..data link over the old one.
		data := get[*corev1.ConfigMap](t, ms, rulesMapName).Data
		dir := filepath.Join(t.TempDir(), "rules")
		version := func(name string, files map[string]string) {
			if err := os.MkdirAll(filepath.Join(dir, name), 0o755); err != nil {
				t.Fatal(err)
			}
			for k, v := range files {
				if err := os.WriteFile(filepath.Join(dir, name, k), []byte(v), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}
		version("..2026_01_01_00_00_00.000000001", data)
		for k := range data {
			if err := os.Symlink(filepath.Join("..data", k), filepath.Join(dir, k)); err != nil {
				t.Fatal(err)
			}
		}
		p := startFloodgate(t, "-config", dir)
		ask := func() int {
			code, body, err := p.postJSON(t.Context(), []byte(`{"domain":"demo","descriptors":[{"entries":[{"key":"remote_address","value":"192.0.2.66"}]}]}`))
			if err != nil {
				t.Fatalf("/json: %v %s", err, body)
			}
			return code
		}
		if code := ask(); code != 429 {
			t.Fatalf("192.0.2.66 before the update: HTTP %d, want 429", code)
		}
		edited := map[string]string{}
		for k, v := range data {
			edited[k] = strings.Replace(v, "requests_per_unit: 0\n", "requests_per_unit: 100\n", 1)
		}
		version("..2026_01_01_00_01_00.000000002", edited)
		os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.000000001"))
		swapped := time.Now()
		for ask() != 200 {
			if time.Since(swapped) > time.Second {
				t.Fatalf("192.0.2.66 still refused 1s after the ..data swap:\n%s", p.Logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("service", func(t *testing.T) {
		svc := get[*corev1.Service](t, ms, "floodgate")
		if !selectsPods(svc, dep) {
			t.Errorf("the Service's selector %v does not select the pods (labels %v)", svc.Spec.Selector, pod.Labels)
		}
		found := map[string]bool{}
		for _, sp := range svc.Spec.Ports {
			target, ok := containerPort(ctr, sp.TargetPort)
			if !ok {
				t.Errorf("Service port %s targets %s, which the container does not declare", sp.Name, sp.TargetPort.String())
			}
			found[target] = true
			if target == grpcPort && (sp.AppProtocol == nil || *sp.AppProtocol != "grpc" || !strings.HasPrefix(sp.Name, "grpc")) {
				t.Errorf("Service port %s carries gRPC: name it grpc and set appProtocol: grpc, so that proxies speak HTTP/2 to it", sp.Name)
			}
		}
		if !found[grpcPort] || !found[httpPort] {
			t.Errorf("the Service exposes %v; want the gRPC (%s) and HTTP (%s) ports", found, grpcPort, httpPort)
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		pdb := get[*policyv1.PodDisruptionBudget](t, ms, "floodgate")
		if !selectsPods(pdb, dep) {
			t.Error("the PodDisruptionBudget does not select the floodgate pods")
		}
		ma := pdb.Spec.MinAvailable
		if ma == nil || ma.Type != intstr.Int || ma.IntVal < 1 || dep.Spec.Replicas == nil || ma.IntVal >= *dep.Spec.Replicas {
			t.Errorf("minAvailable %v: want at least 1 and fewer than the %v replicas, or drains block", ma, dep.Spec.Replicas)
		}
	})

	t.Run("floodgate reaches redis", func(t *testing.T) {
		host, p, ok := strings.Cut(flags["redis"], ":")
		if !ok {
			t.Fatalf("-redis %q: want service:port", flags["redis"])
		}
		checkReachesRedis(t, ms, host, p)
	})
}

// checkReachesRedis checks that Service host selects the pods of
// Deployment host and that its port p leads to the redis container's 6379.
func checkReachesRedis(t *testing.T, objs []kubeObject, host, p string) {
	t.Helper()
	svc := get[*corev1.Service](t, objs, host)
	rdep := get[*appsv1.Deployment](t, objs, host)
	if !selectsPods(svc, rdep) {
		t.Errorf("Service %s does not select the %s pods", host, host)
	}
	ok := false
	for _, sp := range svc.Spec.Ports {
		if strconv.Itoa(int(sp.Port)) == p {
			target, found := containerPort(rdep.Spec.Template.Spec.Containers[0], sp.TargetPort)
			ok = found && target == "6379"
		}
	}
	if !ok {
		t.Errorf("Service %s has no port %s leading to the redis container's 6379", host, p)
	}
}

// checkRulesLoad runs floodgate -check with a Deployment's arguments on
// the rules of a ConfigMap, mounted where the arguments say.
func checkRulesLoad(t *testing.T, cm *corev1.ConfigMap, args []string) {
	t.Helper()
	flags := floodgateFlags(t, args)
	dir := t.TempDir()
	for k, v := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mapped := mapPaths(args, map[string]string{flags["config"]: dir}, "")
	if out, code := runFloodgate(t, ".", append(mapped, "-check")...); code != 0 {
		t.Errorf("floodgate %s -check exits %d:\n%s", strings.Join(mapped, " "), code, out)
	}
}

// checkKubectlNames checks the namespace and the objects a kubectl command
// of the README names.
func checkKubectlNames(t testing.TB, f []string) error {
	ms := loadManifests(t, kubeDir)
	if ns := flagValue(f, "-n"); ns != "" && ns != kubeNamespace {
		return fmt.Errorf("namespace %q; the manifests use %q", ns, kubeNamespace)
	}
	for _, a := range f {
		resource, name, ok := strings.Cut(a, "/")
		if !ok {
			continue
		}
		// kubectl's short names and plurals, through the REST mapping of
		// the scheme's kinds.
		short := map[string]string{"svc": "services", "deploy": "deployments", "cm": "configmaps", "po": "pods"}
		if r, ok := short[resource]; ok {
			resource = r
		}
		kind := ""
		for gvk := range scheme.Scheme.AllKnownTypes() {
			plural, singular := meta.UnsafeGuessKindToResource(gvk)
			if plural.Resource == resource || singular.Resource == resource {
				kind = gvk.Kind
			}
		}
		if kind == "" {
			return fmt.Errorf("unknown resource %q", resource)
		}
		found := false
		for _, m := range ms {
			found = found || (m.kind == kind && m.name == name)
		}
		if !found {
			return fmt.Errorf("no %s %q in %s", kind, name, kubeDir)
		}
	}
	return nil
}
