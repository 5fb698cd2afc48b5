package redislimit_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// tlsFixture is a private CA, another CA that trusts nothing of the test,
// and files written from them.
type tlsFixture struct {
	ca, clientCA, other       *testcert.CA
	caFile, otherFile         string
	clientCert, clientKey     string // signed by clientCA
	strangerCert, strangerKey string // signed by other
}

func newTLSFixture(t *testing.T) *tlsFixture {
	t.Helper()
	dir := t.TempDir()
	f := &tlsFixture{
		ca:       testcert.NewCA(t, "redis CA"),
		clientCA: testcert.NewCA(t, "floodgate clients CA"),
		other:    testcert.NewCA(t, "another CA"),
	}
	f.caFile = f.ca.WriteCA(t, dir, "ca")
	f.otherFile = f.other.WriteCA(t, dir, "other")
	f.clientCert, f.clientKey = f.clientCA.Issue(t, "floodgate", testcert.Client).Write(t, dir, "client")
	f.strangerCert, f.strangerKey = f.other.Issue(t, "stranger", testcert.Client).Write(t, dir, "stranger")
	return f
}

// tlsConfig is the tls.Config of files, read as the binary reads the
// reference server's REDIS_TLS_* files.
func tlsConfig(t *testing.T, files tlsclient.Files) *tls.Config {
	t.Helper()
	c, err := files.Config("redis")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNewClientTLS talks to redis-server's own TLS port, with a private CA:
// as the reference server's REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT,
// REDIS_TLS_CLIENT_KEY and REDIS_TLS_SKIP_HOSTNAME_VERIFICATION do.
func TestNewClientTLS(t *testing.T) {
	f := newTLSFixture(t)
	oneWay := redistest.StartTLS(t, &redistest.TLS{CA: f.ca})
	mutual := redistest.StartTLS(t, &redistest.TLS{CA: f.ca, ClientCA: f.clientCA})
	misnamed := redistest.StartTLS(t, &redistest.TLS{CA: f.ca, Names: []string{"redis.internal"}})

	tests := []struct {
		name  string
		addr  string
		files tlsclient.Files
		want  string // in the error; "" for success
		// refusedLate: Redis refuses the client's certificate. In TLS 1.3
		// the client's handshake ends before Redis has checked it, and
		// Redis may close the connection with the PING unread: the client
		// then sees the connection reset instead of the alert that names
		// the certificate.
		refusedLate bool
	}{
		{"the private CA", oneWay.TLSAddr, tlsclient.Files{CAFile: f.caFile}, "", false},
		{"the system roots alone", oneWay.TLSAddr, tlsclient.Files{}, "certificate signed by unknown authority", false},
		{"a wrong CA", oneWay.TLSAddr, tlsclient.Files{CAFile: f.otherFile}, "certificate signed by unknown authority", false},
		{"a client certificate where none is asked", oneWay.TLSAddr, tlsclient.Files{CAFile: f.caFile, CertFile: f.clientCert, KeyFile: f.clientKey}, "", false},
		{"mutual TLS", mutual.TLSAddr, tlsclient.Files{CAFile: f.caFile, CertFile: f.clientCert, KeyFile: f.clientKey}, "", false},
		{"mutual TLS without a client certificate", mutual.TLSAddr, tlsclient.Files{CAFile: f.caFile}, "certificate", true},
		{"mutual TLS with a certificate Redis does not trust", mutual.TLSAddr, tlsclient.Files{CAFile: f.caFile, CertFile: f.strangerCert, KeyFile: f.strangerKey}, "certificate", true},
		{"a certificate for another name", misnamed.TLSAddr, tlsclient.Files{CAFile: f.caFile}, "validate certificate for 127.0.0.1", false},
		{"another name, hostname verification skipped", misnamed.TLSAddr, tlsclient.Files{CAFile: f.caFile, SkipHostnameVerification: true}, "", false},
		{"skipping the hostname still verifies the CA", misnamed.TLSAddr, tlsclient.Files{CAFile: f.otherFile, SkipHostnameVerification: true}, "certificate signed by unknown authority", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ping(t, redislimit.ClientConfig{URL: tc.addr, TLS: tlsConfig(t, tc.files), DialTimeout: 2 * time.Second})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("PING: %v", err)
			case tc.refusedLate && err != nil && errors.Is(err, syscall.ECONNRESET):
				t.Logf("PING: %v (the refusal came as a reset)", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("PING: %v, want an error containing %q", err, tc.want)
			}
		})
	}

	if err := ping(t, redislimit.ClientConfig{URL: "rediss://" + oneWay.TLSAddr, TLS: tlsConfig(t, tlsclient.Files{CAFile: f.caFile})}); err != nil {
		t.Errorf("rediss:// with the private CA: %v", err)
	}
	if err := ping(t, redislimit.ClientConfig{URL: oneWay.TLSAddr, ReadTimeout: 100 * time.Millisecond}); err == nil {
		t.Error("a plain connection to the TLS port answered")
	}
}

