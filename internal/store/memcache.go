package store

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/internal/memcachelimit"
)

// memcacheOptions are the options of the Memcached limiter o opens, with
// the TLS configuration tc (nil without TLS).
func (o Options) memcacheOptions(tc *tls.Config) memcachelimit.Options {
	m := o.Memcache
	return memcachelimit.Options{Servers: m.serverList(), SRV: m.SRV, SRVRefresh: m.SRVRefresh, MaxIdleConns: m.MaxIdleConns,
		TLS: tc, KeyPrefix: o.KeyPrefix, Timeout: o.Deadline}
}

// memcacheFields are the fields of Options that memcachelimit.Options'
// come from, for asOwn.
var memcacheFields = map[string]string{"memcachelimit.Options.Servers": "Memcache.Servers",
	"memcachelimit.Options.SRV": "Memcache.SRV", "memcachelimit.Options.SRVRefresh": "Memcache.SRVRefresh",
	"memcachelimit.Options.MaxIdleConns": "Memcache.MaxIdleConns", "memcachelimit.Options.KeyPrefix": "KeyPrefix",
	"memcachelimit.Options.Timeout": "Deadline"}

// openMemcache makes s the Memcached store, probed once and then watched
// as Redis is.
func (s *Store) openMemcache(ctx context.Context, opts Options) error {
	m := opts.Memcache
	var tc *tls.Config
	if m.TLS {
		var err error
		if tc, err = m.TLSFiles.Config("memcached"); err != nil {
			return fmt.Errorf("memcache: %w", err)
		}
	}
	lim, err := memcachelimit.New(ctx, opts.memcacheOptions(tc))
	if err != nil {
		return asOwn("memcache", err, memcacheFields)
	}
	opts.Logger.Info("counters are kept in Memcached (fixed windows only)", "servers", lim.Servers(), "srv", m.SRV, "tls", m.TLS,
		"deadline", opts.Deadline)
	w := &watch{store: lim, name: "Memcached", attrs: []any{"servers", lim.Servers()}, logger: opts.Logger, clock: s.clock}
	if err := w.probe(ctx, startProbeTimeout); err != nil {
		opts.Logger.Error("Memcached cannot be used: until it can, requests are answered by the failure policy and the store is reported unhealthy", "err", err)
	}
	s.name, s.limiter, s.memcache, s.watches = "memcache", lim, lim, []*watch{w}
	return nil
}

// memcacheHealth is Memcached's health: the servers and, if it ever
// failed, the latest failure.
func (s *Store) memcacheHealth() health.Store {
	h := health.Store{Name: s.name, Healthy: s.memcache.Healthy(), Reached: s.watches[0].Reached(),
		Detail: "servers " + strings.Join(s.memcache.Servers(), ",")}
	if at, err := s.memcache.LastFailure(); err != nil {
		h.Detail += fmt.Sprintf("; last failure %v ago: %v", s.clock.Now().Sub(at).Round(time.Second), err)
	}
	return h
}
