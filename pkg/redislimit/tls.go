package redislimit

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
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

// config returns the tls.Config for f. Its ServerName is left empty: the
// dialer takes each node's host from the address it dials, which is what a
// Cluster or Sentinel client needs, every node having its own.
func (f TLSFiles) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS CA file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis TLS CA file %s: no PEM certificate in it", f.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("redis TLS client certificate %s and key %s: %w", f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("redis TLS client certificate and key: give both or neither")
	}
	if f.SkipHostnameVerification {
		// crypto/tls verifies the chain and the name together; turning
		// both off and verifying the chain here keeps the half that
		// matters. VerifyConnection, unlike VerifyPeerCertificate, also
		// runs on resumed sessions.
		c.InsecureSkipVerify = true
		c.VerifyConnection = verifyChain(c.RootCAs)
	}
	return c, nil
}

// verifyChain returns a tls.Config.VerifyConnection that verifies the
// server's certificate chain against roots (nil: the system's), whatever
// names it holds.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("redis TLS: the server presented no certificate")
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("redis TLS: %w", err)
		}
		return nil
	}
}
