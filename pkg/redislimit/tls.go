package redislimit

import (
	"crypto/tls"

	"github.com/floodgate/floodgate/internal/tlsclient"
)

// TLSFiles says how a TLS connection to Redis is verified and which
// certificate the client presents, as the reference server's
// REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY and
// REDIS_TLS_SKIP_HOSTNAME_VERIFICATION do. The zero value verifies the
// server's certificate and name against the system's roots and presents
// none. The files are read once, by NewClient.
type TLSFiles struct {
	// CAFile holds PEM CA certificates that may sign Redis's certificate,
	// in addition to the system's roots (as in the reference server), for
	// a Redis with a private CA.
	CAFile string
	// CertFile and KeyFile are the PEM certificate chain and key the client
	// presents, for a Redis that requires client certificates
	// (tls-auth-clients yes). Both or neither.
	CertFile, KeyFile string
	// SkipHostnameVerification still verifies that the server's
	// certificate chains to a trusted CA, but not that it names the host
	// dialed: for nodes reached by addresses their certificates do not
	// list (Cluster and Sentinel announce IP addresses).
	SkipHostnameVerification bool
}

// config returns the tls.Config for f (see tlsclient.Files.Config): every
// node's host comes from the address dialed, which a Cluster or Sentinel
// client needs, every node having its own.
func (f TLSFiles) config() (*tls.Config, error) { return tlsclient.Files(f).Config("redis") }
