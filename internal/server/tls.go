package server

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// TLSFiles names the files of the gRPC listener's TLS (the reference
// server's GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY and
// GRPC_CLIENT_TLS_CACERT), and the name client certificates must hold
// (GRPC_CLIENT_TLS_SAN).
type TLSFiles struct {
	// CertFile and KeyFile are the PEM certificate chain and private key
	// the server presents; both are required. They are read again when
	// they change (looked at a handshake, at most once a second); a pair
	// that fails to load is logged, and the previous one stays in use.
	CertFile, KeyFile string
	// ClientCAFile, when set, turns on mutual TLS: clients must present a
	// certificate signed by one of its PEM certificates. It is read once.
	ClientCAFile string
	// ClientSAN, when set with ClientCAFile, also requires the client
	// certificate to be valid for that DNS name or IP address.
	ClientSAN string
}

// certCheckInterval is the most often a certReloader looks at its files.
const certCheckInterval = time.Second

// certReloader serves a certificate pair and reloads it when its files
// change.
type certReloader struct {
	files  TLSFiles
	logger *slog.Logger
	cert   atomic.Pointer[tls.Certificate]

	mu        sync.Mutex // serializes checks
	lastCheck time.Time
	// pair holds the files as last loaded: a rotated pair copied with its
	// times kept can have the old files' size and time.
	pair [2][]byte
}

// NewTLSConfig returns the gRPC listener's TLS configuration for files: TLS
// 1.2 or later, and, with a client CA, client certificates required and
// verified. It fails when the files cannot be read or do not hold a
// matching pair.
func NewTLSConfig(files TLSFiles, logger *slog.Logger) (*tls.Config, error) {
	if files.CertFile == "" || files.KeyFile == "" {
		return nil, errors.New("server: TLS needs both a certificate and a key file")
	}
	if files.ClientSAN != "" && files.ClientCAFile == "" {
		return nil, errors.New("server: a required client certificate name needs a client CA (mutual TLS)")
	}
	if strings.Contains(files.ClientSAN, "/") {
		// A URI (spiffe://...) never matches as a hostname: every client
		// would be refused.
		return nil, fmt.Errorf("server: required client certificate name %q: want a DNS name or an IP address", files.ClientSAN)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &certReloader{files: files, logger: logger}
	if _, err := r.reload(); err != nil {
		return nil, err
	}
	r.lastCheck = time.Now()
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.getCertificate,
		NextProtos:     []string{"h2"},
	}
	if files.ClientCAFile != "" {
		pem, err := os.ReadFile(files.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("server: client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("server: client CA %s: no PEM certificate in it", files.ClientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		if files.ClientSAN != "" {
			cfg.VerifyConnection = requireSAN(files.ClientSAN)
		}
	}
	return cfg, nil
}

// requireSAN returns a tls.Config.VerifyConnection that refuses a client
// certificate not valid for name; unlike VerifyPeerCertificate, it runs
// on resumed sessions too.
func requireSAN(name string) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("server: no client certificate")
		}
		if err := cs.PeerCertificates[0].VerifyHostname(name); err != nil {
			return fmt.Errorf("server: client certificate lacks the required subject alternative name %q: %w", name, err)
		}
		return nil
	}
}

// reload reads the files and serves the pair they hold, unless it is the
// one served already; it reports whether it loaded one.
func (r *certReloader) reload() (bool, error) {
	var pair [2][]byte
	for i, p := range []string{r.files.CertFile, r.files.KeyFile} {
		b, err := os.ReadFile(p)
		if err != nil {
			return false, fmt.Errorf("server: TLS: %w", err)
		}
		pair[i] = b
	}
	if r.cert.Load() != nil && bytes.Equal(pair[0], r.pair[0]) && bytes.Equal(pair[1], r.pair[1]) {
		return false, nil
	}
	cert, err := tls.X509KeyPair(pair[0], pair[1])
	if err != nil {
		return false, fmt.Errorf("server: TLS certificate %s and key %s: %w", r.files.CertFile, r.files.KeyFile, err)
	}
	r.cert.Store(&cert)
	r.pair = pair
	return true, nil
}

func (r *certReloader) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.maybeReload(time.Now())
	return r.cert.Load(), nil
}

// maybeReload reloads the pair when a file changed, at most once per
// certCheckInterval; handshakes meanwhile keep the current pair.
func (r *certReloader) maybeReload(now time.Time) {
	if !r.mu.TryLock() {
		return
	}
	defer r.mu.Unlock()
	if now.Sub(r.lastCheck) < certCheckInterval {
		return
	}
	r.lastCheck = now
	if loaded, err := r.reload(); err != nil {
		r.logger.Error("TLS certificate changed but cannot be loaded; serving the previous one", "err", err)
	} else if loaded {
		r.logger.Info("TLS certificate reloaded", "cert", r.files.CertFile)
	}
}
