package examples_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
)

var update = flag.Bool("update", false, "rewrite the rules generated from config/ (examples/kubernetes/rules.yaml, examples/helm/floodgate/values.yaml)")

const (
	kubeDir       = "kubernetes"
	rulesMapFile  = "rules.yaml"
	rulesMapName  = "floodgate-rules"
	kubeNamespace = "floodgate"
)

// manifest is one Kubernetes object, read as generic YAML.
type manifest struct {
	file      string
	kind      string
	name      string
	namespace string
	obj       map[string]any
}

// loadManifests reads every document of every .yaml file of dir, except
// kustomization.yaml.
func loadManifests(t testing.TB, dir string) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	var out []manifest
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, parseManifests(t, filepath.Base(f), data)...)
	}
	return out
}

// parseManifests reads every document of one file's contents.
func parseManifests(t testing.TB, file string, data []byte) []manifest {
	t.Helper()
	var out []manifest
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var obj map[string]any
		err := dec.Decode(&obj)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if obj == nil {
			continue
		}
		m := manifest{file: file, obj: obj}
		m.kind, _ = obj["kind"].(string)
		m.name = str(obj, "metadata", "name")
		m.namespace = str(obj, "metadata", "namespace")
		if m.kind == "" || m.name == "" || obj["apiVersion"] == nil {
			t.Fatalf("%s: a document without apiVersion, kind or metadata.name", file)
		}
		out = append(out, m)
	}
}

// find returns the manifest of a kind and name.
func find(t testing.TB, ms []manifest, kind, name string) manifest {
	t.Helper()
	for _, m := range ms {
		if m.kind == kind && m.name == name {
			return m
		}
	}
	t.Fatalf("no %s %q", kind, name)
	return manifest{}
}

// dig walks generic YAML by map keys (strings) and list indexes (ints).
func dig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	switch x := dig(v, path...).(type) {
	case string:
		return x
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}

func list(v any, path ...any) []any {
	l, _ := dig(v, path...).([]any)
	return l
}

func labels(v any, path ...any) map[string]string {
	out := map[string]string{}
	m, _ := dig(v, path...).(map[string]any)
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// selects reports whether a selector's labels are all among a pod's.
func selects(selector, pod map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if pod[k] != v {
			return false
		}
	}
	return true
}

// containerPort resolves a probe's or Service's port (a number or a
// container port name) to a number.
func containerPort(container any, p any) (string, bool) {
	for _, cp := range list(container, "ports") {
		if n := str(cp, "name"); n != "" && n == fmt.Sprint(p) {
			return str(cp, "containerPort"), true
		}
		if str(cp, "containerPort") == fmt.Sprint(p) {
			return str(cp, "containerPort"), true
		}
	}
	return "", false
}

