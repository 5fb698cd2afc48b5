// Package tlsclient builds the tls.Config every store's client connects
// with, from the files the reference server's <STORE>_TLS_CACERT,
// <STORE>_TLS_CLIENT_CERT, <STORE>_TLS_CLIENT_KEY and
// <STORE>_TLS_SKIP_HOSTNAME_VERIFICATION name.
package tlsclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Files says how a TLS connection to a store is verified and which
// certificate the client presents. The zero value verifies the server's
// certificate and name against the system's roots and presents none.
type Files struct {
	// CAFile holds PEM CA certificates that may sign the server's
	// certificate, beside the system's roots.
	CAFile string
	// CertFile and KeyFile are the PEM certificate chain and key the client
	// presents: both or neither.
	CertFile, KeyFile string
	// SkipHostnameVerification still verifies that the server's
	// certificate chains to a trusted CA, but not that it names the host
	// dialed.
	SkipHostnameVerification bool
}

// Config reads the files and returns the tls.Config they describe; store
// ("redis", "memcached") starts its error messages. ServerName is left
// empty, so that the dialer takes each server's from the address it dials.
func (f Files) Config(store string) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s TLS CA file: %w", store, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s TLS CA file %s: no PEM certificate in it", store, f.CAFile)
		}
		c.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		pair, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s TLS client certificate %s and key %s: %w", store, f.CertFile, f.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{pair}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, fmt.Errorf("%s TLS client certificate and key: give both or neither", store)
	}
	if f.SkipHostnameVerification {
		// crypto/tls verifies the chain and the name together: turn both
		// off and verify the chain here. VerifyConnection, unlike
		// VerifyPeerCertificate, also runs on resumed sessions.
		c.InsecureSkipVerify = true
		c.VerifyConnection = verifyChain(store, c.RootCAs)
	}
	return c, nil
}

// verifyChain returns a VerifyConnection that verifies the server's
// certificate chain against roots (nil: the system's), whatever names it
// holds.
func verifyChain(store string, roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%s TLS: the server presented no certificate", store)
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("%s TLS: %w", store, err)
		}
		return nil
	}
}
