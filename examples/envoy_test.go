package examples_test

import (
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitconfv3 "github.com/envoyproxy/go-control-plane/envoy/config/ratelimit/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
)

// The listeners of the examples, which docker-compose.yml publishes.
const (
	envoyHTTPFile = "envoy.yaml"
	envoyTCPFile  = "envoy-tcp.yaml"
	envoyHTTPPort = 10000
	envoyTCPPort  = 10001
)

// loadRules loads the repository's rules, as the demo serves them.
func loadRules(t testing.TB) *rules.Set {
	t.Helper()
	set, err := rules.Load(filepath.Join(repoRoot, "config"), rules.Options{})
	if err != nil {
		t.Fatalf("config/: %v", err)
	}
	return set
}

// describe prints a descriptor and the rule it matches, e.g.
// "api_key=alice, path=/export/a -> demo.api_key.path_/export/*".
func describe(set *rules.Set, domain string, d *rlcommonv3.RateLimitDescriptor) string {
	var parts []string
	var entries []rules.Entry
	for _, e := range d.GetEntries() {
		parts = append(parts, e.GetKey()+"="+e.GetValue())
		entries = append(entries, rules.Entry{Key: e.GetKey(), Value: e.GetValue()})
	}
	s := strings.Join(parts, ", ")
	if l := d.GetLimit(); l != nil {
		s += fmt.Sprintf(" limit=%d/%s", l.GetRequestsPerUnit(), l.GetUnit())
	}
	if r := set.Match(domain, entries); r != nil {
		return s + " -> " + r.Path
	}
	return s + " -> no rule"
}

// checkRateLimitService checks what validation cannot: the service speaks
// the v3 API over an HTTP/2 cluster that exists, on floodgate's gRPC port,
// health-checked with a service name floodgate reports.
func checkRateLimitService(t *testing.T, b *bootstrapv3.Bootstrap, svc *ratelimitconfv3.RateLimitServiceConfig) {
	t.Helper()
	if svc.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		t.Errorf("rate_limit_service.transport_api_version is %v: floodgate serves only V3", svc.GetTransportApiVersion())
	}
	name := svc.GetGrpcService().GetEnvoyGrpc().GetClusterName()
	c := cluster(b, name)
	if c == nil {
		t.Fatalf("rate_limit_service names cluster %q; the clusters are %s", name, clusterNames(b))
	}
	opts := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
	if opts == nil {
		t.Fatalf("cluster %q has no HttpProtocolOptions: Envoy would speak HTTP/1.1 to a gRPC server", name)
	}
	po, err := unpack[*upstreamhttpv3.HttpProtocolOptions](opts)
	if err != nil {
		t.Fatal(err)
	}
	if po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Errorf("cluster %q: want explicit_http_config.http2_protocol_options, have %v", name, po.GetUpstreamProtocolOptions())
	}
	_, grpcPort, _ := net.SplitHostPort(flagDefaults(t)["grpc-addr"])
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, ep := range le.GetLbEndpoints() {
			sa := ep.GetEndpoint().GetAddress().GetSocketAddress()
			if strconv.Itoa(int(sa.GetPortValue())) != grpcPort {
				t.Errorf("cluster %q sends to %s:%d, but floodgate's gRPC port is %s", name, sa.GetAddress(), sa.GetPortValue(), grpcPort)
			}
		}
	}
	hcs := c.GetHealthChecks()
	if len(hcs) == 0 {
		t.Errorf("cluster %q has no health check", name)
	}
	for _, hc := range hcs {
		g := hc.GetGrpcHealthCheck()
		if g == nil {
			t.Errorf("cluster %q: want a gRPC health check, have %T", name, hc.GetHealthChecker())
			continue
		}
		if !slices.Contains(server.HealthServices, g.GetServiceName()) {
			t.Errorf("cluster %q checks gRPC health service %q; floodgate reports %q", name, g.GetServiceName(), server.HealthServices)
		}
	}
}

// checkFilterTimeout wants a timeout short enough to bound the latency
// Envoy adds, and longer than floodgate's store deadline so that
// floodgate's own failure policy answers when Redis is slow.
func checkFilterTimeout(t *testing.T, got time.Duration) {
	t.Helper()
	deadline, err := time.ParseDuration(flagDefaults(t)["redis-deadline"])
	if err != nil {
		t.Fatal(err)
	}
	if got <= deadline || got > time.Second {
		t.Errorf("filter timeout %v: want more than floodgate's -redis-deadline (%v) and at most 1s", got, deadline)
	}
}

// httpIntent is a request and what its descriptors must match, each as
// describe prints it.
type httpIntent struct {
	name string
	req  request
	want []string
}

