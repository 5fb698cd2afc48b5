package test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/testcert"
)

// TestRedisTLS starts floodgate as a migrating user would, with only the
// reference server's variables, against redis-server's own TLS port with a
// private CA and client certificates required: limits are decided in
// Redis over TLS, on a single node and on a Cluster. With the wrong CA the
// server still starts (the failure policy answers), but says so loudly
// from the start: an error-level log line naming the unknown authority,
// /rlconfig, and floodgate_store_healthy 0, before any request.
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	ca, clientCA, other := testcert.NewCA(t, "redis CA"), testcert.NewCA(t, "clients CA"), testcert.NewCA(t, "wrong CA")
	tls := &redistest.TLS{CA: ca, ClientCA: clientCA}
	certFile, keyFile := clientCA.Issue(t, "floodgate", testcert.Client).Write(t, dir, "client")
	base := []string{"FLOODGATE_CONFIG=" + dir, "REDIS_SOCKET_TYPE=tcp", "REDIS_TLS=true",
		"REDIS_TLS_CLIENT_CERT=" + certFile, "REDIS_TLS_CLIENT_KEY=" + keyFile}

	single := redistest.StartTLS(t, tls)
	cluster := redistest.StartClusterTLS(t, 3, 0, tls)
	tests := []struct {
		name string
		env  []string
	}{
		{"single", []string{"REDIS_URL=" + single.TLSAddr}},
		// Cluster nodes announce addresses their certificates may not
		// name; the reference's users skip the name there.
		{"cluster", []string{"REDIS_TYPE=CLUSTER", "REDIS_URL=" + strings.Join(cluster.TLSAddrs, ","), "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := append(append([]string{"REDIS_TLS_CACERT=" + ca.WriteCA(t, t.TempDir(), "ca")}, base...), tc.env...)
			p := start(t, options{env: env})
			for i, want := range []string{"OK OK:2", "OK OK:1", "OK OK:0", "OVER OVER:0"} {
				if got := summary(p.mustCall(request("e2e", desc("user", tc.name)))); got != want {
					t.Errorf("request %d: %q, want %q", i+1, got, want)
				}
			}
			if v := p.metric("floodgate_store_healthy"); v != 1 {
				t.Errorf("floodgate_store_healthy = %v, want 1", v)
			}
			if strings.Contains(p.Logs.String(), "level=ERROR") {
				t.Errorf("errors logged with the right CA:\n%s", p.Logs)
			}
		})
	}

	t.Run("a wrong CA", func(t *testing.T) {
		env := append(append([]string{"REDIS_TLS_CACERT=" + other.WriteCA(t, t.TempDir(), "other")}, base...), "REDIS_URL="+single.TLSAddr)
		p := start(t, options{unready: true, env: env})
		checkUnhealthy(t, p, "certificate signed by unknown authority")
		// The failure policy answers, and health stays unhealthy with
		// requests coming: they never reach Redis.
		for range 3 {
			if got := summary(p.mustCall(request("e2e", desc("user", "wrong-ca")))); got != "OK OK:-" {
				t.Errorf("a request with a wrong CA: %q, want the failure policy's allow", got)
			}
		}
		time.Sleep(1500 * time.Millisecond) // a probe or two
		if v := p.metric("floodgate_store_healthy"); v != 0 {
			t.Errorf("floodgate_store_healthy = %v with a wrong CA, want 0", v)
		}
		if n := strings.Count(p.Logs.String(), "level=ERROR"); n != 1 {
			t.Errorf("%d error lines, want the one at start (the failure stays, it does not begin again):\n%s", n, p.Logs)
		}
		if got := fmt.Sprint(p.metric(`floodgate_store_errors_total{store="redis"}`)); got != "3" {
			t.Errorf("store errors %s, want 3 (one per request)", got)
		}
	})
}