// kubernetesImage is the image the floodgate Deployment runs.
func kubernetesImage(t testing.TB) string {
	ms := loadManifests(t, kubeDir)
	return str(find(t, ms, "Deployment", "floodgate").obj, "spec", "template", "spec", "containers", 0, "image")
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
	b.WriteString("# Generated from config/ by: go test ./examples -run TestKubernetes -update\n")
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

func TestKubernetes(t *testing.T) {
	path := filepath.Join(kubeDir, rulesMapFile)
	want := rulesConfigMap(t)
	if *update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ms := loadManifests(t, kubeDir)

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
		find(t, ms, "Namespace", k.Namespace)
	})

	t.Run("the rules ConfigMap is config/", func(t *testing.T) {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from config/: run go test ./examples -run TestKubernetes -update", path)
		}
		cm := find(t, ms, "ConfigMap", rulesMapName)
		files := map[string][]byte{}
		data, _ := cm.obj["data"].(map[string]any)
		for k, v := range data {
			if ext := filepath.Ext(k); ext != ".yaml" && ext != ".yml" {
				t.Errorf("ConfigMap key %q: floodgate reads only *.yaml and *.yml files", k)
			}
			files[k] = []byte(fmt.Sprint(v))
		}
		if _, err := rules.Parse(files, rules.Options{}); err != nil {
			t.Errorf("the ConfigMap's rules do not load:\n%v", err)
		}
	})

	dep := find(t, ms, "Deployment", "floodgate")
	pod := dig(dep.obj, "spec", "template")
	podLabels := labels(pod, "metadata", "labels")
	ctr := dig(pod, "spec", "containers", 0)
	var args []string
	for _, a := range list(ctr, "args") {
		args = append(args, fmt.Sprint(a))
	}
	flags := floodgateFlags(t, args)
	httpPort, grpcPort := port(t, flags["http-addr"]), port(t, flags["grpc-addr"])

	t.Run("deployment", func(t *testing.T) {
		if !selects(labels(dep.obj, "spec", "selector", "matchLabels"), podLabels) {
			t.Errorf("the Deployment's selector does not select its pods (labels %v)", podLabels)
		}
		if r, _ := dig(dep.obj, "spec", "replicas").(int); r < 2 {
			t.Errorf("replicas %d: want at least 2 so that one can go while another serves", r)
		}
		for _, p := range []struct{ name, want string }{{"http", httpPort}, {"grpc", grpcPort}} {
			if got, ok := containerPort(ctr, p.name); !ok || got != p.want {
				t.Errorf("container port %s is %q, floodgate listens on %s", p.name, got, p.want)
			}
		}
		// Declared ports are what a Service or a scraper may target: each
		// must be one floodgate listens on beyond the pod's loopback (the
		// debug listener's default is loopback; port-forward reaches it).
		for _, cp := range list(ctr, "ports") {
			p := str(cp, "containerPort")
			reachable := false
			for _, f := range []string{"http-addr", "grpc-addr", "debug-addr"} {
				if host, fp, err := net.SplitHostPort(flags[f]); err == nil && fp == p && !isLoopback(host) {
					reachable = true
				}
			}
			if !reachable {
				t.Errorf("container port %s (%s): floodgate listens on it only on loopback or not at all", p, str(cp, "name"))
			}
		}
		ready := dig(ctr, "readinessProbe", "httpGet")
		if str(ready, "path") != "/healthcheck" {
			t.Errorf("readiness probe %v: want httpGet /healthcheck", ready)
		}
		if p, _ := containerPort(ctr, dig(ready, "port")); p != httpPort {
			t.Errorf("readiness probe port %v is not floodgate's HTTP port %s", dig(ready, "port"), httpPort)
		}
		live := dig(ctr, "livenessProbe", "grpc")
		if p, _ := containerPort(ctr, dig(live, "port")); p != grpcPort {
			t.Errorf("liveness probe port %v is not floodgate's gRPC port %s", dig(live, "port"), grpcPort)
		}
		if svc := str(live, "service"); !slices.Contains(server.HealthServices, svc) {
			t.Errorf("liveness probe checks gRPC service %q; floodgate reports %q", svc, server.HealthServices)
		}
		for _, r := range []string{"requests.cpu", "requests.memory", "limits.memory"} {
			kind, res, _ := strings.Cut(r, ".")
			if dig(ctr, "resources", kind, res) == nil {
				t.Errorf("no resources.%s", r)
			}
		}
		drain, _ := time.ParseDuration(flags["drain-delay"])
		shutdown, _ := time.ParseDuration(flags["shutdown-timeout"])
		grace, _ := dig(pod, "spec", "terminationGracePeriodSeconds").(int)
		if time.Duration(grace)*time.Second < drain+shutdown {
			t.Errorf("terminationGracePeriodSeconds %d is shorter than -drain-delay %v plus -shutdown-timeout %v: the kubelet would kill in-flight requests", grace, drain, shutdown)
		}
		if drain == 0 {
			t.Error("-drain-delay is 0: endpoints may still send to a pod that stopped listening")
		}
		if str(pod, "spec", "securityContext", "runAsNonRoot") != "true" {
			t.Error("the pod does not require a non-root user")
		}
	})

	t.Run("rules are mounted as a directory from the ConfigMap", func(t *testing.T) {
		var mount any
		for _, vm := range list(ctr, "volumeMounts") {
			if str(vm, "mountPath") == flags["config"] {
				mount = vm
			}
		}
		if mount == nil {
			t.Fatalf("-config %s is not a mounted volume", flags["config"])
		}
		if str(mount, "subPath") != "" {
			t.Error("the rules are mounted with subPath, which the kubelet never updates: live reload would not happen")
		}
		var vol any
		for _, v := range list(pod, "spec", "volumes") {
			if str(v, "name") == str(mount, "name") {
				vol = v
			}
		}
		if got := str(vol, "configMap", "name"); got != rulesMapName {
			t.Errorf("volume %q mounts ConfigMap %q, want %q", str(mount, "name"), got, rulesMapName)
		}
		if items := list(vol, "configMap", "items"); items != nil {
			t.Error("the volume lists items: keys added later would not be mounted")
		}
		// The mounted directory holds what the ConfigMap holds: the binary
		// accepts it.
		dir := t.TempDir()
		cm := find(t, ms, "ConfigMap", rulesMapName)
		for k, v := range cm.obj["data"].(map[string]any) {
			os.WriteFile(filepath.Join(dir, k), []byte(fmt.Sprint(v)), 0o644)
		}
		mapped := mapPaths(args, map[string]string{flags["config"]: dir}, "")
		if out, code := runFloodgate(t, ".", append(mapped, "-check")...); code != 0 {
			t.Errorf("floodgate %s -check exits %d:\n%s", strings.Join(mapped, " "), code, out)
		}
	})

	t.Run("a ConfigMap update reaches the server through the ..data swap", func(t *testing.T) {
		// The directory as the kubelet lays out a ConfigMap volume: the
		// files in a timestamped directory, ..data linking to it, and one
		// link per key through ..data. An update writes a new directory
		// and renames a new ..data link over the old one.
		cm := find(t, ms, "ConfigMap", rulesMapName)
		data := map[string]string{}
		for k, v := range cm.obj["data"].(map[string]any) {
			data[k] = fmt.Sprint(v)
		}
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
				t.Fatalf("192.0.2.66 still refused 1s after the ..data swap:\n%s", p.logs)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("service", func(t *testing.T) {
		svc := find(t, ms, "Service", "floodgate")
		if !selects(labels(svc.obj, "spec", "selector"), podLabels) {
			t.Errorf("the Service's selector does not select the pods (labels %v)", podLabels)
		}
		found := map[string]bool{}
		for _, sp := range list(svc.obj, "spec", "ports") {
			target, ok := containerPort(ctr, dig(sp, "targetPort"))
			if !ok {
				t.Errorf("Service port %s targets %v, which the container does not declare", str(sp, "name"), dig(sp, "targetPort"))
			}
			found[target] = true
			if target == grpcPort && (str(sp, "appProtocol") != "grpc" || !strings.HasPrefix(str(sp, "name"), "grpc")) {
				t.Errorf("Service port %s carries gRPC: name it grpc and set appProtocol: grpc, so that proxies speak HTTP/2 to it", str(sp, "name"))
			}
		}
		if !found[grpcPort] || !found[httpPort] {
			t.Errorf("the Service exposes %v; want the gRPC (%s) and HTTP (%s) ports", found, grpcPort, httpPort)
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		pdb := find(t, ms, "PodDisruptionBudget", "floodgate")
		if !selects(labels(pdb.obj, "spec", "selector", "matchLabels"), podLabels) {
			t.Error("the PodDisruptionBudget does not select the floodgate pods")
		}
		replicas, _ := dig(dep.obj, "spec", "replicas").(int)
		if min, ok := dig(pdb.obj, "spec", "minAvailable").(int); !ok || min < 1 || min >= replicas {
			t.Errorf("minAvailable %v: want at least 1 and fewer than the %d replicas, or drains block", dig(pdb.obj, "spec", "minAvailable"), replicas)
		}
	})

	t.Run("floodgate reaches redis", func(t *testing.T) {
		host, p, ok := strings.Cut(flags["redis"], ":")
		if !ok {
			t.Fatalf("-redis %q: want service:port", flags["redis"])
		}
		svc := find(t, ms, "Service", host)
		rdep := find(t, ms, "Deployment", host)
		rpod := dig(rdep.obj, "spec", "template")
		if !selects(labels(svc.obj, "spec", "selector"), labels(rpod, "metadata", "labels")) {
			t.Errorf("Service %s does not select the %s pods", host, host)
		}
		var ok2 bool
		for _, sp := range list(svc.obj, "spec", "ports") {
			if str(sp, "port") == p {
				target, found := containerPort(dig(rpod, "spec", "containers", 0), dig(sp, "targetPort"))
				ok2 = found && target == "6379"
			}
		}
		if !ok2 {
			t.Errorf("-redis %s: Service %s has no port %s leading to the redis container's 6379", flags["redis"], host, p)
		}
	})
}

// checkKubectlNames checks the namespace and the objects a kubectl command
// of the README names.
func checkKubectlNames(t testing.TB, f []string) error {
	ms := loadManifests(t, kubeDir)
	if ns := flagValue(f, "-n"); ns != "" && ns != kubeNamespace {
		return fmt.Errorf("namespace %q; the manifests use %q", ns, kubeNamespace)
	}
	kinds := map[string]string{"svc": "Service", "service": "Service", "deploy": "Deployment", "deployment": "Deployment", "configmap": "ConfigMap", "cm": "ConfigMap"}
	for _, a := range f {
		kind, name, ok := strings.Cut(a, "/")
		if !ok {
			continue
		}
		k, known := kinds[kind]
		if !known {
			return fmt.Errorf("unknown kind %q", kind)
		}
		found := false
		for _, m := range ms {
			found = found || (m.kind == k && m.name == name)
		}
		if !found {
			return fmt.Errorf("no %s %q in %s", k, name, kubeDir)
		}
	}
	return nil
}
