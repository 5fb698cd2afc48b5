package envoytest

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const bootstrap = `
admin:
  address:
    socket_address: { address: 0.0.0.0, port_value: 9901 }
static_resources:
  listeners:
    - name: http
      address:
        socket_address: { address: 0.0.0.0, port_value: 10000 }
      filter_chains:
        - filters:
            - name: envoy.filters.network.http_connection_manager
              typed_config:
                "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
                stat_prefix: t
                route_config:
                  virtual_hosts:
                    - name: all
                      domains: ["*"]
                      routes:
                        - match: { prefix: / }
                          route: { cluster: backend }
                http_filters:
                  - name: envoy.filters.http.router
                    typed_config:
                      "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
    - name: backend
      type: STRICT_DNS
      connect_timeout: 1s
      load_assignment:
        cluster_name: backend
        endpoints:
          - lb_endpoints:
              - endpoint:
                  address:
                    socket_address: { address: backend, port_value: 80 }
`

func TestRewriteRefuses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		upstreams map[string][]string
		want      string
	}{
		{"unmapped off-loopback cluster", nil, `cluster "backend" points at "backend"`},
		{"unknown cluster", map[string][]string{"backend": {"127.0.0.1:1"}, "nope": {"127.0.0.1:2"}}, `no cluster "nope"`},
		{"bad address", map[string][]string{"backend": {"127.0.0.1"}}, `cluster "backend"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Rewrite([]byte(bootstrap), tc.upstreams)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Rewrite: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestStartProxies runs a real Envoy on the rewritten bootstrap and sends a
// request through it, which reaches the test's backend.
func TestStartProxies(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path)
	}))
	defer backend.Close()
	e := Start(t, Config{
		Bootstrap: []byte(bootstrap),
		Upstreams: map[string][]string{"backend": {backend.Listener.Addr().String()}},
	})
	resp, err := http.Get("http://" + e.Listener("http") + "/x")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "hello /x" {
		t.Fatalf("through envoy: %d %q", resp.StatusCode, body)
	}
	c, err := e.Counters("cluster.backend.upstream_rq_")
	if err != nil {
		t.Fatal(err)
	}
	if c["cluster.backend.upstream_rq_200"] != 1 {
		t.Fatalf("envoy counted %v, want one upstream 200", c)
	}
	if _, port, _ := net.SplitHostPort(e.Listener("http")); port == "10000" || port == "0" {
		t.Fatalf("listener port %s was not rewritten to a free one", port)
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte(bootstrap), 0o644)
	os.WriteFile(bad, []byte(strings.Replace(bootstrap, "connect_timeout: 1s", "connect_timeout: soon", 1)), 0o644)
	if out, err := Validate(t, good); err != nil {
		t.Fatalf("valid bootstrap refused: %v\n%s", err, out)
	}
	if _, err := Validate(t, bad); err == nil {
		t.Fatal("a bootstrap with connect_timeout: soon was accepted")
	}
}
