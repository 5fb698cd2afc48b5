package examples_test

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
)

// Istio cannot run here, so its manifests are checked in two ways: the
// names, ports and labels they share with each other and with
// examples/kubernetes/ are compared, and the gateway's Envoy configuration
// is built as Istio would build it for the Gateway and VirtualService, with
// each EnvoyFilter's patches applied as written; the real Envoy validates
// it and runs it.

// istioDir holds the Istio manifests, under examples/.
const istioDir = "istio"

const (
	hcmFilter        = "envoy.filters.network.http_connection_manager"
	httpRouterFilter = "envoy.filters.http.router"
)

// configPatch is one EnvoyFilter configPatches entry.
type configPatch struct {
	filter  kubeObject
	applyTo string
	match   any
	op      string
	value   any
}

func configPatches(ms []kubeObject) []configPatch {
	var out []configPatch
	for _, m := range ms {
		if m.kind != "EnvoyFilter" {
			continue
		}
		for _, p := range list(m.fields(), "spec", "configPatches") {
			out = append(out, configPatch{filter: m, applyTo: str(p, "applyTo"), match: dig(p, "match"),
				op: str(p, "patch", "operation"), value: dig(p, "patch", "value")})
		}
	}
	return out
}

// istioCluster splits Istio's outbound|<port>|<subset>|<host> cluster name,
// whose host is <service>.<namespace>.svc...
func istioCluster(name string) (port, host, service, namespace string, err error) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return "", "", "", "", fmt.Errorf("cluster %q is not outbound|<port>|<subset>|<host>", name)
	}
	labels := strings.Split(parts[3], ".")
	if len(labels) < 3 || labels[2] != "svc" {
		return "", "", "", "", fmt.Errorf("cluster %q: host %q is not <service>.<namespace>.svc...", name, parts[3])
	}
	return parts[1], parts[3], labels[0], labels[1], nil
}

// istioBootstrap builds the gateway's configuration with the patches of the
// EnvoyFilter named filter, read from text (the contents of file).
func istioBootstrap(file, filter string) func(t *testing.T, text string) []byte {
	return func(t *testing.T, text string) []byte {
		patched := find(t, parseManifests(t, file, []byte(text)), "EnvoyFilter", filter)
		return gatewayBootstrap(t, find(t, loadManifests(t, istioDir), "VirtualService", "demo"), []kubeObject{patched})
	}
}