// envoyHTTPIntents are the requests the demo is about. Every descriptor the
// routes produce appears here with the rule it is meant for.
var envoyHTTPIntents = []httpIntent{
	{"any request is limited per client IP", newRequest("GET", "/", "203.0.113.7", "user-agent: curl/8.5.0"), []string{
		"remote_address=203.0.113.7 -> demo.remote_address",
		"user_agent=curl/8.5.0 -> no rule",
	}},
	{"X-Forwarded-For names the client (one trusted hop)", newRequest("GET", "/", "172.18.0.1", "x-forwarded-for: 192.0.2.66"), []string{
		"remote_address=192.0.2.66 -> demo.remote_address_192.0.2.66",
	}},
	{"the monitoring host", newRequest("GET", "/", "10.0.0.10"), []string{
		"remote_address=10.0.0.10 -> demo.remote_address_10.0.0.10",
	}},
	{"an API key", newRequest("GET", "/orders", "203.0.113.8", "x-api-key: alice"), []string{
		"remote_address=203.0.113.8 -> demo.remote_address",
		"api_key=alice -> demo.api_key",
	}},
	{"writes share one limit", newRequest("POST", "/orders", "203.0.113.9"), []string{
		"remote_address=203.0.113.9 -> demo.remote_address",
		"generic_key=writes -> demo.generic_key_writes",
	}},
	{"DELETE is a write", newRequest("DELETE", "/orders/1", "203.0.113.9"), []string{
		"remote_address=203.0.113.9 -> demo.remote_address",
		"generic_key=writes -> demo.generic_key_writes",
	}},
	{"HEAD is not", newRequest("HEAD", "/orders", "203.0.113.9"), []string{
		"remote_address=203.0.113.9 -> demo.remote_address",
	}},
	{"an export with a key: the nested (api_key, path) shape first", newRequest("GET", "/export/report.csv", "203.0.113.10", "x-api-key: bob"), []string{
		"api_key=bob, path=/export/report.csv -> demo.api_key.path_/export/*",
		"remote_address=203.0.113.10 -> demo.remote_address",
		"api_key=bob -> demo.api_key",
	}},
	{"an export without a key drops the nested shape", newRequest("GET", "/export/report.csv", "203.0.113.10"), []string{
		"remote_address=203.0.113.10 -> demo.remote_address",
	}},
	{"static files share one counter", newRequest("GET", "/static/app.js", "203.0.113.11"), []string{
		"path=/static/ -> demo.path_/static/*",
		"remote_address=203.0.113.11 -> demo.remote_address",
	}},
	{"searches carry the override", newRequest("GET", "/api/v2/search?q=envoy", "203.0.113.12"), []string{
		"path=/api/v2/search?q=envoy limit=5/MINUTE -> demo.path_/api/*/search*",
		"remote_address=203.0.113.12 -> demo.remote_address",
	}},
	{"a non-search API path is not a search", newRequest("GET", "/api/v2/searches", "203.0.113.12"), []string{
		"remote_address=203.0.113.12 -> demo.remote_address",
	}},
	{"health checks call nothing", newRequest("GET", "/health", "10.0.0.10"), nil},
	{"crawlers", newRequest("GET", "/", "203.0.113.13", "user-agent: Googlebot/2.1"), []string{
		"remote_address=203.0.113.13 -> demo.remote_address",
		"user_agent=Googlebot/2.1 -> demo.user_agent_*bot*",
	}},
	{"a tenant on the free plan", newRequest("GET", "/", "203.0.113.14", "x-tenant: acme", "x-plan: free"), []string{
		"remote_address=203.0.113.14 -> demo.remote_address",
		"tenant=acme, plan=free -> demo.tenant.plan_free",
	}},
	{"a pro tenant with an API key", newRequest("GET", "/", "203.0.113.14", "x-tenant: initech", "x-plan: pro", "x-api-key: carol"), []string{
		"remote_address=203.0.113.14 -> demo.remote_address",
		"api_key=carol -> demo.api_key",
		"tenant=initech, plan=pro -> demo.tenant.plan_pro",
	}},
	{"a tenant without a plan sends no tenant descriptor", newRequest("GET", "/", "203.0.113.14", "x-tenant: acme"), []string{
		"remote_address=203.0.113.14 -> demo.remote_address",
	}},
}

