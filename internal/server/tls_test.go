package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/testlog"
)

// peerCN dials addr with cfg, checks health, and returns the server
// certificate's common name, or the error.
func peerCN(addr string, cfg *tls.Config) (string, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return "", err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		return "", err
	}
	// A fresh handshake tells which certificate is served now.
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName, nil
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "floodgate test CA")
	var files TLSFiles
	files.CertFile, files.KeyFile = ca.Issue(t, "first", testcert.Server, "127.0.0.1").Write(t, dir, "tls")
	logs := &testlog.Buffer{}
	addr, client := serveTLS(t, files, slog.New(slog.NewTextHandler(logs, nil)), ca)
	if _, err := peerCN(addr, &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"h2"}}); err == nil {
		t.Error("a client that does not trust the CA connected")
	}

	// Rotation: new files are served within the check interval.
	ca.Issue(t, "second", testcert.Server, "127.0.0.1").Write(t, dir, "tls")
	waitServed(t, addr, client, "second", 5*time.Second)

	// A broken pair keeps the last good one: once a handshake has found
	// the files changed and failed to load them (at most one look per
	// certCheckInterval), the second certificate is served still.
	testcert.WriteFile(t, files.KeyFile, []byte("not a key"))
	deadline := time.Now().Add(certCheckInterval + 5*time.Second)
	for !strings.Contains(logs.String(), "TLS certificate changed but cannot be loaded; serving the previous one") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed reload logged after a broken key:\n%s", logs)
		}
		if cn, err := peerCN(addr, client); err != nil || cn != "second" {
			t.Fatalf("after a broken key: %q, %v; want the second certificate still", cn, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if cn, err := peerCN(addr, client); err != nil || cn != "second" {
		t.Errorf("after a broken key was refused: %q, %v; want the second certificate still", cn, err)
	}
}

// TestTLSRotationKeepingStamps: a rotated pair whose files carry the size
// and modification time of those they replace (copied with their times
// kept, or from an image built reproducibly) is served too.
func TestTLSRotationKeepingStamps(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "floodgate test CA")
	first := ca.Issue(t, "first", testcert.Server, "127.0.0.1")
	// ECDSA signatures vary in length: issue until the new files have
	// the old ones' sizes.
	var second testcert.Pair
	for i := 0; len(second.CertPEM) != len(first.CertPEM) || len(second.KeyPEM) != len(first.KeyPEM); i++ {
		if i == 100 {
			t.Fatal("no certificate of the first one's size in 100")
		}
		second = ca.Issue(t, "other", testcert.Server, "127.0.0.1")
	}
	stamp := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	write := func(p testcert.Pair) TLSFiles {
		var files TLSFiles
		files.CertFile, files.KeyFile = p.Write(t, dir, "tls")
		for _, f := range []string{files.CertFile, files.KeyFile} {
			if err := os.Chtimes(f, stamp, stamp); err != nil {
				t.Fatal(err)
			}
		}
		return files
	}
	addr, client := serveTLS(t, write(first), nil, ca)
	write(second)
	waitServed(t, addr, client, "other", certCheckInterval+5*time.Second)
}

// serveTLS runs a server on files, whose certificate is named "first",
// and returns its address and a client trusting ca, having checked that
// the server serves that certificate.
func serveTLS(t *testing.T, files TLSFiles, logger *slog.Logger, ca *testcert.CA) (addr string, client *tls.Config) {
	t.Helper()
	cfg, err := NewTLSConfig(files, logger)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := running(t, Options{TLS: cfg})
	addr = s.Addrs().GRPC.String()
	client = &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	if cn, err := peerCN(addr, client); err != nil || cn != "first" {
		t.Fatalf("TLS: %q, %v; want the first certificate", cn, err)
	}
	return addr, client
}

// waitServed fails the test unless a handshake with addr gets the
// certificate named cn within the given time.
func waitServed(t *testing.T, addr string, client *tls.Config, cn string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, err := peerCN(addr, client)
		if err == nil && got == cn {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after a rotation: %q, %v; want the certificate %q within %v", got, err, cn, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMutualTLS: with a client CA, a client needs a certificate it signed;
// with a required name too (GRPC_CLIENT_TLS_SAN), one valid for that name.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "server CA")
	clientCA := testcert.NewCA(t, "client CA")
	otherCA := testcert.NewCA(t, "someone else")
	var files TLSFiles
	files.CertFile, files.KeyFile = ca.Issue(t, "server", testcert.Server, "127.0.0.1").Write(t, dir, "tls")
	files.ClientCAFile = clientCA.WriteCA(t, dir, "clients")
	pair := func(ca *testcert.CA, names ...string) []tls.Certificate {
		return []tls.Certificate{ca.Issue(t, "envoy", testcert.Client, names...).TLS(t)}
	}
	tests := []struct {
		name  string
		san   string
		certs []tls.Certificate
		ok    bool
	}{
		{"a client certificate from the client CA", "", pair(clientCA), true},
		{"no client certificate", "", nil, false},
		{"a certificate from another CA", "", pair(otherCA), false},
		{"the required name", "envoy.ingress.svc", pair(clientCA, "envoy.ingress.svc"), true},
		{"the required name among others", "envoy.ingress.svc", pair(clientCA, "a.example", "envoy.ingress.svc"), true},
		{"a wildcard covering the required name", "envoy.ingress.svc", pair(clientCA, "*.ingress.svc"), true},
		{"a certificate without the required name", "envoy.ingress.svc", pair(clientCA, "other.ingress.svc"), false},
		{"a certificate without any name", "envoy.ingress.svc", pair(clientCA), false},
		{"the name only as the common name", "envoy", pair(clientCA), false},
		{"a required IP address", "10.1.2.3", pair(clientCA, "10.1.2.3"), true},
		{"another IP address", "10.1.2.3", pair(clientCA, "10.1.2.4"), false},
		{"the required name from another CA", "envoy.ingress.svc", pair(otherCA, "envoy.ingress.svc"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := files
			f.ClientSAN = tc.san
			cfg, err := NewTLSConfig(f, nil)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := running(t, Options{TLS: cfg})
			_, err = peerCN(s.Addrs().GRPC.String(), &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", Certificates: tc.certs, NextProtos: []string{"h2"}})
			if (err == nil) != tc.ok {
				t.Errorf("err = %v, want success %v", err, tc.ok)
			}
		})
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	testcert.WriteFile(t, junk, []byte("junk"))
	ca := testcert.NewCA(t, "CA")
	cert, key := ca.Issue(t, "server", testcert.Server).Write(t, dir, "tls")
	caFile := ca.WriteCA(t, dir, "ca")
	tests := []struct {
		name  string
		files TLSFiles
	}{
		{"no key", TLSFiles{CertFile: junk}},
		{"missing files", TLSFiles{CertFile: filepath.Join(dir, "none.crt"), KeyFile: filepath.Join(dir, "none.key")}},
		{"not PEM", TLSFiles{CertFile: junk, KeyFile: junk}},
		{"a client CA that is not PEM", TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: junk}},
		{"a required client name without a client CA", TLSFiles{CertFile: cert, KeyFile: key, ClientSAN: "envoy"}},
		{"a required client name that is a URI", TLSFiles{CertFile: cert, KeyFile: key, ClientCAFile: caFile, ClientSAN: "spiffe://cluster.local/ns/x/sa/envoy"}},
	}
	for _, tc := range tests {
		if _, err := NewTLSConfig(tc.files, nil); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
