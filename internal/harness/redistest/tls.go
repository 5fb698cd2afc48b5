package redistest

import (
	"bytes"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/floodgate/floodgate/internal/testcert"
)

// TLS is how servers started with StartTLS, StartClusterTLS or
// StartSentinelTLS serve TLS, beside their plain port (which the test's own
// commands keep using). Replication, the cluster bus and Sentinel's links
// use TLS too, so a group is reachable over TLS alone, as in production.
// One TLS may serve several servers of one test; its files are written
// once, in the test's temporary directory.
type TLS struct {
	// CA signs every server's certificate; required.
	CA *testcert.CA
	// Names are the subject alternative names of the servers' certificates
	// (IP addresses or DNS names); nil means 127.0.0.1, where the servers
	// listen. A name other than that makes a certificate that fails
	// hostname verification.
	Names []string
	// ClientCA, when not nil, makes the servers require a client
	// certificate (tls-auth-clients yes) signed by it; otherwise clients
	// need none (tls-auth-clients no).
	ClientCA *testcert.CA

	once  sync.Once
	files struct{ cert, key, ca string }
}

// args returns the directives serving TLS on port.
func (c *TLS) args(t testing.TB, port int) []string {
	t.Helper()
	c.write(t)
	auth := "no"
	if c.ClientCA != nil {
		auth = "yes"
	}
	return []string{
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", c.files.cert,
		"--tls-key-file", c.files.key,
		"--tls-ca-cert-file", c.files.ca,
		"--tls-auth-clients", auth,
		"--tls-replication", "yes",
		"--tls-cluster", "yes",
	}
}

// sentinelLines returns the same as sentinel.conf lines.
func (c *TLS) sentinelLines(t testing.TB, port int) []string {
	t.Helper()
	args := c.args(t, port)
	var lines []string
	for i := 0; i+1 < len(args); i += 2 {
		lines = append(lines, args[i][2:]+" "+args[i+1])
	}
	return lines
}

// write writes the servers' certificate, key and CA file. The servers
// present their certificate to each other too (replication, the cluster
// bus), so it is issued for both uses, and the CA file holds both CAs:
// CA to verify peers, ClientCA to verify clients.
func (c *TLS) write(t testing.TB) {
	t.Helper()
	c.once.Do(func() {
		if c.CA == nil {
			t.Fatalf("redistest: TLS without a CA")
		}
		names := c.Names
		if names == nil {
			names = []string{"127.0.0.1"}
		}
		dir := t.TempDir()
		pair := c.CA.Issue(t, "redis", testcert.ServerAndClient, names...)
		c.files.cert, c.files.key = pair.Write(t, dir, "redis")
		cas := [][]byte{c.CA.PEM}
		if c.ClientCA != nil {
			cas = append(cas, c.ClientCA.PEM)
		}
		c.files.ca = filepath.Join(dir, "ca.crt")
		testcert.WriteFile(t, c.files.ca, bytes.Join(cas, nil))
	})
}
