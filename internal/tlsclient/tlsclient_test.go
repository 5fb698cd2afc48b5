package tlsclient

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/testcert"
)

// TestConfigErrors: a file that cannot be used is refused when the
// configuration is built, naming the store and the file.
func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "store CA")
	other := testcert.NewCA(t, "another CA")
	cert, _ := ca.Issue(t, "floodgate", testcert.Client).Write(t, dir, "client")
	_, strangerKey := other.Issue(t, "stranger", testcert.Client).Write(t, dir, "stranger")
	junk := filepath.Join(dir, "junk.pem")
	testcert.WriteFile(t, junk, []byte("junk"))
	for _, tc := range []struct {
		name  string
		files Files
		want  string
	}{
		{"a missing CA file", Files{CAFile: "/nonexistent/ca.pem"}, "redis TLS CA file: open /nonexistent/ca.pem"},
		{"a CA file without PEM", Files{CAFile: junk}, "no PEM certificate"},
		{"a certificate without its key", Files{CertFile: cert}, "both or neither"},
		{"a key without its certificate", Files{KeyFile: strangerKey}, "both or neither"},
		{"a key that is not the certificate's", Files{CertFile: cert, KeyFile: strangerKey}, "private key does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.files.Config("redis")
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "redis TLS") {
				t.Errorf("%v, want an error starting with \"redis TLS\" containing %q", err, tc.want)
			}
		})
	}
}

// TestConfig: the zero Files verify against the system's roots with no
// client certificate; a CA file is added to those roots; a certificate
// and key are presented; skipping the hostname still verifies the chain.
// ServerName stays empty for the dialer to fill from each address.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewCA(t, "store CA")
	caFile := ca.WriteCA(t, dir, "ca")
	cert, key := ca.Issue(t, "floodgate", testcert.Client).Write(t, dir, "client")

	c, err := Files{}.Config("memcached")
	if err != nil || c.RootCAs != nil || len(c.Certificates) != 0 || c.InsecureSkipVerify || c.MinVersion != tls.VersionTLS12 || c.ServerName != "" {
		t.Errorf("zero Files: %+v, %v; want the system's roots, TLS 1.2 at least, nothing else", c, err)
	}
	c, err = Files{CAFile: caFile, CertFile: cert, KeyFile: key, SkipHostnameVerification: true}.Config("memcached")
	if err != nil {
		t.Fatal(err)
	}
	if c.RootCAs == nil || len(c.Certificates) != 1 || !c.InsecureSkipVerify || c.VerifyConnection == nil {
		t.Errorf("every file and the skip: %+v; want roots, a certificate, and the chain verified by VerifyConnection", c)
	}
	if err := c.VerifyConnection(tls.ConnectionState{}); err == nil || !strings.Contains(err.Error(), "no certificate") {
		t.Errorf("VerifyConnection of a server without a certificate: %v, want a refusal", err)
	}
}