func TestEnvoyHTTPExample(t *testing.T) {
	b, err := loadBootstrap(envoyHTTPFile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newHTTPModel(b, envoyHTTPPort)
	if err != nil {
		t.Fatalf("%s: %v", envoyHTTPFile, err)
	}
	set := loadRules(t)
	f := m.filter

	t.Run("ratelimit filter", func(t *testing.T) {
		if !set.HasDomain(f.GetDomain()) {
			t.Errorf("filter domain %q is not declared in config/ (domains: %v)", f.GetDomain(), set.Domains())
		}
		checkFilterTimeout(t, f.GetTimeout().AsDuration())
		if f.GetFailureModeDeny() {
			t.Error("failure_mode_deny is true: the demo fails open")
		}
		if f.GetEnableXRatelimitHeaders() != ratelimitv3.RateLimit_DRAFT_VERSION_03 {
			t.Errorf("enable_x_ratelimit_headers is %v", f.GetEnableXRatelimitHeaders())
		}
		if !f.GetRateLimitedAsResourceExhausted() {
			t.Error("rate_limited_as_resource_exhausted is off")
		}
		checkRateLimitService(t, b, f.GetRateLimitService())
	})

	t.Run("routes and per-route configs name what exists", func(t *testing.T) {
		filters := map[string]bool{}
		for _, hf := range m.hcm.GetHttpFilters() {
			filters[hf.GetName()] = true
		}
		for _, vh := range m.hcm.GetRouteConfig().GetVirtualHosts() {
			for name := range vh.GetTypedPerFilterConfig() {
				if !filters[name] {
					t.Errorf("virtual host %q configures filter %q, which is not in the chain", vh.GetName(), name)
				}
			}
			for i, rt := range vh.GetRoutes() {
				if c := rt.GetRoute().GetCluster(); c != "" && cluster(b, c) == nil {
					t.Errorf("routes[%d] sends to cluster %q; the clusters are %s", i, c, clusterNames(b))
				}
				for name := range rt.GetTypedPerFilterConfig() {
					if !filters[name] {
						t.Errorf("routes[%d] configures filter %q, which is not in the chain", i, name)
					}
				}
			}
		}
	})

	t.Run("every descriptor matches its intended rule", func(t *testing.T) {
		used := map[any]bool{}
		for _, in := range envoyHTTPIntents {
			_, descs, err := m.descriptors(in.req)
			if err != nil {
				t.Fatalf("%s: %v", in.name, err)
			}
			var got []string
			for _, p := range descs {
				got = append(got, describe(set, f.GetDomain(), p.desc))
				used[p.policy] = true
			}
			if !slices.Equal(got, in.want) {
				t.Errorf("%s: %s %s sends\n\t%s\nwant\n\t%s", in.name, in.req.method, in.req.path,
					strings.Join(got, "\n\t"), strings.Join(in.want, "\n\t"))
			}
		}
		for p, where := range m.allPolicies() {
			if !used[p] {
				t.Errorf("%s produced no descriptor for any request of the table: add the requests it is for", where)
			}
		}
	})
}

func TestEnvoyTCPExample(t *testing.T) {
	b, err := loadBootstrap(envoyTCPFile)
	if err != nil {
		t.Fatal(err)
	}
	m, err := newTCPModel(b, envoyTCPPort)
	if err != nil {
		t.Fatalf("%s: %v", envoyTCPFile, err)
	}
	set := loadRules(t)
	f := m.filter
	if !set.HasDomain(f.GetDomain()) {
		t.Errorf("filter domain %q is not declared in config/ (domains: %v)", f.GetDomain(), set.Domains())
	}
	checkFilterTimeout(t, f.GetTimeout().AsDuration())
	if f.GetFailureModeDeny() {
		t.Error("failure_mode_deny is true: the demo fails open")
	}
	checkRateLimitService(t, b, f.GetRateLimitService())

	l, _ := listenerOnPort(b, envoyTCPPort)
	var order []string
	for _, nf := range l.GetFilterChains()[0].GetFilters() {
		order = append(order, nf.GetName())
	}
	if !slices.Equal(order, []string{networkRateLimitFilter, tcpProxyFilter}) {
		t.Errorf("network filters %v: want the ratelimit filter, then tcp_proxy", order)
	}
	proxy, err := networkFilter[*tcpproxyv3.TcpProxy](l, tcpProxyFilter)
	if err != nil {
		t.Fatal(err)
	}
	if cluster(b, proxy.GetCluster()) == nil {
		t.Errorf("tcp_proxy sends to cluster %q; the clusters are %s", proxy.GetCluster(), clusterNames(b))
	}

	descs, err := m.descriptors(netip.MustParseAddr("172.18.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range descs {
		got = append(got, describe(set, f.GetDomain(), d))
	}
	want := []string{"remote_address=172.18.0.1 -> demo.remote_address"}
	if !slices.Equal(got, want) {
		t.Errorf("a connection from 172.18.0.1 sends %q, want %q", got, want)
	}
}
