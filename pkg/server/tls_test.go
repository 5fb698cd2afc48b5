package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// testCA signs certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for cn, for a server (valid for
// 127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, cn string, serial int64, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	// Write then rename, as a certificate manager does, so a reader never
	// sees half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

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
	ca := newCA(t, "floodgate test CA")
	files := TLSFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	c, k := ca.issue(t, "first", 2, false)
	write(t, files.CertFile, c)
	write(t, files.KeyFile, k)
	cfg, err := NewTLSConfig(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := running(t, Options{TLS: cfg})
	addr := s.Addrs().GRPC.String()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}

	if cn, err := peerCN(addr, client); err != nil || cn != "first" {
		t.Fatalf("TLS: %q, %v; want the first certificate", cn, err)
	}
	if _, err := peerCN(addr, &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"h2"}}); err == nil {
		t.Error("a client that does not trust the CA connected")
	}

	// Rotation: new files are served within the check interval.
	c, k = ca.issue(t, "second", 3, false)
	write(t, files.CertFile, c)
	write(t, files.KeyFile, k)
	deadline := time.Now().Add(5 * time.Second)
	for {
		cn, err := peerCN(addr, client)
		if err == nil && cn == "second" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after rotation: %q, %v; want the second certificate", cn, err)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A broken pair keeps the last good one.
	write(t, files.KeyFile, []byte("not a key"))
	time.Sleep(certCheckInterval + 100*time.Millisecond)
	if cn, err := peerCN(addr, client); err != nil || cn != "second" {
		t.Errorf("after a broken key: %q, %v; want the second certificate still", cn, err)
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "server CA")
	clientCA := newCA(t, "client CA")
	otherCA := newCA(t, "someone else")
	files := TLSFiles{CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key"), ClientCAFile: filepath.Join(dir, "ca.crt")}
	c, k := ca.issue(t, "server", 2, false)
	write(t, files.CertFile, c)
	write(t, files.KeyFile, k)
	write(t, files.ClientCAFile, clientCA.pem)
	cfg, err := NewTLSConfig(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := running(t, Options{TLS: cfg})
	addr := s.Addrs().GRPC.String()
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	pair := func(ca *testCA) []tls.Certificate {
		c, k := ca.issue(t, "envoy", 5, true)
		cert, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{cert}
	}
	tests := []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"a client certificate from the client CA", pair(clientCA), true},
		{"no client certificate", nil, false},
		{"a certificate from another CA", pair(otherCA), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := peerCN(addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", Certificates: tc.certs, NextProtos: []string{"h2"}})
			if (err == nil) != tc.ok {
				t.Errorf("err = %v, want success %v", err, tc.ok)
			}
		})
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	write(t, junk, []byte("junk"))
	tests := []struct {
		name  string
		files TLSFiles
	}{
		{"no key", TLSFiles{CertFile: junk}},
		{"missing files", TLSFiles{CertFile: filepath.Join(dir, "none.crt"), KeyFile: filepath.Join(dir, "none.key")}},
		{"not PEM", TLSFiles{CertFile: junk, KeyFile: junk}},
	}
	for _, tc := range tests {
		if _, err := NewTLSConfig(tc.files, nil); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