// gatewayBootstrap returns an Envoy bootstrap of the ingress gateway as
// Istio configures it for the VirtualService vs, reduced to what the
// patches touch: a listener whose connection manager trusts the peer's
// address, a virtual host "*:80" with one route per http entry of vs, named
// after it, the router filter, and Istio's outbound|<port>||<host> clusters
// (HTTP/2 for a cluster a ratelimit filter calls, as Istio does for a
// Service port named grpc). Then the EnvoyFilters' patches are applied as
// Istio applies them: INSERT_BEFORE an HTTP filter, MERGE into a virtual
// host or a named route (maps merged, lists appended, as proto merging).
func gatewayBootstrap(t testing.TB, vs kubeObject, filters []kubeObject) []byte {
	t.Helper()
	clusters := map[string]bool{} // name -> speaks HTTP/2
	var routes []any
	for _, h := range list(vs.fields(), "spec", "http") {
		prefix := "/"
		if p := str(h, "match", 0, "uri", "prefix"); p != "" {
			prefix = p
		}
		cluster := "outbound|" + str(h, "route", 0, "destination", "port", "number") + "||" + str(h, "route", 0, "destination", "host")
		clusters[cluster] = false
		routes = append(routes, map[string]any{"name": str(h, "name"),
			"match": map[string]any{"prefix": prefix}, "route": map[string]any{"cluster": cluster}})
	}
	vhost := map[string]any{"name": "*:80", "domains": []any{"*"}, "routes": routes}
	hcm := map[string]any{
		"@type":              "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
		"stat_prefix":        "outbound_0.0.0.0_8080",
		"use_remote_address": true,
		"route_config":       map[string]any{"name": "http.8080", "virtual_hosts": []any{vhost}},
		"http_filters": []any{map[string]any{"name": httpRouterFilter, "typed_config": map[string]any{
			"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}},
	}
	for _, p := range configPatches(filters) {
		switch {
		case p.applyTo == "HTTP_FILTER" && p.op == "INSERT_BEFORE":
			before := str(p.match, "listener", "filterChain", "filter", "subFilter", "name")
			fs := list(hcm, "http_filters")
			i := slices.IndexFunc(fs, func(f any) bool { return str(f, "name") == before })
			if i < 0 {
				t.Fatalf("%s: no HTTP filter %q to insert before", p.filter.name, before)
			}
			hcm["http_filters"] = slices.Insert(fs, i, p.value)
		case p.applyTo == "VIRTUAL_HOST" && p.op == "MERGE":
			if name := str(p.match, "routeConfiguration", "vhost", "name"); name != "" && name != vhost["name"] {
				t.Fatalf("%s: a patch for virtual host %q; the gateway's is %q", p.filter.name, name, vhost["name"])
			}
			mergeYAML(vhost, p.value.(map[string]any))
		case p.applyTo == "HTTP_ROUTE" && p.op == "MERGE":
			name := str(p.match, "routeConfiguration", "vhost", "route", "name")
			i := slices.IndexFunc(routes, func(r any) bool { return str(r, "name") == name })
			if i < 0 {
				t.Fatalf("%s: a patch for route %q; the VirtualService's routes are %v", p.filter.name, name, routes)
			}
			mergeYAML(routes[i].(map[string]any), p.value.(map[string]any))
		default:
			t.Fatalf("%s: %s %s is not applied by this test", p.filter.name, p.op, p.applyTo)
		}
	}
	for _, f := range rateLimitFilters(hcm) {
		clusters[str(f, "rate_limit_service", "grpc_service", "envoy_grpc", "cluster_name")] = true
	}
	var cs []any
	for name, h2 := range clusters {
		port, host, _, _, err := istioCluster(name)
		if err != nil {
			t.Fatal(err)
		}
		c := map[string]any{"name": name, "type": "STRICT_DNS", "connect_timeout": "1s",
			"load_assignment": map[string]any{"cluster_name": name, "endpoints": []any{map[string]any{"lb_endpoints": []any{
				map[string]any{"endpoint": map[string]any{"address": map[string]any{"socket_address": map[string]any{
					"address": host, "port_value": port}}}}}}}}}
		if h2 {
			c["typed_extension_protocol_options"] = map[string]any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": map[string]any{
				"@type":                "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
				"explicit_http_config": map[string]any{"http2_protocol_options": map[string]any{}}}}
		}
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return str(cs[i], "name") < str(cs[j], "name") })
	b, err := yaml.Marshal(map[string]any{
		"admin": map[string]any{"address": map[string]any{"socket_address": map[string]any{"address": "0.0.0.0", "port_value": 15000}}},
		"static_resources": map[string]any{
			"listeners": []any{map[string]any{"name": "http",
				"address":       map[string]any{"socket_address": map[string]any{"address": "0.0.0.0", "port_value": 8080}},
				"filter_chains": []any{map[string]any{"filters": []any{map[string]any{"name": hcmFilter, "typed_config": hcm}}}}}},
			"clusters": cs,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// mergeYAML merges src into dst as protobuf merges messages: maps key by
// key, lists appended, anything else replaced.
func mergeYAML(dst, src map[string]any) {
	for k, v := range src {
		switch sv := v.(type) {
		case map[string]any:
			if dv, ok := dst[k].(map[string]any); ok {
				mergeYAML(dv, sv)
				continue
			}
		case []any:
			if dv, ok := dst[k].([]any); ok {
				dst[k] = append(dv, sv...)
				continue
			}
		}
		dst[k] = v
	}
}

// startIstioGateway runs the gateway's configuration with every EnvoyFilter
// of examples/istio/ applied, in the real Envoy, its floodgate cluster
// sending to rls and the backend's to backend. It returns the listener's
// address.
func startIstioGateway(t testing.TB, rls, backend string) string {
	t.Helper()
	ms := loadManifests(t, istioDir)
	var filters []kubeObject
	for _, m := range ms {
		if m.kind == "EnvoyFilter" {
			filters = append(filters, m)
		}
	}
	bootstrap := gatewayBootstrap(t, find(t, ms, "VirtualService", "demo"), filters)
	var doc map[string]any
	if err := yaml.Unmarshal(bootstrap, &doc); err != nil {
		t.Fatal(err)
	}
	upstreams := map[string][]string{}
	for name := range envoyClusters(doc) {
		upstreams[name] = []string{backend}
		if strings.Contains(name, "|floodgate.") {
			upstreams[name] = []string{rls}
		}
	}
	return envoytest.Start(t, envoytest.Config{Bootstrap: bootstrap, Upstreams: upstreams, LogLevel: "warning"}).Listener("http")
}

// istioRequests are sent through the gateway from 127.0.0.1, which it takes
// as the client's address (no proxy in front is trusted).
var istioRequests = []envoyRequest{
	{"any request is limited per client address", "GET", "/", nil, []string{
		"remote_address=127.0.0.1 -> demo.remote_address",
	}},
	{"an API key", "GET", "/orders", []string{"x-api-key: alice"}, []string{
		"remote_address=127.0.0.1 -> demo.remote_address",
		"api_key=alice -> demo.api_key",
	}},
	{"a write", "PUT", "/orders/1", nil, []string{
		"remote_address=127.0.0.1 -> demo.remote_address",
		"generic_key=writes -> demo.generic_key_writes",
	}},
	{"an export: the route's nested descriptor, then the virtual host's", "GET", "/export/report.csv", []string{"x-api-key: bob"}, []string{
		"api_key=bob, path=/export/report.csv -> demo.api_key.path_/export/*",
		"remote_address=127.0.0.1 -> demo.remote_address",
		"api_key=bob -> demo.api_key",
	}},
}

// TestIstio checks what the manifests of examples/istio/ share with each
// other and with examples/kubernetes/: names, ports, labels and the patches'
// places in the gateway.
func TestIstio(t *testing.T) {
	ms := loadManifests(t, istioDir)
	kube := loadManifests(t, kubeDir)
	gw := find(t, ms, "Gateway", "demo")
	vs := find(t, ms, "VirtualService", "demo")
	routePatches := map[string]bool{}
	var clusterName, authority string

	t.Run("patches follow Istio's pattern", func(t *testing.T) {
		for _, p := range configPatches(ms) {
			if str(p.match, "context") != "GATEWAY" {
				t.Errorf("%s: patch %s applies to context %q, want GATEWAY", p.filter.name, p.applyTo, str(p.match, "context"))
			}
			// Istio selects the workloads with Kubernetes label selector
			// semantics: the same labels as the Gateway's, so that the
			// filter lands on the gateway's pods and no others.
			sel, gwSel := stringMap(p.filter.fields(), "spec", "workloadSelector", "labels"), stringMap(gw.fields(), "spec", "selector")
			if s, err := labels.ValidatedSelectorFromSet(sel); err != nil || len(sel) == 0 || !labels.Equals(sel, gwSel) || !s.Matches(labels.Set(gwSel)) {
				t.Errorf("%s selects workloads %v (%v); the Gateway runs on %v", p.filter.name, sel, err, gwSel)
			}
			switch p.applyTo {
			case "HTTP_FILTER":
				if p.op != "INSERT_BEFORE" || str(p.match, "listener", "filterChain", "filter", "name") != hcmFilter ||
					str(p.match, "listener", "filterChain", "filter", "subFilter", "name") != httpRouterFilter {
					t.Errorf("%s: the filter is not inserted before %s in %s", p.filter.name, httpRouterFilter, hcmFilter)
				}
				eg := dig(p.value, "typed_config", "rate_limit_service", "grpc_service", "envoy_grpc")
				clusterName, authority = str(eg, "cluster_name"), str(eg, "authority")
			case "VIRTUAL_HOST", "HTTP_ROUTE":
				if p.op != "MERGE" {
					t.Errorf("%s: %s patch operation %s, want MERGE", p.filter.name, p.applyTo, p.op)
				}
				if p.applyTo == "HTTP_ROUTE" {
					routePatches[str(p.match, "routeConfiguration", "vhost", "route", "name")] = true
				}
			default:
				t.Errorf("%s: unexpected patch %s", p.filter.name, p.applyTo)
			}
		}
		if clusterName == "" {
			t.Fatal("no HTTP_FILTER patch inserts a filter calling a gRPC cluster")
		}
	})

	t.Run("the filter calls floodgate's gRPC Service", func(t *testing.T) {
		p, _, svcName, ns, err := istioCluster(clusterName)
		if err != nil {
			t.Fatal(err)
		}
		svc := get[*corev1.Service](t, kube, svcName)
		if svc.Namespace != ns {
			t.Errorf("cluster %s: Service %s is in namespace %q", clusterName, svcName, svc.Namespace)
		}
		found := false
		for _, sp := range svc.Spec.Ports {
			if strconv.Itoa(int(sp.Port)) == p {
				found = true
				if (sp.AppProtocol == nil || *sp.AppProtocol != "grpc") && !strings.HasPrefix(sp.Name, "grpc") {
					t.Errorf("Service port %s is not declared gRPC: Istio would speak HTTP/1.1 to it", p)
				}
			}
		}
		if !found {
			t.Errorf("cluster %s: Service %s has no port %s", clusterName, svcName, p)
		}
		if authority != "" && !strings.HasPrefix(authority, svcName+"."+ns+".") {
			t.Errorf("authority %q does not name Service %s.%s", authority, svcName, ns)
		}
	})

	t.Run("gateway, routes and backend agree", func(t *testing.T) {
		gws := list(vs.fields(), "spec", "gateways")
		if len(gws) != 1 || fmt.Sprint(gws[0]) != gw.namespace+"/"+gw.name {
			t.Errorf("VirtualService gateways %v, want [%s/%s]", gws, gw.namespace, gw.name)
		}
		var names []string
		for _, h := range list(vs.fields(), "spec", "http") {
			names = append(names, str(h, "name"))
			for _, r := range list(h, "route") {
				host := str(r, "destination", "host")
				svcName, rest, _ := strings.Cut(host, ".")
				ns, _, _ := strings.Cut(rest, ".")
				svc := get[*corev1.Service](t, ms, svcName)
				if svc.Namespace != ns {
					t.Errorf("route %s sends to %s; Service %s is in %q", str(h, "name"), host, svcName, svc.Namespace)
				}
				ok := false
				for _, sp := range svc.Spec.Ports {
					ok = ok || strconv.Itoa(int(sp.Port)) == str(r, "destination", "port", "number")
				}
				if !ok {
					t.Errorf("route %s sends to port %s, which Service %s lacks", str(h, "name"), str(r, "destination", "port", "number"), svcName)
				}
			}
		}
		for name := range routePatches {
			if !slices.Contains(names, name) {
				t.Errorf("an HTTP_ROUTE patch matches route %q; the VirtualService's routes are %q", name, names)
			}
		}
		for _, err := range checkSelectors(ms) {
			t.Error(err)
		}
	})
}
