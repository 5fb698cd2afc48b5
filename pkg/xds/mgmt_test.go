package xds

import (
	"context"
	"crypto/tls"
	"net"
	"strconv"
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

// mgmt is a real xDS management server for a test: go-control-plane's
// ADS server over its snapshot cache, on a local port, recording every
// request it receives.
type mgmt struct {
	t     testing.TB
	addr  string
	cache cachev3.SnapshotCache
	srv   *grpc.Server

	mu   sync.Mutex
	reqs []*discovery.DiscoveryRequest
}

// startMgmt serves on addr ("127.0.0.1:0" for a free port), with creds
// when not nil. The server stops when the test ends.
func startMgmt(t testing.TB, addr string, creds *tls.Config) *mgmt {
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
	m := &mgmt{t: t, addr: l.Addr().String(), cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
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

// set makes resources the snapshot of node at version.
func (m *mgmt) set(node, version string, resources ...types.Resource) {
	m.t.Helper()
	snap, err := cachev3.NewSnapshot(version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: resources})
	if err != nil {
		m.t.Fatalf("snapshot: %v", err)
	}
	if err := m.cache.SetSnapshot(context.Background(), node, snap); err != nil {
		m.t.Fatalf("snapshot: %v", err)
	}
}

// requests returns the requests received so far.
func (m *mgmt) requests() []*discovery.DiscoveryRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*discovery.DiscoveryRequest(nil), m.reqs...)
}

// waitRequest waits until a request satisfying ok has arrived and returns
// it.
func (m *mgmt) waitRequest(what string, ok func(*discovery.DiscoveryRequest) bool) *discovery.DiscoveryRequest {
	m.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, r := range m.requests() {
			if ok(r) {
				return r
			}
		}
	}
	m.t.Fatalf("no %s reached the management server; requests: %v", what, m.requests())
	return nil
}

// waitFor polls cond every few milliseconds for up to 10 s, failing the
// test with what when it never holds, and returns how long it took.
func waitFor(t testing.TB, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return time.Since(start)
		}
	}
	t.Fatalf("timed out waiting for %s", what)
	return 0
}

func itoa(n int) string { return strconv.Itoa(n) }
