package examples_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"
)

// The manifests are read as the API server reads them: each document is
// decoded strictly into the k8s.io/api type that client-go's scheme
// registers for its apiVersion and kind, so that a field the type lacks, a
// field given twice, a value of the wrong type or an unknown kind fails.
// Istio's kinds, which k8s.io/api does not define, are read as unstructured
// objects. Label selectors are matched with apimachinery's labels package.

// strictDecoder decodes a YAML or JSON document into its k8s.io/api type,
// refusing unknown and duplicate fields.
var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// unstructuredGroups are the API groups whose kinds are read as
// unstructured objects: k8s.io/api has no types for them.
var unstructuredGroups = map[string]bool{"networking.istio.io": true}

// kubeObject is one object of a manifest file.
type kubeObject struct {
	file            string
	kind            string
	name, namespace string
	// obj is the object in its k8s.io/api type (*appsv1.Deployment,
	// *corev1.Service, ...), or *unstructured.Unstructured for the kinds of
	// unstructuredGroups.
	obj runtime.Object
}

// fields returns an unstructured object's content, nil for a typed one.
func (o kubeObject) fields() map[string]any {
	if u, ok := o.obj.(*unstructured.Unstructured); ok {
		return u.Object
	}
	return nil
}

// decodeManifests decodes every document of one file's contents.
func decodeManifests(file string, data []byte) ([]kubeObject, error) {
	var out []kubeObject
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		j, err := sigsyaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		if string(bytes.TrimSpace(j)) == "null" {
			continue // only comments
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
		var obj runtime.Object
		if unstructuredGroups[gvk.Group] {
			u := &unstructured.Unstructured{}
			obj, err = u, u.UnmarshalJSON(j)
		} else {
			obj, _, err = strictDecoder.Decode(doc, nil, nil)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", file, gvk, err)
		}
		if m.GetName() == "" {
			return nil, fmt.Errorf("%s: a %s without metadata.name", file, gvk.Kind)
		}
		out = append(out, kubeObject{file: file, kind: gvk.Kind, name: m.GetName(), namespace: m.GetNamespace(), obj: obj})
	}
}

// parseManifests decodes every document of one file's contents, failing
// the test on an error.
func parseManifests(t testing.TB, file string, data []byte) []kubeObject {
	t.Helper()
	objs, err := decodeManifests(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// loadManifests reads every document of every .yaml file of dir, except
// kustomization.yaml.
func loadManifests(t testing.TB, dir string) []kubeObject {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", dir, err)
	}
	var out []kubeObject
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

// find returns the object of a kind and name.
func find(t testing.TB, objs []kubeObject, kind, name string) kubeObject {
	t.Helper()
	for _, o := range objs {
		if o.kind == kind && o.name == name {
			return o
		}
	}
	t.Fatalf("no %s %q", kind, name)
	return kubeObject{}
}

// get returns the object of type T (*appsv1.Deployment, ...) and name.
func get[T runtime.Object](t testing.TB, objs []kubeObject, name string) T {
	t.Helper()
	for _, o := range objs {
		if v, ok := o.obj.(T); ok && o.name == name {
			return v
		}
	}
	var zero T
	t.Fatalf("no %T %q", zero, name)
	return zero
}

// podSelector returns the label selector of a Service, Deployment or
// PodDisruptionBudget, as apimachinery reads it, and nil for other kinds.
// An empty selector is an error: a Service without one gets no endpoints
// from Kubernetes, and the others would take every pod.
func podSelector(obj runtime.Object) (labels.Selector, error) {
	var sel labels.Selector
	var err error
	switch o := obj.(type) {
	case *corev1.Service:
		if len(o.Spec.Selector) == 0 {
			return nil, errors.New("no selector")
		}
		sel, err = labels.ValidatedSelectorFromSet(o.Spec.Selector)
	case *appsv1.Deployment:
		sel, err = labelSelector(o.Spec.Selector)
	case *policyv1.PodDisruptionBudget:
		sel, err = labelSelector(o.Spec.Selector)
	default:
		return nil, nil
	}
	return sel, err
}

// labelSelector converts a LabelSelector, refusing an empty one.
func labelSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err == nil && sel.Empty() {
		err = errors.New("no selector")
	}
	return sel, err
}

// checkSelectors checks the label selectors of a set of objects with
// apimachinery's matching: each Deployment's selects its own pod template
// (the API server refuses one that does not), and each Service's,
// PodDisruptionBudget's and topology spread constraint's selects the pods
// of one Deployment of its namespace, the one of its name (the
// constraint's, its own Deployment's), and no other's.
func checkSelectors(objs []kubeObject) []error {
	var errs []error
	var deps []*appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.obj.(*appsv1.Deployment); ok {
			deps = append(deps, d)
		}
	}
	selected := func(sel labels.Selector, ns string) []string {
		var names []string
		for _, d := range deps {
			if d.Namespace == ns && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				names = append(names, d.Name)
			}
		}
		return names
	}
	for _, o := range objs {
		sel, err := podSelector(o.obj)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", o.kind, o.name, err))
			continue
		}
		if sel == nil {
			continue
		}
		if d, ok := o.obj.(*appsv1.Deployment); ok {
			if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				errs = append(errs, fmt.Errorf("Deployment %s: selector %s does not select its pod template's labels %v", d.Name, sel, d.Spec.Template.Labels))
			}
			for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
				cs, err := labelSelector(c.LabelSelector)
				if err != nil {
					errs = append(errs, fmt.Errorf("Deployment %s: topology spread constraint: %w", d.Name, err))
				} else if got := selected(cs, d.Namespace); !slices.Equal(got, []string{d.Name}) {
					errs = append(errs, fmt.Errorf("Deployment %s: topology spread constraint %s selects the pods of %q, want its own only", d.Name, cs, got))
				}
			}
			continue
		}
		if got := selected(sel, o.namespace); !slices.Equal(got, []string{o.name}) {
			errs = append(errs, fmt.Errorf("%s %s: selector %s selects the pods of the Deployments %q, want those of Deployment %s", o.kind, o.name, sel, got, o.name))
		}
	}
	return errs
}

// selectsPods reports whether obj's selector takes the pods of Deployment d.
func selectsPods(obj runtime.Object, d *appsv1.Deployment) bool {
	sel, err := podSelector(obj)
	return err == nil && sel != nil && sel.Matches(labels.Set(d.Spec.Template.Labels))
}

// containerPort resolves a port a probe or a Service names (a number or
// the name of one of the container's ports) to that container port.
func containerPort(c corev1.Container, p intstr.IntOrString) (string, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return strconv.Itoa(int(cp.ContainerPort)), true
		}
	}
	return "", false
}
