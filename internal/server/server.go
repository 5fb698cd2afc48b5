// Package server runs floodgate's listeners around a rate-limit service:
// gRPC (RLS, RLQS when given, grpc.health.v1 and reflection, optionally
// TLS), HTTP (/healthcheck, /json, /rlconfig, /metrics, a 403 at
// /counters), debug (/debug/pprof/, /rlconfig, /stats, /counters) and
// Prometheus, with the live page /ui/ when given.
//
// It owns their lifecycle: health turns SERVING once every listener is
// open and the store is ready, NOT_SERVING when shutdown begins; in-flight
// requests then finish within ShutdownTimeout. It bounds connections and
// request sizes, reaps slow and silent clients, and counts the requests it
// refuses. It decides nothing about rate limits: package envoy's Codec
// decodes the requests and the service answers them.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// ErrRequestsCut is returned by Run when the shutdown timeout passed with
// requests still in flight, which were cut without an answer.
var ErrRequestsCut = errors.New("server: the shutdown timeout cut in-flight requests")

// Server is floodgate's set of listeners. Create it with New and start it
// with Run, once.
type Server struct {
	svc     pb.RateLimitServiceServer
	current func() *rules.Set // rules.Watcher's Current and Status
	status  func() rules.Status
	opts    Options
	grpc    *grpc.Server
	health  *healthService
	// healthNames are HealthServices, and RLQS's name when it is served.
	healthNames []string
	serving     atomic.Bool
	reached     atomic.Bool // latches the store's health.Store.Reached
	metrics     bool        // whether /metrics is served
	// healthMu serializes updates of the gRPC health statuses, so that a
	// stale poll never overwrites the shutdown's NOT_SERVING.
	healthMu  sync.Mutex
	grpcState healthpb.HealthCheckResponse_ServingStatus
	listeners []*listener // gRPC, HTTP, then debug and Prometheus
	// inflight counts the requests being answered (ShouldRateLimit, /json),
	// to tell whether a shutdown cut any.
	inflight atomic.Int64

	mu    sync.Mutex // guards the listeners' conns
	ready chan struct{}
}

// listener is one of the Server's listeners: what it serves and, once Run
// has opened it, its socket.
type listener struct {
	title string // in errors: "gRPC listener: ..."
	name  string // in logs and metrics, and Addrs' field
	addr  string
	max   int          // connections open at once; 0: no bound
	http  *http.Server // nil for gRPC
	conns *connListener
}

// Addrs are the addresses a running Server listens on; Debug and
// Prometheus are nil for a listener it does not open.
type Addrs struct {
	GRPC, HTTP, Debug, Prometheus net.Addr
}

// New returns a Server for svc, describing the rules current returns and
// the loads status returns (rules.Watcher's Current and Status). gatherer
// supplies /metrics; nil serves none.
func New(svc pb.RateLimitServiceServer, current func() *rules.Set, status func() rules.Status,
	gatherer prometheus.Gatherer, opts Options) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// Not in Validate: a program validates its options before it has a
	// Store to give.
	if opts.Store == nil && opts.StoreReadiness == StoreAlways {
		return nil, &option.Error{Options: "server.Options", Field: "StoreReadiness", Value: opts.StoreReadiness, Want: "needs %s", With: []string{"Store"}}
	}
	opts.ShutdownTimeout = cmp.Or(opts.ShutdownTimeout, DefaultShutdownTimeout)
	opts.MaxMessageBytes = cmp.Or(opts.MaxMessageBytes, DefaultMaxMessageBytes)
	opts.MaxReportBytes = cmp.Or(opts.MaxReportBytes, max(DefaultMaxReportBytes, opts.MaxMessageBytes))
	opts.PrometheusPath = cmp.Or(opts.PrometheusPath, DefaultPrometheusPath)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Refused == nil {
		opts.Refused = func(string) {}
	}
	opts.Conns, _ = opts.Conns.normalize(fileLimit()) // checked by Validate
	s := &Server{svc: svc, current: current, status: status, opts: opts, metrics: gatherer != nil,
		ready: make(chan struct{})}

	json := s.registerServices(svc)
	c := opts.Conns
	s.listeners = []*listener{
		{title: "gRPC", name: "grpc", addr: opts.GRPCAddr, max: c.GRPCMaxConns},
		{title: "HTTP", name: "http", addr: opts.HTTPAddr, max: c.HTTPMaxConns,
			http: httpServer(s.httpHandler(gatherer, json), c, c.HTTPWriteTimeout)},
	}
	if opts.DebugAddr != "" {
		// No write timeout: profiles take 30 s.
		s.listeners = append(s.listeners, &listener{title: "debug", name: "debug", addr: opts.DebugAddr,
			max: c.HTTPMaxConns, http: httpServer(s.debugHandler(), c, 0)})
	}
	if opts.PrometheusAddr != "" && opts.Prometheus != nil {
		mux := http.NewServeMux()
		mux.Handle(opts.PrometheusPath, opts.Prometheus)
		s.listeners = append(s.listeners, &listener{title: "Prometheus", name: "prometheus", addr: opts.PrometheusAddr,
			max: c.HTTPMaxConns, http: httpServer(mux, c, c.HTTPWriteTimeout)})
	}
	return s, nil
}