// TestTLSTopologies decides limits over TLS alone, with mutual TLS, on a
// Sentinel group (the Sentinels over TLS too) and on a Cluster (whose nodes
// announce IP addresses, so hostname verification is skipped there, as a
// Cluster's users do), and shows a wrong CA failing the probe.
func TestTLSTopologies(t *testing.T) {
	f := newTLSFixture(t)
	good := tlsclient.Files{CAFile: f.caFile, CertFile: f.clientCert, KeyFile: f.clientKey}
	wrong := good
	wrong.CAFile = f.otherFile
	topologies := []struct {
		name  string
		start func(t *testing.T, tls *redistest.TLS) redislimit.ClientConfig
	}{
		{"sentinel", func(t *testing.T, tls *redistest.TLS) redislimit.ClientConfig {
			g := redistest.StartSentinelTLS(t, 1, 1, time.Second, tls)
			return redislimit.ClientConfig{Type: "sentinel", URL: g.TLSURL()}
		}},
		{"cluster", func(t *testing.T, tls *redistest.TLS) redislimit.ClientConfig {
			c := redistest.StartClusterTLS(t, 3, 0, tls)
			return redislimit.ClientConfig{Type: "cluster", URL: strings.Join(c.TLSAddrs, ",")}
		}},
	}
	for _, tp := range topologies {
		t.Run(tp.name, func(t *testing.T) {
			cfg := tp.start(t, &redistest.TLS{CA: f.ca, ClientCA: f.clientCA})
			cfg.DialTimeout = 2 * time.Second
			for _, tc := range []struct {
				name  string
				files tlsclient.Files
				ok    bool
			}{{"the private CA and a client certificate", good, true}, {"a wrong CA", wrong, false}} {
				t.Run(tc.name, func(t *testing.T) {
					l, err := newTLSLimiter(t, cfg, tc.files)
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					err = l.Probe(ctx)
					if !tc.ok {
						if err == nil || !errors.Is(err, redislimit.ErrStore) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
							t.Errorf("Probe: %v, want a store error naming the unknown authority", err)
						}
						if l.Healthy() {
							t.Error("a failed probe left the limiter healthy")
						}
						return
					}
					if err != nil {
						t.Fatalf("Probe: %v", err)
					}
					hits := make([]limit.Hit, 8)
					for i := range hits {
						hits[i] = limit.Hit{Key: string(rune('a' + i)), Spec: limit.Spec{Algorithm: limit.FixedWindow, Limit: 1, Window: time.Hour}, Cost: 1}
					}
					d := make([]limit.Decision, len(hits))
					if _, err := l.Evaluate(ctx, hits, d); err != nil || !d[0].Allowed {
						t.Fatalf("Evaluate: %v %+v", err, d)
					}
					if _, err := l.Evaluate(ctx, hits[:1], d[:1]); err != nil || d[0].Allowed {
						t.Errorf("the second hit on a limit of 1: %v %+v, want a denial", err, d[0])
					}
				})
			}
		})
	}
}

func newTLSLimiter(t *testing.T, cfg redislimit.ClientConfig, files tlsclient.Files) (*redislimit.Limiter, error) {
	t.Helper()
	if cfg.Type == "cluster" {
		// Nodes announce 127.0.0.1, which the certificate names, but a
		// Cluster's users commonly skip the name; both must work.
		files.SkipHostnameVerification = true
	}
	cfg.TLS = tlsConfig(t, files)
	c, err := redislimit.NewClient(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	return redislimit.New(c, redislimit.Options{KeyPrefix: "tls:", Timeout: 5 * time.Second})
}

// TestProbe: a probe that fails opens the breaker at once, records why, and
// a probe that succeeds closes it, with no request involved.
func TestProbe(t *testing.T) {
	srv := redistest.Start(t)
	srv.Stop()
	c, err := redislimit.NewClient(redislimit.ClientConfig{URL: srv.Addr, DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := redislimit.New(c, redislimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if at, err := l.LastFailure(); err != nil || !at.IsZero() || !l.Healthy() {
		t.Fatalf("before any call: failure %v at %v, healthy %v", err, at, l.Healthy())
	}
	ctx := context.Background()
	if err := l.Probe(ctx); !errors.Is(err, redislimit.ErrStore) {
		t.Fatalf("Probe of a stopped Redis: %v", err)
	}
	if l.Healthy() || l.BreakerState() != redislimit.BreakerOpen {
		t.Errorf("after one failed probe the breaker is %v, want open", l.BreakerState())
	}
	at, cause := l.LastFailure()
	if cause == nil || !strings.Contains(cause.Error(), "connection refused") || time.Since(at) > time.Minute {
		t.Errorf("last failure %v at %v, want the refused connection, now", cause, at)
	}
	srv.Restart()
	if err := l.Probe(ctx); err != nil || !l.Healthy() {
		t.Fatalf("Probe after the restart: %v, healthy %v", err, l.Healthy())
	}
	if _, still := l.LastFailure(); still == nil {
		t.Error("the last failure was forgotten; it should stay to say why Redis was last unhealthy")
	}
}

// TestNewClientTLSErrors: what NewClient refuses of a TLS configuration,
// naming it. The certificate files are read before (internal/tlsclient,
// whose test covers their errors).
func TestNewClientTLSErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  redislimit.ClientConfig
		want string
	}{
		{"TLS over a unix socket", redislimit.ClientConfig{URL: "/run/redis.sock", TLS: &tls.Config{}}, "unix socket"},
		{"a sentinel password for a single node", redislimit.ClientConfig{URL: "h:1", SentinelPassword: "pw"}, "redislimit.ClientConfig.SentinelPassword needs redislimit.ClientConfig.Type sentinel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redislimit.NewClient(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatalf("no error, want one containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v, want an error containing %q", err, tc.want)
			}
		})
	}
}
