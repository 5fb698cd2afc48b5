package server

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of ConnOptions' fields.
const (
	// DefaultGRPCConnectionTimeout leaves a client time for TCP, TLS and
	// HTTP/2's preface over a slow link; Envoy needs milliseconds.
	DefaultGRPCConnectionTimeout = 10 * time.Second
	// DefaultGRPCKeepaliveTime and DefaultGRPCKeepaliveTimeout find a
	// dead or silent client within a minute and a half. Envoy answers the
	// pings; they cost it nothing.
	DefaultGRPCKeepaliveTime    = time.Minute
	DefaultGRPCKeepaliveTimeout = 20 * time.Second
	// DefaultGRPCMinPingInterval lets through any keepalive a client
	// would set on purpose (Envoy's connection_keepalive interval is the
	// operator's choice and has no lower bound; gRPC's own default of 5
	// minutes would close the connection of an Envoy pinging every 30
	// seconds) while still ending a ping flood.
	DefaultGRPCMinPingInterval = time.Second
	// DefaultHTTPReadTimeout bounds the reading of a request: /json
	// bodies are a few hundred bytes.
	DefaultHTTPReadTimeout = 10 * time.Second
	// DefaultHTTPWriteTimeout bounds the answer: a decision takes at most
	// the store deadline, a /metrics scrape well under a second.
	DefaultHTTPWriteTimeout = 30 * time.Second
	// DefaultHTTPIdleTimeout is as long as a kept-alive HTTP connection
	// waits for its next request.
	DefaultHTTPIdleTimeout = time.Minute
	// MinAutoConns is the least bound a file limit makes.
	MinAutoConns = 16
)

// ConnOptions bound the clients of the listeners: how many connections
// may be open, and how long a slow or silent one is kept. Zero fields
// take their defaults; negative durations are refused.
type ConnOptions struct {
	// GRPCMaxConns bounds the open connections of the gRPC listener,
	// HTTPMaxConns those of the HTTP listener and, separately, of the
	// debug listener, so that a flood on one port never takes the
	// descriptors that /healthcheck needs. A connection over the bound is
	// closed as soon as it is accepted, counted and logged (once per 10
	// s). 0 takes a share of the process's open-file limit: half for
	// gRPC, an eighth for each HTTP listener (at least MinAutoConns),
	// leaving the rest to the store's connections and the rule files;
	// no bound when the limit is unknown. Negative means no bound.
	GRPCMaxConns, HTTPMaxConns int
	// GRPCConnectionTimeout bounds a new gRPC connection's handshake
	// (TLS, the HTTP/2 preface and first settings): a client silent for
	// longer is closed. Default DefaultGRPCConnectionTimeout.
	GRPCConnectionTimeout time.Duration
	// GRPCKeepaliveTime is how long a gRPC connection may stay without
	// traffic before the server pings its client; GRPCKeepaliveTimeout
	// how long the server then waits for the answer before closing it.
	// Defaults DefaultGRPCKeepaliveTime and DefaultGRPCKeepaliveTimeout.
	GRPCKeepaliveTime, GRPCKeepaliveTimeout time.Duration
	// GRPCMaxConnectionIdle, when positive, closes gracefully (GOAWAY) a
	// gRPC connection that carried no call for that long. 0 (the default)
	// never does: a client that answers pings is alive, Envoy keeps its
	// connections for an hour of idleness by default and would pay a new
	// handshake on its next request, and the connection bound already
	// caps what idle clients hold.
	GRPCMaxConnectionIdle time.Duration
	// GRPCMinPingInterval is the shortest interval between a client's
	// pings that the server accepts, calls in flight or not; a client
	// that pings more often (three times in a row) is closed with GOAWAY
	// "too_many_pings". Default DefaultGRPCMinPingInterval.
	GRPCMinPingInterval time.Duration
	// HTTPReadTimeout bounds the reading of an HTTP request, headers and
	// body; HTTPWriteTimeout the time from the end of its headers to the
	// end of the answer (on the HTTP listener only: the debug listener's
	// profiles take 30 s); HTTPIdleTimeout how long a kept-alive
	// connection waits for its next request. Defaults
	// DefaultHTTPReadTimeout, DefaultHTTPWriteTimeout and
	// DefaultHTTPIdleTimeout.
	HTTPReadTimeout, HTTPWriteTimeout, HTTPIdleTimeout time.Duration
}

// normalize fills the defaults in, with the connection bounds the file
// limit gives when they are 0.
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

// autoConns is a connection bound as ConnOptions says: n when positive,
// no bound (0) when negative, share of the file limit (at least
// MinAutoConns) when 0, or no bound when the limit is unknown.
func autoConns(n, share int) int {
	switch {
	case n > 0:
		return n
	case n < 0 || share <= 0:
		return 0
	}
	return max(share, MinAutoConns)
}

// grpcConnOptions are the gRPC server options of o and of the maximum
// connection age.
func (o ConnOptions) grpcConnOptions(maxAge, maxAgeGrace time.Duration) []grpc.ServerOption {
	params := keepalive.ServerParameters{
		MaxConnectionIdle: o.GRPCMaxConnectionIdle,
		Time:              o.GRPCKeepaliveTime,
		Timeout:           o.GRPCKeepaliveTimeout,
	}
	if maxAge > 0 {
		params.MaxConnectionAge, params.MaxConnectionAgeGrace = maxAge, maxAgeGrace
	}
	return []grpc.ServerOption{
		grpc.ConnectionTimeout(o.GRPCConnectionTimeout),
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: o.GRPCMinPingInterval,
			// Envoy pings whether calls are in flight or not.
			PermitWithoutStream: true,
		}),
	}
}