// registerServices builds the gRPC server with svc (and RLQS when set),
// health and reflection, and returns /json's handler for svc, which
// decodes within the same bound as the gRPC codec.
func (s *Server) registerServices(svc pb.RateLimitServiceServer) http.Handler {
	opts := s.opts
	codec := &envoy.Codec{MaxRequestBytes: opts.MaxMessageBytes}
	if !opts.JSONOverrides {
		codec.VetJSON = refuseOverrides
	}
	s.grpc = grpc.NewServer(s.grpcOptions(codec)...)
	codec.Register(s.grpc, inFlight{svc, &s.inflight}, opts.Refused)
	s.healthNames = HealthServices
	if opts.RLQS != nil {
		rlqspb.RegisterRateLimitQuotaServiceServer(s.grpc, opts.RLQS)
		s.healthNames = append(slices.Clip(HealthServices), rlqspb.RateLimitQuotaService_ServiceDesc.ServiceName)
	}
	s.health = newHealthService()
	s.grpcState = healthpb.HealthCheckResponse_NOT_SERVING
	for _, name := range s.healthNames {
		s.health.SetServingStatus(name, s.grpcState)
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return codec.JSONHandler(inFlight{svc, &s.inflight}, opts.Refused)
}

func httpServer(h http.Handler, c ConnOptions, writeTimeout time.Duration) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: min(c.HTTPReadTimeout, 10*time.Second),
		ReadTimeout: c.HTTPReadTimeout, WriteTimeout: writeTimeout, IdleTimeout: c.HTTPIdleTimeout}
}

// Ready is closed once every listener is open. Health is then SERVING,
// unless Options make it wait for the store or the rules.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addrs returns the listening addresses; valid once Ready is closed.
func (s *Server) Addrs() Addrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := map[string]net.Addr{}
	for _, l := range s.listeners {
		if l.conns != nil {
			at[l.name] = l.conns.Addr()
		}
	}
	return Addrs{GRPC: at["grpc"], HTTP: at["http"], Debug: at["debug"], Prometheus: at["prometheus"]}
}

// Run opens the listeners, serves until ctx is done or a server fails,
// then shuts down: health turns NOT_SERVING, the server keeps answering for
// DrainDelay, listeners close, and in-flight requests get ShutdownTimeout
// to finish. It returns nil after a shutdown asked by ctx, or the error
// that stopped a server.
func (s *Server) Run(ctx context.Context) error {
	if err := s.listen(); err != nil {
		return err
	}
	errc := make(chan error, len(s.listeners))
	for _, l := range s.listeners {
		go func() { errc <- s.serve(l) }()
	}
	s.setServing(true)
	// Logged before Ready, so that whoever waits for it finds the line.
	s.opts.Logger.Info("serving", s.servingAttrs()...)
	if why := s.notServing(); why != "" {
		s.opts.Logger.Warn("not ready yet: health is NOT_SERVING", "reason", why)
	}
	close(s.ready)
	if s.followsHealth() {
		go s.followHealth(ctx)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
		if runErr != nil {
			runErr = fmt.Errorf("server: %w", runErr)
		}
	}
	if err := s.shutdown(); runErr == nil {
		runErr = err
	}
	return runErr
}

// listen opens the listeners that Options ask for, or none of them.
func (s *Server) listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	opened := make([]net.Listener, len(s.listeners))
	for i, l := range s.listeners {
		listen := func(addr string) (net.Listener, error) { return net.Listen("tcp", addr) }
		if l.name == "grpc" {
			listen = listenGRPC
		}
		var err error
		if opened[i], err = listen(l.addr); err != nil {
			for _, o := range opened[:i] {
				o.Close()
			}
			return fmt.Errorf("server: %s listener: %w", l.title, err)
		}
	}
	for i, l := range s.listeners {
		l.conns = newConnListener(opened[i], l.name, l.max, s.opts.Logger)
	}
	return nil
}

// servingAttrs are the start-up log's attributes: the listening
// addresses, then the URLs to try.
func (s *Server) servingAttrs() []any {
	a := s.Addrs()
	attrs := []any{"grpc", a.GRPC.String(), "http", a.HTTP.String()}
	if a.Debug != nil {
		attrs = append(attrs, "debug", a.Debug.String())
	}
	if a.Prometheus != nil {
		attrs = append(attrs, "prometheus", "http://"+urlHost(a.Prometheus)+s.opts.PrometheusPath)
	}
	base := "http://" + urlHost(a.HTTP)
	paths := []string{"/healthcheck", "/rlconfig", "/json"}
	if s.metrics {
		paths = append(paths, "/metrics")
	}
	if s.opts.UI != nil {
		paths = append(paths, "/ui/")
	}
	for _, p := range paths {
		attrs = append(attrs, strings.Trim(p, "/"), base+p)
	}
	return attrs
}

// urlHost is the host:port of a URL reaching a listener: localhost for
// one on every address.
func urlHost(addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// serve serves l until its server stops; nil for an HTTP server shut down.
func (s *Server) serve(l *listener) error {
	if l.http == nil {
		return s.grpc.Serve(l.conns)
	}
	if err := l.http.Serve(l.conns); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
