// Package xdstest runs a real xDS management server for tests:
// go-control-plane's ADS server over its snapshot cache, serving
// RateLimitConfig resources as Envoy Gateway does.
package xdstest

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/proto"
)

// Server is a real xDS management server for a test: go-control-plane's
// ADS server over its snapshot cache, on a local port, recording every
// request it receives. Its methods may be called from any goroutine.
type Server struct {
	// Addr is the host:port it listens on.
	Addr string

	t     testing.TB
	cache cachev3.SnapshotCache
	srv   *grpc.Server

	mu   sync.Mutex
	reqs []*discovery.DiscoveryRequest
}

// Start serves on addr ("127.0.0.1:0" for a free port; a port just
// released by an earlier Server is waited for), over TLS with creds when
// not nil. The server stops when the test ends.
func Start(t testing.TB, addr string, creds *tls.Config) *Server {
	t.Helper()
	var l net.Listener
	var err error
	// A port just released may still be held for a moment.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if l, err = net.Listen("tcp", addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("management server: %v", err)
	}
	m := &Server{t: t, Addr: l.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	cb := serverv3.CallbackFuncs{StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
		m.mu.Lock()
		m.reqs = append(m.reqs, proto.Clone(r).(*discovery.DiscoveryRequest))
		m.mu.Unlock()
		return nil
	}}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(creds)))
	}
	m.srv = grpc.NewServer(opts...)
	discovery.RegisterAggregatedDiscoveryServiceServer(m.srv, serverv3.NewServer(context.Background(), m.cache, cb))
	go m.srv.Serve(l)
	t.Cleanup(m.srv.Stop)
	return m
}

// Set makes resources (RateLimitConfig resources) the snapshot of node at
// version.
func (m *Server) Set(node, version string, resources ...types.Resource) {
	m.t.Helper()
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: resources})
	if err != nil {
		m.t.Fatalf("snapshot: %v", err)
	}
	if err := m.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		m.t.Fatalf("snapshot: %v", err)
	}
}

// Requests returns the requests received so far.
func (m *Server) Requests() []*discovery.DiscoveryRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), m.reqs...)
}

// WaitRequest waits up to 10 s until a request satisfying ok has arrived
// and returns it, failing the test with what otherwise.
func (m *Server) WaitRequest(what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	m.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, r := range m.Requests() {
			if ok(r) {
				return r
			}
		}
	}
	m.t.Fatalf("no %s reached the management server; requests: %v", what, m.Requests())
	return nil
}

// Stop stops the server at once, closing its streams, as a management
// server that goes away.
func (m *Server) Stop() { m.srv.Stop() }
