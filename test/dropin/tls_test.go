package dropin

import (
	"crypto/tls"
	"slices"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/floodgate/floodgate/internal/testcert"
)

// clientSAN is the name GRPC_CLIENT_TLS_SAN asks of a client's
// certificate.
const clientSAN = "envoy.example"

// tlsCerts are one CA's certificates for a scenario with tls: the
// servers' (for 127.0.0.1), the client's the servers accept (clientSAN),
// and the others a step may present instead (tlsClients).
type tlsCerts struct {
	ca      *testcert.CA
	dir     string // the servers' files
	clients map[string]testcert.Pair
}

// tlsClients are the clients a step may call as (step.as): with a
// certificate of the same CA for another name, or with none.
var tlsClients = []string{"", "other-name", "no-certificate"}

// withTLS makes the certificates of a scenario with tls and returns the
// scenario with the reference's variables of mutual TLS on the gRPC port.
func withTLS(t *testing.T, sc scenario) scenario {
	t.Helper()
	if !sc.tls {
		return sc
	}
	ca := testcert.NewCA(t, "dropin CA")
	c := &tlsCerts{ca: ca, dir: t.TempDir(), clients: map[string]testcert.Pair{
		"":           ca.Issue(t, "envoy", testcert.Client, clientSAN),
		"other-name": ca.Issue(t, "intruder", testcert.Client, "intruder.example"),
	}}
	cert, key := ca.Issue(t, "ratelimit", testcert.Server, "127.0.0.1").Write(t, c.dir, "server")
	sc.env = append(slices.Clip(sc.env),
		"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT="+cert, "GRPC_SERVER_TLS_KEY="+key,
		"GRPC_CLIENT_TLS_CACERT="+ca.WriteCA(t, c.dir, "ca"), "GRPC_CLIENT_TLS_SAN="+clientSAN)
	sc.certs = c
	return sc
}

// dial returns a connection to addr for each of tlsClients.
func (c *tlsCerts) dial(t *testing.T, addr string) map[string]*grpc.ClientConn {
	t.Helper()
	conns := map[string]*grpc.ClientConn{}
	for _, name := range tlsClients {
		cfg := &tls.Config{RootCAs: c.ca.Pool(), MinVersion: tls.VersionTLS12}
		if pair, ok := c.clients[name]; ok {
			cfg.Certificates = []tls.Certificate{pair.TLS(t)}
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		conns[name] = conn
	}
	return conns
}
