package examples_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const istioDir = "istio"

// patchValue decodes an EnvoyFilter patch value into a proto message.
func patchValue(t *testing.T, v any, m proto.Message) {
	t.Helper()
	js, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(js, m); err != nil {
		t.Fatalf("patch value as %s: %v", m.ProtoReflect().Descriptor().FullName(), err)
	}
}

// configPatch is one EnvoyFilter configPatches entry.
type configPatch struct {
	filter  manifest
	applyTo string
	match   any
	op      string
	value   any
}

func configPatches(ms []manifest) []configPatch {
	var out []configPatch
	for _, m := range ms {
		if m.kind != "EnvoyFilter" {
			continue
		}
		for _, p := range list(m.obj, "spec", "configPatches") {
			out = append(out, configPatch{filter: m, applyTo: str(p, "applyTo"), match: dig(p, "match"),
				op: str(p, "patch", "operation"), value: dig(p, "patch", "value")})
		}
	}
	return out
}

// istioCluster splits Istio's outbound|<port>|<subset>|<host> cluster name.
func istioCluster(name string) (port, service, namespace string, err error) {
	parts := strings.Split(name, "|")
	if len(parts) != 4 || parts[0] != "outbound" {
		return "", "", "", fmt.Errorf("cluster %q is not outbound|<port>|<subset>|<host>", name)
	}
	host := strings.Split(parts[3], ".")
	if len(host) < 3 || host[2] != "svc" {
		return "", "", "", fmt.Errorf("cluster %q: host %q is not <service>.<namespace>.svc...", name, parts[3])
	}
	return parts[1], host[0], host[1], nil
}

