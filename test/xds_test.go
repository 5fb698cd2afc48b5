package test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/xds"
	"github.com/floodgate/floodgate/internal/xdstest"
)

// TestXDS runs the binary as Envoy Gateway runs the reference server, with
// the environment its rate-limit Deployment sets (CONFIG_TYPE=GRPC_XDS_SOTW,
// mutual TLS to the management server from /certs, forced start, Redis,
// RUNTIME_* left over), against a real management server (go-control-plane's,
// with its snapshot cache): /json answers by the pushed rules, a changed
// limit takes effect, a broken push is refused while the rules in force
// serve, and /rlconfig and the reload metrics show the pushes as they show
// file reloads. A floodgate rule file pushed in a resource brings its
// extensions.
func TestXDS(t *testing.T) {
	// Envoy Gateway's secret envoy-rate-limit, mounted at /certs: one
	// certificate for both ends, signed by the CA beside it.
	certs := t.TempDir()
	ca := testcert.NewCA(t, "envoy-gateway CA")
	pair := ca.Issue(t, "envoy-gateway", testcert.ServerAndClient, "envoy-gateway", "127.0.0.1")
	certFile, keyFile := pair.Write(t, certs, "tls")
	caFile := ca.WriteCA(t, certs, "ca")
	mgmt := xdstest.Start(t, "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pair.TLS(t)}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	})
	push := func(version string, res ...types.Resource) {
		t.Helper()
		mgmt.Set("envoy-ratelimit", version, res...)
	}
	limit := func(n uint32) *rlsconf.RateLimitConfig {
		return &rlsconf.RateLimitConfig{Name: "default/eg/http", Domain: "default/eg/http", Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n},
		}}}
	}
	push("1", limit(2))

	redis := redistest.Start(t)
	p := start(t, options{envAddrs: true, env: []string{
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr,
		"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
		"LOG_LEVEL=info", "USE_STATSD=false",
		// Its name for the client CA, which neither server reads.
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certFile, "GRPC_SERVER_TLS_KEY=" + keyFile, "GRPC_SERVER_TLS_CA_CERT=" + caFile,
		"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + mgmt.Addr, "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
		"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + certFile,
		"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + keyFile, "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + caFile,
		"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
		"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL=100ms", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL=100ms",
	}})
	eventually(t, 5*time.Second, func() string {
		if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "version: 1\n") {
			return "the first push is not in force:\n" + body
		}
		return ""
	})
	if !strings.Contains(p.Logs.String(), "the rules come from the xDS server") {
		t.Errorf("no note that RUNTIME_* is not read with xDS:\n%s", p.Logs)
	}
	ask := func(user string) string {
		_, body := p.postJSON(`{"domain":"default/eg/http","descriptors":[{"entries":[{"key":"user","value":"` + user + `"}]}]}`)
		return body
	}
	for i, want := range []string{`"overallCode":"OK"`, `"overallCode":"OK"`, `"overallCode":"OVER_LIMIT"`} {
		if body := ask("alice"); !strings.Contains(body, want) || !strings.Contains(body, `"requestsPerUnit":2`) {
			t.Fatalf("request %d by the pushed limit of 2: %s, want %s", i+1, body, want)
		}
	}
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "version: 1\n") || !strings.Contains(body, "origin: 1\n") ||
		!strings.Contains(body, "(xds/default/eg/http:") {
		t.Errorf("/rlconfig after the first push lacks version 1, the pushed version_info and the pushed rule:\n%s", body)
	}
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "source: xds "+mgmt.Addr+` node envoy-ratelimit: receiving rules; last ACK "1" at `) {
		t.Errorf("/rlconfig lacks the state of the xDS connection:\n%s", body)
	}
	if _, body := p.httpGet("/ui/api/snapshot"); !strings.Contains(body, `"origin":"1"`) || !strings.Contains(body, `"source":"xds `) {
		t.Errorf("the live page's snapshot lacks the xDS origin and source:\n%.600s", body)
	}

	// A broken push: refused, shown, counted; the rules in force serve.
	broken := limit(9)
	broken.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	push("2", broken)
	eventually(t, 5*time.Second, func() string {
		if v := p.metric(`floodgate_rules_reloads_total{result="failure"}`); v != 1 {
			return "no failed reload counted"
		}
		return ""
	})
	if _, body := p.httpGet("/rlconfig"); !strings.Contains(body, "version: 1\n") || !strings.Contains(body, "failures: 1\n") ||
		!strings.Contains(body, "rate_limit.unit") {
		t.Errorf("/rlconfig after a broken push lacks version 1, 1 failure and the error:\n%s", body)
	}
	// The refused files, which the error's positions point into, are on
	// the debug listener, and only there.
	if code, body := get("http://" + p.DebugAddr + "/ui/xds/"); code != 200 || body != "version_info: 2\n/ui/xds/default/eg/http\n" {
		t.Errorf("debug /ui/xds/: %d %q, want the pushed version and its one file", code, body)
	}
	if code, body := get("http://" + p.DebugAddr + "/ui/xds/default/eg/http"); code != 200 || !strings.Contains(body, "requests_per_unit: 9") {
		t.Errorf("debug /ui/xds/default/eg/http: %d %q, want the refused push's YAML", code, body)
	}
	if code, _ := get("http://" + p.HTTPAddr + "/ui/xds/default/eg/http"); code == 200 {
		t.Error("the pushed files are served on the HTTP listener too, want the debug listener only")
	}
	if body := ask("alice"); !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Errorf("after a broken push: %s, want the limit of 2 still in force", body)
	}

	// A changed limit, and a floodgate rule file with an extension.
	push("3", limit(50), xds.RuleFile("shop", []byte("domain: shop\ndescriptors:\n  - key: api_key\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      algorithm: token_bucket\n      burst: 3\n")))
	eventually(t, 5*time.Second, func() string {
		if body := ask("alice"); !strings.Contains(body, `"requestsPerUnit":50`) {
			return "the changed limit is not in force: " + body
		}
		return ""
	})
	if v := p.metric("floodgate_rules_version"); v != 2 {
		t.Errorf("floodgate_rules_version = %v, want 2", v)
	}
	if v := p.metric(`floodgate_rules_reloads_total{result="success"}`); v != 1 {
		t.Errorf(`floodgate_rules_reloads_total{result="success"} = %v, want 1`, v)
	}
	// A burst of 3 passes three at once, which no plain limit of 1 a
	// second would.
	for i := range 4 {
		_, body := p.postJSON(`{"domain":"shop","descriptors":[{"entries":[{"key":"api_key","value":"k"}]}]}`)
		if want := i < 3; strings.Contains(body, `"overallCode":"OK"`) != want {
			t.Errorf("token bucket request %d: %s, want allowed %v", i+1, body, want)
		}
	}
}
