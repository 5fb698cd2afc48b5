package memcachelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/limit"
)

// TestTLS talks to memcached's own TLS port with a private CA, as the
// reference server's MEMCACHE_TLS, MEMCACHE_TLS_CACERT,
// MEMCACHE_TLS_CLIENT_CERT, MEMCACHE_TLS_CLIENT_KEY and
// MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION do, and decides a limit over it.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, clients, other := testcert.NewCA(t, "memcached CA"), testcert.NewCA(t, "clients CA"), testcert.NewCA(t, "another CA")
	caFile, otherFile := ca.WriteCA(t, dir, "ca"), other.WriteCA(t, dir, "other")
	clientCert, clientKey := clients.Issue(t, "floodgate", testcert.Client).Write(t, dir, "client")
	serve := func(name, certName string, clientCA *testcert.CA) *memcachedtest.Server {
		files := memcachedtest.TLSFiles{}
		files.CertFile, files.KeyFile = ca.Issue(t, "memcached", testcert.Server, certName).Write(t, dir, name)
		if clientCA != nil {
			files.ClientCAFile = clientCA.WriteCA(t, dir, name+"-clients")
		}
		return memcachedtest.StartTLS(t, files)
	}
	oneWay := serve("one-way", "127.0.0.1", nil)
	mutual := serve("mutual", "127.0.0.1", clients)
	misnamed := serve("misnamed", "cache.example", nil)

	tests := []struct {
		name  string
		addr  string
		files tlsclient.Files
		ok    bool
		want  string // in the error when not ok
	}{
		{"the private CA", oneWay.TLSAddr, tlsclient.Files{CAFile: caFile}, true, ""},
		{"the system roots alone", oneWay.TLSAddr, tlsclient.Files{}, false, "certificate signed by unknown authority"},
		{"a wrong CA", oneWay.TLSAddr, tlsclient.Files{CAFile: otherFile}, false, "certificate signed by unknown authority"},
		{"mutual TLS", mutual.TLSAddr, tlsclient.Files{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey}, true, ""},
		// memcached drops the connection once the handshake is over.
		{"mutual TLS without a client certificate", mutual.TLSAddr, tlsclient.Files{CAFile: caFile}, false, ""},
		{"a certificate for another name", misnamed.TLSAddr, tlsclient.Files{CAFile: caFile}, false, "cannot validate certificate for 127.0.0.1"},
		{"another name, hostname verification skipped", misnamed.TLSAddr, tlsclient.Files{CAFile: caFile, SkipHostnameVerification: true}, true, ""},
		{"skipping the hostname still verifies the CA", misnamed.TLSAddr, tlsclient.Files{CAFile: otherFile, SkipHostnameVerification: true}, false, "certificate signed by unknown authority"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.files.Config("memcached")
			if err != nil {
				t.Fatal(err)
			}
			l := newLimiter(t, []string{tc.addr}, memcachelimit.Options{TLS: cfg})
			ds := make([]limit.Decision, 1)
			_, err = l.Evaluate(context.Background(), []limit.Hit{{Key: "k", Spec: fixed(5, time.Minute), Cost: 1}}, ds)
			switch {
			case tc.ok && (err != nil || !ds[0].Allowed):
				t.Errorf("Evaluate: %v, %+v", err, ds[0])
			case !tc.ok && (!errors.Is(err, memcachelimit.ErrStore) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Evaluate: %v, want a store error containing %q", err, tc.want)
			}
		})
	}
	t.Run("a plain connection to the TLS port", func(t *testing.T) {
		l := newLimiter(t, []string{oneWay.TLSAddr}, memcachelimit.Options{Timeout: 300 * time.Millisecond})
		if err := l.Probe(context.Background()); !errors.Is(err, memcachelimit.ErrStore) {
			t.Errorf("Probe: %v, want a store error", err)
		}
	})
}