func TestIstio(t *testing.T) {
	ms := loadManifests(t, istioDir)
	kube := loadManifests(t, kubeDir)
	set := loadRules(t)
	patches := configPatches(ms)
	gw := find(t, ms, "Gateway", "demo")
	vs := find(t, ms, "VirtualService", "demo")

	var filter *hcmv3.HttpFilter
	var vhost routev3.VirtualHost
	routePatches := map[string]*routev3.Route{}

	t.Run("patches validate and follow Istio's pattern", func(t *testing.T) {
		for _, p := range patches {
			if str(p.match, "context") != "GATEWAY" {
				t.Errorf("%s: patch %s applies to context %q, want GATEWAY", p.filter.name, p.applyTo, str(p.match, "context"))
			}
			if sel := labels(p.filter.obj, "spec", "workloadSelector", "labels"); !selects(sel, labels(gw.obj, "spec", "selector")) || len(sel) != len(labels(gw.obj, "spec", "selector")) {
				t.Errorf("%s selects workloads %v; the Gateway runs on %v", p.filter.name, sel, labels(gw.obj, "spec", "selector"))
			}
			switch p.applyTo {
			case "HTTP_FILTER":
				if p.op != "INSERT_BEFORE" || str(p.match, "listener", "filterChain", "filter", "name") != hcmFilter ||
					str(p.match, "listener", "filterChain", "filter", "subFilter", "name") != httpRouterFilter {
					t.Errorf("%s: the filter is not inserted before %s in %s", p.filter.name, httpRouterFilter, hcmFilter)
				}
				filter = &hcmv3.HttpFilter{}
				patchValue(t, p.value, filter)
				if err := validateDeep(filter); err != nil {
					t.Error(err)
				}
			case "VIRTUAL_HOST":
				if p.op != "MERGE" {
					t.Errorf("%s: VIRTUAL_HOST patch operation %s, want MERGE", p.filter.name, p.op)
				}
				patchValue(t, p.value, &vhost)
				for _, rl := range vhost.GetRateLimits() {
					if err := validateDeep(rl); err != nil {
						t.Error(err)
					}
				}
			case "HTTP_ROUTE":
				if p.op != "MERGE" {
					t.Errorf("%s: HTTP_ROUTE patch operation %s, want MERGE", p.filter.name, p.op)
				}
				rt := &routev3.Route{}
				patchValue(t, p.value, rt)
				for _, rl := range rt.GetRoute().GetRateLimits() {
					if err := validateDeep(rl); err != nil {
						t.Error(err)
					}
				}
				for name, a := range rt.GetTypedPerFilterConfig() {
					inner, err := unpack[proto.Message](a)
					if err == nil {
						err = validateDeep(inner)
					}
					if err != nil {
						t.Errorf("typed_per_filter_config[%q]: %v", name, err)
					}
				}
				routePatches[str(p.match, "routeConfiguration", "vhost", "route", "name")] = rt
			default:
				t.Errorf("%s: unexpected patch %s", p.filter.name, p.applyTo)
			}
		}
		if filter == nil {
			t.Fatal("no HTTP_FILTER patch inserts the ratelimit filter")
		}
	})
	if filter == nil {
		t.FailNow()
	}
	rl, err := unpack[*ratelimitv3.RateLimit](filter.GetTypedConfig())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("the filter calls floodgate's gRPC Service", func(t *testing.T) {
		if filter.GetName() != httpRateLimitFilter {
			t.Errorf("filter name %q, want %s", filter.GetName(), httpRateLimitFilter)
		}
		if !set.HasDomain(rl.GetDomain()) {
			t.Errorf("domain %q is not declared in config/", rl.GetDomain())
		}
		checkFilterTimeout(t, rl.GetTimeout().AsDuration())
		if rl.GetRateLimitService().GetTransportApiVersion().String() != "V3" {
			t.Error("transport_api_version is not V3")
		}
		eg := rl.GetRateLimitService().GetGrpcService().GetEnvoyGrpc()
		p, svcName, ns, err := istioCluster(eg.GetClusterName())
		if err != nil {
			t.Fatal(err)
		}
		svc := find(t, kube, "Service", svcName)
		if svc.namespace != ns {
			t.Errorf("cluster %s: Service %s is in namespace %q", eg.GetClusterName(), svcName, svc.namespace)
		}
		found := false
		for _, sp := range list(svc.obj, "spec", "ports") {
			if str(sp, "port") == p {
				found = true
				if str(sp, "appProtocol") != "grpc" && !strings.HasPrefix(str(sp, "name"), "grpc") {
					t.Errorf("Service port %s is not declared gRPC: Istio would speak HTTP/1.1 to it", p)
				}
			}
		}
		if !found {
			t.Errorf("cluster %s: Service %s has no port %s", eg.GetClusterName(), svcName, p)
		}
		if a := eg.GetAuthority(); a != "" && !strings.HasPrefix(a, svcName+"."+ns+".") {
			t.Errorf("authority %q does not name Service %s.%s", a, svcName, ns)
		}
	})

	t.Run("gateway, routes and backend agree", func(t *testing.T) {
		gws := list(vs.obj, "spec", "gateways")
		if len(gws) != 1 || fmt.Sprint(gws[0]) != gw.namespace+"/"+gw.name {
			t.Errorf("VirtualService gateways %v, want [%s/%s]", gws, gw.namespace, gw.name)
		}
		var names []string
		for _, h := range list(vs.obj, "spec", "http") {
			names = append(names, str(h, "name"))
			for _, r := range list(h, "route") {
				host := str(r, "destination", "host")
				svcName, rest, _ := strings.Cut(host, ".")
				ns, _, _ := strings.Cut(rest, ".")
				svc := find(t, ms, "Service", svcName)
				if svc.namespace != ns {
					t.Errorf("route %s sends to %s; Service %s is in %q", str(h, "name"), host, svcName, svc.namespace)
				}
				ok := false
				for _, sp := range list(svc.obj, "spec", "ports") {
					ok = ok || str(sp, "port") == str(r, "destination", "port", "number")
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
		dep := find(t, ms, "Deployment", "backend")
		if !selects(labels(find(t, ms, "Service", "backend").obj, "spec", "selector"), labels(dep.obj, "spec", "template", "metadata", "labels")) {
			t.Error("Service backend does not select the backend pods")
		}
	})

	t.Run("every descriptor matches its intended rule", func(t *testing.T) {
		// The gateway's route table as Istio builds it from the
		// VirtualService, with the patches merged.
		vh := proto.Clone(&vhost).(*routev3.VirtualHost)
		vh.Name, vh.Domains = "*:80", []string{"*"}
		for _, h := range list(vs.obj, "spec", "http") {
			prefix := "/"
			if p := str(h, "match", 0, "uri", "prefix"); p != "" {
				prefix = p
			}
			rt := &routev3.Route{
				Name:  str(h, "name"),
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: prefix}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{
					Cluster: "outbound|" + str(h, "route", 0, "destination", "port", "number") + "||" + str(h, "route", 0, "destination", "host")}}},
			}
			if p := routePatches[rt.Name]; p != nil {
				proto.Merge(rt, p)
			}
			vh.Routes = append(vh.Routes, rt)
		}
		hcm := &hcmv3.HttpConnectionManager{
			StatPrefix:       "outbound_0.0.0.0_80",
			UseRemoteAddress: wrapperspb.Bool(true),
			RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
				VirtualHosts: []*routev3.VirtualHost{vh}}},
			HttpFilters: []*hcmv3.HttpFilter{filter, {Name: httpRouterFilter}},
		}
		m, err := newHTTPModelFromHCM(hcm)
		if err != nil {
			t.Fatal(err)
		}
		intents := []httpIntent{
			{"any request is limited per client IP", newRequest("GET", "/", "203.0.113.7"), []string{
				"remote_address=203.0.113.7 -> demo.remote_address",
			}},
			{"an API key", newRequest("GET", "/orders", "203.0.113.8", "x-api-key: alice"), []string{
				"remote_address=203.0.113.8 -> demo.remote_address",
				"api_key=alice -> demo.api_key",
			}},
			{"a write", newRequest("PUT", "/orders/1", "203.0.113.9"), []string{
				"remote_address=203.0.113.9 -> demo.remote_address",
				"generic_key=writes -> demo.generic_key_writes",
			}},
			{"an export", newRequest("GET", "/export/report.csv", "203.0.113.10", "x-api-key: bob"), []string{
				"api_key=bob, path=/export/report.csv -> demo.api_key.path_/export/*",
				"remote_address=203.0.113.10 -> demo.remote_address",
				"api_key=bob -> demo.api_key",
			}},
		}
		used := map[any]bool{}
		for _, in := range intents {
			_, descs, err := m.descriptors(in.req)
			if err != nil {
				t.Fatalf("%s: %v", in.name, err)
			}
			var got []string
			for _, p := range descs {
				got = append(got, describe(set, rl.GetDomain(), p.desc))
				used[p.policy] = true
			}
			if !slices.Equal(got, in.want) {
				t.Errorf("%s: sends\n\t%s\nwant\n\t%s", in.name, strings.Join(got, "\n\t"), strings.Join(in.want, "\n\t"))
			}
		}
		for p, where := range m.allPolicies() {
			if !used[p] {
				t.Errorf("%s produced no descriptor for any request of the table", where)
			}
		}
	})
}
