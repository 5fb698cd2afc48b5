package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of ConnOptions' fields.
const (
	// DefaultGRPCConnectionTimeout leaves time for TCP, TLS and HTTP/2's
	// preface over a slow link.
	DefaultGRPCConnectionTimeout = 10 * time.Second
	// DefaultGRPCKeepaliveTime and DefaultGRPCKeepaliveTimeout find a dead
	// client within a minute and a half.
	DefaultGRPCKeepaliveTime    = time.Minute
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
	// DefaultGRPCMinPingInterval lets through any keepalive a client sets
	// on purpose (gRPC's default of 5 minutes would close an Envoy pinging
	// every 30 s) and still ends a ping flood.
	DefaultGRPCMinPingInterval = time.Second
	DefaultHTTPReadTimeout     = 10 * time.Second
	// DefaultHTTPWriteTimeout is well above a decision and a scrape.
	DefaultHTTPWriteTimeout = 30 * time.Second
	DefaultHTTPIdleTimeout  = time.Minute
	// MinAutoConns is the least bound a file limit makes.
	MinAutoConns = 16
)

// ConnOptions bound the clients of the listeners: how many connections
// may be open, and how long a slow or silent one is kept. Zero fields
// take their defaults; negative durations are refused.
type ConnOptions struct {
	// GRPCMaxConns bounds the open connections of the gRPC listener,
	// HTTPMaxConns those of each HTTP listener. A connection over the bound
	// is closed once accepted, counted and logged. 0 takes a share of the
	// open-file limit: half for gRPC, an eighth for each HTTP listener (at
	// least MinAutoConns), no bound when it is unknown. Negative: no bound.
	GRPCMaxConns, HTTPMaxConns int
	// GRPCConnectionTimeout bounds a new gRPC connection's handshake (TLS,
	// the HTTP/2 preface and settings).
	GRPCConnectionTimeout time.Duration
	// GRPCKeepaliveTime is how long a gRPC connection may stay silent
	// before the server pings its client; GRPCKeepaliveTimeout how long
	// the server then waits for the answer before closing it.
	GRPCKeepaliveTime, GRPCKeepaliveTimeout time.Duration
	// GRPCMaxConnectionIdle, when positive, closes with GOAWAY a gRPC
	// connection without a call for that long. 0, the default, never does:
	// Envoy would pay a new handshake on its next request.
	GRPCMaxConnectionIdle time.Duration
	// GRPCMinPingInterval is the shortest interval between a client's
	// pings; one pinging more often is closed (GOAWAY "too_many_pings").
	GRPCMinPingInterval time.Duration
	// HTTPReadTimeout bounds reading an HTTP request; HTTPWriteTimeout the
	// time from the end of its headers to the end of the answer (not on
	// the debug listener, whose profiles take 30 s); HTTPIdleTimeout how
	// long a kept-alive connection waits for its next request.
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
}

// normalize fills the defaults in, taking the connection bounds left 0
// from fileLimit.
func (o ConnOptions) normalize(fileLimit int) (ConnOptions, error) {
	for _, d := range []struct {
		p    *time.Duration
		def  time.Duration
		name string
	}{
		{&o.GRPCConnectionTimeout, DefaultGRPCConnectionTimeout, "GRPCConnectionTimeout"},
		{&o.GRPCKeepaliveTime, DefaultGRPCKeepaliveTime, "GRPCKeepaliveTime"},
		{&o.GRPCKeepaliveTimeout, DefaultGRPCKeepaliveTimeout, "GRPCKeepaliveTimeout"},
		{&o.GRPCMaxConnectionIdle, 0, "GRPCMaxConnectionIdle"},
		{&o.GRPCMinPingInterval, DefaultGRPCMinPingInterval, "GRPCMinPingInterval"},
		{&o.HTTPReadTimeout, DefaultHTTPReadTimeout, "HTTPReadTimeout"},
		{&o.HTTPWriteTimeout, DefaultHTTPWriteTimeout, "HTTPWriteTimeout"},
		{&o.HTTPIdleTimeout, DefaultHTTPIdleTimeout, "HTTPIdleTimeout"},
	} {
		if *d.p < 0 {
			return o, refused("Conns."+d.name, *d.p, "must not be negative")
		}
		if *d.p == 0 {
			*d.p = d.def
		}
	}
	o.GRPCMaxConns = autoConns(o.GRPCMaxConns, fileLimit/2)
	o.HTTPMaxConns = autoConns(o.HTTPMaxConns, fileLimit/8)
	return o, nil
}

// autoConns is a connection bound as ConnOptions says, share being the
// listener's share of the file limit; 0 means no bound.
func autoConns(n, share int) int {
	switch {
	case n > 0:
		return n
	case n < 0 || share <= 0:
		return 0
	}
	return max(share, MinAutoConns)
}

func (o ConnOptions) grpcConnOptions(maxAge, maxAgeGrace time.Duration) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(o.GRPCConnectionTimeout),
		// gRPC reads a zero age or grace as no bound.
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     o.GRPCMaxConnectionIdle,
			MaxConnectionAge:      maxAge,
			MaxConnectionAgeGrace: maxAgeGrace,
			Time:                  o.GRPCKeepaliveTime,
			Timeout:               o.GRPCKeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: o.GRPCMinPingInterval,
			// Envoy pings whether calls are in flight or not.
			PermitWithoutStream: true,
		}),
	}
}
