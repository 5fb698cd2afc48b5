// Package testcert makes private certificate authorities and the
// certificates they sign, for tests of TLS: the gRPC listener's (internal/server)
// and Redis's (pkg/redislimit, internal/redistest). Everything is generated
// in memory with crypto/x509 (ECDSA P-256, valid from an hour ago for a
// day), so tests need no openssl and no files but the ones they write.
package testcert

import (
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
	"sync/atomic"
	"testing"
	"time"
)

// serial numbers certificates, so that no two of a run share one.
var serial atomic.Int64

// CA is a certificate authority owned by a test.
type CA struct {
	// Cert is the CA's certificate; PEM is the same, PEM-encoded.
	Cert *x509.Certificate
	PEM  []byte
	key  *ecdsa.PrivateKey
}

// Usage says what a certificate from Issue is for.
type Usage int

const (
	// Server certificates carry the serverAuth extended key usage.
	Server Usage = iota
	// Client certificates carry the clientAuth extended key usage.
	Client
	// ServerAndClient certificates carry both, as servers that also
	// connect to their peers (Redis replicas, cluster nodes) need.
	ServerAndClient
)

// Pair is a certificate and its private key, PEM-encoded.
type Pair struct {
	CertPEM, KeyPEM []byte
}

// NewCA returns a new self-signed CA named cn. It fails the test on error.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
	return &CA{Cert: cert, PEM: encode("CERTIFICATE", der), key: key}
}

// Issue returns a certificate signed by ca with common name cn, for usage,
// valid for the subject alternative names in names: each an IP address
// (an IP SAN) or a DNS name. With no names the certificate matches no host,
// as a certificate made for another name would.
func (ca *CA) Issue(t testing.TB, cn string, usage Usage, names ...string) Pair {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	switch usage {
	case Client:
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	case ServerAndClient:
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
	return Pair{CertPEM: encode("CERTIFICATE", der), KeyPEM: encode("EC PRIVATE KEY", kder)}
}

// TLS returns p as a tls.Certificate, for a Go client or server.
func (p Pair) TLS(t testing.TB) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
	return c
}

// Write writes the pair to dir as name.crt and name.key and returns their
// paths.
func (p Pair) Write(t testing.TB, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	WriteFile(t, certFile, p.CertPEM)
	WriteFile(t, keyFile, p.KeyPEM)
	return certFile, keyFile
}

// WriteCA writes the CA's certificate to dir as name.crt and returns its
// path.
func (ca *CA) WriteCA(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name+".crt")
	WriteFile(t, path, ca.PEM)
	return path
}

// Pool returns a certificate pool holding the CA alone.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// WriteFile writes b to path by writing a temporary file and renaming it,
// as a certificate manager does, so that a reader never sees half a file.
func WriteFile(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatalf("testcert: %v", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatalf("testcert: %v", err)
	}
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testcert: %v", err)
	}
	return key
}

func encode(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
