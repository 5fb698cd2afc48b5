// Package server runs floodgate's listeners around a rate-limit service:
// the gRPC server Envoy calls (with grpc.health.v1 and server reflection,
// and the Rate Limit Quota Service beside RLS when Options give one,
// optionally TLS or mutual TLS with certificates reloaded from their files),
// the HTTP server (/healthcheck, /json, /rlconfig, /metrics), the debug
// server (/debug/pprof/, /rlconfig, and /counters when Options give it,
// which the HTTP server refuses), each with the live page /ui/ when
// Options give one (package ui), and, when Options give it, the
// Prometheus listener where the reference server serves its stats. It owns their lifecycle: health goes
// SERVING once every listener is open and the store has answered once
// (Options.StoreReadiness says how the store counts), and NOT_SERVING when
// shutdown begins, after which in-flight requests finish before Run
// returns, within ShutdownTimeout whatever connections are open. It bounds
// the listeners' connections and reaps slow and silent clients
// (ConnOptions, listener.go), and the size of a request, and counts the
// requests it refuses (Options.Refused).
//
// It decides nothing about rate limits and decodes no request itself: it
// serves any RateLimitServiceServer (package envoy's Service) with package
// envoy's Codec, which decodes and refuses gRPC requests, and reads the
// rules only to describe them. Configuration comes from cmd/server in
// small Options.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Rules is what the server needs of the rules: the current set, to list it,
// and the state of the loads. rules.Watcher satisfies it.
type Rules interface {
	Current() *rules.Set
	Status() rules.Status
}

// HealthServices are the gRPC health service names the server reports: ""
// (the whole server), "ratelimit" (what the reference server reports) and
// the RLS service's full name.
var HealthServices = []string{"", "ratelimit", pb.RateLimitService_ServiceDesc.ServiceName}

// DefaultShutdownTimeout is Options.ShutdownTimeout when it is zero.
const DefaultShutdownTimeout = 15 * time.Second

// The listen addresses floodgate serves on by default, as the reference
// server does, except the debug listener, which stays on loopback unless
// told otherwise.
const (
	DefaultGRPCAddr  = ":8081"
	DefaultHTTPAddr  = ":8080"
	DefaultDebugAddr = "127.0.0.1:6070"
)

// DefaultPrometheusPath is Options.PrometheusPath when it is empty: the
// reference server's PROMETHEUS_PATH default.
const DefaultPrometheusPath = "/metrics"

// Options configures a Server.
type Options struct {
	// GRPCAddr, HTTPAddr and DebugAddr are the listen addresses
	// (host:port; ":0" picks a free port). GRPCAddr may also be a unix
	// socket, "unix:/path" (the reference server's GRPC_UDS). An empty
	// DebugAddr disables the debug server; the other two are required.
	GRPCAddr, HTTPAddr, DebugAddr string
	// MaxConnectionAge, when positive, closes a gRPC connection gracefully
	// (GOAWAY) after about that long (gRPC adds ±10% jitter), so that
	// clients reconnect and spread over replicas added since;
	// MaxConnectionAgeGrace then bounds how long its calls may finish (0:
	// no bound). The reference server's GRPC_MAX_CONNECTION_AGE and
	// GRPC_MAX_CONNECTION_AGE_GRACE.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// DrainDelay is how long the server keeps answering after health turns
	// NOT_SERVING, so load balancers stop sending before listeners close;
	// 0 closes them at once.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests once listeners
	// close; requests still running then are cut. 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Logger receives lifecycle logs; nil discards them.
	Logger *slog.Logger
	// MaxMessageBytes bounds a request message, over gRPC and as /json's
	// body; larger ones are refused (ResourceExhausted, 413). 0 means
	// DefaultMaxMessageBytes.
	MaxMessageBytes int
	// TLS, when not nil, makes the gRPC listener speak TLS only (see
	// NewTLSConfig). The HTTP and debug listeners stay plain.
	TLS *tls.Config
	// Store describes the limit store's health, for /rlconfig ("store:
	// redis healthy (breaker closed)") and for readiness as StoreReadiness
	// says; it is called from any goroutine. Nil means there is no store
	// to report: /rlconfig has no store line and the store never holds
	// readiness.
	Store func() health.Store
	// StoreReadiness says how the store's health decides readiness
	// (/healthcheck and gRPC health). The zero value,
	// StoreReachedOnce, holds readiness until the store has answered once.
	StoreReadiness StoreReadiness
	// HealthRequiresRules makes health NOT_SERVING while the rules in
	// force declare no domain (an empty rule directory, until a file
	// appears), as the reference server's
	// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED does.
	HealthRequiresRules bool
	// JSONOverrides lets /json requests carry a descriptor's limit
	// override. False refuses such a request (400, naming the field):
	// whoever reaches the HTTP port could raise its own limit with one,
	// and Envoy never calls /json. gRPC requests take overrides always.
	JSONOverrides bool
	// Conns bounds the listeners' connections and reaps slow and silent
	// clients.
	Conns ConnOptions
	// Refused, when not nil, is called once for each request the server
	// refuses before the service sees it, with the reason:
	// envoy.RefusedMalformed (not a RateLimitRequest: bad protobuf or
	// JSON, a string that is not UTF-8), envoy.RefusedTooLarge (over
	// MaxMessageBytes) or envoy.RefusedUnknownMethod (a gRPC method not
	// served, or /json without POST).
	Refused func(reason string)
	// UI and DebugUI, when set, serve /ui and /ui/ on the HTTP and the
	// debug listener (package ui's page).
	UI, DebugUI http.Handler
	// RLQS, when set, is served on the gRPC listener beside RLS (package
	// rlqs's Service), its name reported by gRPC health too; shutdown
	// ends its streams once health is NOT_SERVING and DrainDelay has
	// passed, so that each Envoy reopens its stream on another instance.
	RLQS QuotaService
	// MaxReportBytes bounds an RLQS report (DefaultMaxReportBytes when 0):
	// a report lists every bucket of an Envoy, about 40 bytes each. gRPC
	// bounds every message of the listener alike, so it must be at least
	// MaxMessageBytes; RLS requests are held to MaxMessageBytes by their
	// handler.
	MaxReportBytes int
	// PrometheusAddr, when set with Prometheus, is a listener of its own
	// serving Prometheus at PrometheusPath (DefaultPrometheusPath when
	// empty) and
	// nothing else: the reference server's PROMETHEUS_ADDR and
	// PROMETHEUS_PATH, where its stats are scraped.
	PrometheusAddr, PrometheusPath string
	Prometheus                     http.Handler
	// Counters, when set, serves /counters and under /counters/ on the
	// debug listener only (package counters: look at a descriptor's
	// counters and reset them). The HTTP listener then answers those paths
	// 403, naming the debug listener: a reset lifts a limit, which is not
	// for whoever reaches the public port.
	Counters http.Handler
}

// QuotaService is the Rate Limit Quota Service the gRPC listener serves
// beside RLS: its long-lived streams end when Shutdown is called.
type QuotaService interface {
	rlqspb.RateLimitQuotaServiceServer
	// Shutdown ends every stream and refuses new ones; it returns at once.
	Shutdown()
}

// DefaultMaxReportBytes is Options.MaxReportBytes when it is zero: gRPC's
// own default bound, about 100,000 buckets of an Envoy in one report.
const DefaultMaxReportBytes = 4 << 20

// ErrRequestsCut is returned by Run when the shutdown timeout passed with
// requests still in flight, which were cut without an answer.
var ErrRequestsCut = errors.New("server: the shutdown timeout cut in-flight requests")

// HealthPollInterval is how often gRPC health follows the store's health
// or the rules when they can change readiness (/healthcheck asks at each
// request).
const HealthPollInterval = 250 * time.Millisecond

// StoreReadiness says how the store's health decides readiness: whether
// /healthcheck and gRPC health report NOT_SERVING because of the store.
// Whatever it says, a request that the store cannot serve is answered by
// the failure policy.
type StoreReadiness int

const (
	// StoreReachedOnce reports NOT_SERVING until the store has answered
	// once since start (health.Store.Reached), then ignores it. A wrong
	// store address thus stalls a rolling deploy instead of replacing good
	// pods with pods that answer every request by the failure policy (the
	// reference server refuses to start), while an outage of a store that
	// worked does not unroute or restart every replica at once.
	StoreReachedOnce StoreReadiness = iota
	// StoreAlways reports NOT_SERVING whenever the store is unhealthy, and
	// SERVING again within HealthPollInterval of its recovery: for
	// deployments that would rather have no answer than the failure
	// policy's (the reference server's
	// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION).
	StoreAlways
	// StoreIgnored never lets the store change readiness.
	StoreIgnored
)

// String returns the mode's name: "reached-once", "always" or "ignored".
func (r StoreReadiness) String() string {
	switch r {
	case StoreReachedOnce:
		return "reached-once"
	case StoreAlways:
		return "always"
	case StoreIgnored:
		return "ignored"
	}
	return fmt.Sprintf("StoreReadiness(%d)", int(r))
}

// ParseStoreReadiness returns the mode named s, as String names it
// ("reached-once", "always", "ignored"), regardless of case.
func ParseStoreReadiness(s string) (StoreReadiness, error) {
	for r := StoreReachedOnce; r <= StoreIgnored; r++ {
		if strings.EqualFold(s, r.String()) {
			return r, nil
		}
	}
	return 0, fmt.Errorf("unknown store readiness %q (want reached-once, always or ignored)", s)
}

// UnmarshalText reads a mode's name, as ParseStoreReadiness.
func (r *StoreReadiness) UnmarshalText(b []byte) error {
	m, err := ParseStoreReadiness(string(b))
	if err == nil {
		*r = m
	}
	return err
}

// MarshalText writes the mode's name.
func (r StoreReadiness) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// DefaultMaxMessageBytes is Options.MaxMessageBytes when it is zero. RLS
// requests are a few hundred bytes.
const DefaultMaxMessageBytes = 1 << 20

// Server is floodgate's set of listeners. Create it with New and start it
// with Run, once.
type Server struct {
	svc    pb.RateLimitServiceServer
	rules  Rules
	opts   Options
	grpc   *grpc.Server
	health *healthService
	// healthNames are HealthServices, and the RLQS service's name when it
	// is served.
	healthNames []string
	serving     atomic.Bool
	// reached latches the store's health.Store.Reached.
	reached atomic.Bool
	// metrics says whether /metrics is served.
	metrics bool
	// healthMu serializes updates of the gRPC health statuses, so that a
	// stale poll never overwrites the shutdown's NOT_SERVING.
	healthMu  sync.Mutex
	grpcState healthpb.HealthCheckResponse_ServingStatus
	http      *http.Server
	debug     *http.Server
	prom      *http.Server // nil without Options.PrometheusAddr
	// inflight counts the requests being answered (ShouldRateLimit over
	// gRPC, /json), to tell whether a shutdown cut any.
	inflight atomic.Int64

	// mu guards addrs and listeners.
	mu    sync.Mutex
	addrs Addrs
	// listeners are the listeners, once Run opened them.
	listeners struct{ grpc, http, debug, prom *connListener }
	ready     chan struct{}
}

// Addrs are the addresses a running Server listens on; Debug and
// Prometheus are nil for a listener it does not open.
type Addrs struct {
	GRPC, HTTP, Debug, Prometheus net.Addr
}

// New returns a Server for svc. gatherer supplies /metrics (a
// *prometheus.Registry); nil serves no metrics.
func New(svc pb.RateLimitServiceServer, rs Rules, gatherer prometheus.Gatherer, opts Options) (*Server, error) {
	if svc == nil || rs == nil {
		return nil, errors.New("server: nil service or rules")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.ShutdownTimeout == 0 {
		opts.ShutdownTimeout = DefaultShutdownTimeout
	}
	if opts.MaxMessageBytes == 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.MaxReportBytes == 0 {
		opts.MaxReportBytes = max(DefaultMaxReportBytes, opts.MaxMessageBytes)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Store == nil && opts.StoreReadiness == StoreAlways {
		return nil, &option.Error{Options: "server.Options", Field: "StoreReadiness", Value: opts.StoreReadiness, Want: "needs %s", With: []string{"Store"}}
	}
	opts.Conns, _ = opts.Conns.normalize(fileLimit()) // checked by Validate
	if opts.Refused == nil {
		opts.Refused = func(string) {}
	}
	s := &Server{svc: svc, rules: rs, opts: opts, metrics: gatherer != nil, ready: make(chan struct{})}

	codec := &envoy.Codec{MaxRequestBytes: opts.MaxMessageBytes}
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

	c := opts.Conns
	s.http = &http.Server{Handler: s.httpHandler(gatherer), ReadHeaderTimeout: min(c.HTTPReadTimeout, 10*time.Second),
		ReadTimeout: c.HTTPReadTimeout, WriteTimeout: c.HTTPWriteTimeout, IdleTimeout: c.HTTPIdleTimeout}
	if opts.DebugAddr != "" {
		s.debug = &http.Server{Handler: s.debugHandler(), ReadHeaderTimeout: min(c.HTTPReadTimeout, 10*time.Second),
			ReadTimeout: c.HTTPReadTimeout, IdleTimeout: c.HTTPIdleTimeout}
	}
	if opts.PrometheusAddr != "" && opts.Prometheus != nil {
		mux := http.NewServeMux()
		mux.Handle(cmp.Or(opts.PrometheusPath, DefaultPrometheusPath), opts.Prometheus)
		s.prom = &http.Server{Handler: mux, ReadHeaderTimeout: min(c.HTTPReadTimeout, 10*time.Second),
			ReadTimeout: c.HTTPReadTimeout, WriteTimeout: c.HTTPWriteTimeout, IdleTimeout: c.HTTPIdleTimeout}
	}
	return s, nil
}

// streamWorkers is how many goroutines run calls. A call waits on the
// store for most of its time, so the workers must cover the calls in
// flight, not the CPUs: a call that finds every worker busy runs on a new
// goroutine, whose stack then grows twice on the way down to the store
// (a copy of the stack each time). With one worker per CPU that was 13%
// of the server's CPU at 64 callers; workers cost 8 to 32 KiB of stack
// each, and many more than the calls in flight touch more memory for
// nothing (docs/benchmarks.md).
const streamWorkers = 64

// FlowWindow is the fixed flow-control window of each gRPC stream and
// connection the server accepts, in bytes (cmd/bench's gRPC floor uses it
// too): 16 times grpc-go's starting window, so that decisions (a few
// hundred bytes) never wait for a window update, and a large RLQS report
// waits for one per MiB.
const FlowWindow = 1 << 20

// grpcOptions tune the gRPC server for many small unary calls on a few
// long-lived connections (Envoy's): a fixed set of streamWorkers runs the
// streams instead of a new goroutine per call (when all are busy, gRPC
// still starts one, so no call waits for a worker). Write buffers stay per
// connection: with few connections they cost little memory, and sharing
// them would take and return a buffer at every flush (measured again for
// issue 15: no gain in server CPU per decision; docs/benchmarks.md). Read
// and write buffers keep grpc-go's size, far above a decision's few
// hundred bytes. Flow-control windows are fixed (FlowWindow): grpc-go's
// default, a window sized by bandwidth-delay estimates, sends a window
// update and a PING after the first DATA frame that follows the last
// PING's answer, which at Envoy's usual rates is every request: frames to
// write and an answer to read here, and a PING to answer in Envoy, per
// decision, for a window that small requests never fill. The options also
// bound messages and connections, set TLS, and count the calls of unknown
// methods.
func (s *Server) grpcOptions(codec *envoy.Codec) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.NumStreamWorkers(max(streamWorkers, uint32(runtime.GOMAXPROCS(0)))),
		grpc.MaxRecvMsgSize(s.maxRecv()),
		grpc.ForceServerCodecV2(codec),
		grpc.UnknownServiceHandler(s.unknownMethod),
		grpc.StaticStreamWindowSize(FlowWindow),
		grpc.StaticConnWindowSize(FlowWindow),
	}
	if s.opts.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	return append(opts, s.opts.Conns.grpcConnOptions(s.opts.MaxConnectionAge, s.opts.MaxConnectionAgeGrace)...)
}

// maxRecv is gRPC's bound on every message received: RLQS reports' when
// RLQS is served, RLS requests' otherwise (then envoy.Codec holds them to
// theirs).
func (s *Server) maxRecv() int {
	if s.opts.RLQS != nil {
		return s.opts.MaxReportBytes
	}
	return s.opts.MaxMessageBytes
}

// unknownMethod answers a call of a method the server does not serve, as
// gRPC would (Unimplemented), and counts it.
func (s *Server) unknownMethod(_ any, stream grpc.ServerStream) error {
	s.opts.Refused(envoy.RefusedUnknownMethod)
	method, _ := grpc.MethodFromServerStream(stream)
	return status.Errorf(codes.Unimplemented, "unknown method %s", method)
}

// inFlight is the RLS service as the gRPC listener serves it: each call
// counted in n while the service answers it, so that a shutdown knows what
// it cuts.
type inFlight struct {
	pb.RateLimitServiceServer
	n *atomic.Int64
}

func (f inFlight) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	f.n.Add(1)
	defer f.n.Add(-1)
	return f.RateLimitServiceServer.ShouldRateLimit(ctx, req)
}

// Ready is closed once every listener is open. Health is then SERVING,
// unless Options make it wait for the store or the rules.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addrs returns the listening addresses; valid once Ready is closed.
func (s *Server) Addrs() Addrs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs
}

// Serving reports whether health is SERVING: the server runs and is not
// shutting down, the store is ready as Options.StoreReadiness asks, and,
// with Options.HealthRequiresRules, the rules declare a domain.
func (s *Server) Serving() bool { return s.notServing() == "" }

// notServing says why health is NOT_SERVING; "" when it is SERVING.
func (s *Server) notServing() string {
	if !s.serving.Load() {
		return "the server is not running or is shutting down"
	}
	if mode := s.opts.StoreReadiness; s.opts.Store != nil && mode != StoreIgnored && (mode == StoreAlways || !s.reached.Load()) {
		h := s.opts.Store()
		if h.Reached {
			// Latched: a store that answered once stays reached, whatever
			// it says later.
			s.reached.Store(true)
		}
		switch {
		case !s.reached.Load():
			return fmt.Sprintf("store %s has not answered since start; readiness waits until it has", h.Name)
		case mode == StoreAlways && !h.Healthy:
			return fmt.Sprintf("store %s is unhealthy; readiness requires it always", h.Name)
		}
	}
	if s.opts.HealthRequiresRules && len(s.rules.Current().Domains()) == 0 {
		return "the rules declare no domain; readiness requires one"
	}
	return ""
}

// followsHealth reports whether health can still change while the server
// runs, so that gRPC health must be polled.
func (s *Server) followsHealth() bool {
	mode := s.opts.StoreReadiness
	storeCan := s.opts.Store != nil && (mode == StoreAlways || mode == StoreReachedOnce && !s.reached.Load())
	return storeCan || s.opts.HealthRequiresRules
}

// Run opens the listeners, serves until ctx is done or a server fails,
// then shuts down: health turns NOT_SERVING, the server keeps answering for
// DrainDelay, listeners close, and in-flight requests get up to
// ShutdownTimeout to finish. It returns nil after a shutdown asked by ctx,
// or the error that stopped a server.
func (s *Server) Run(ctx context.Context) error {
	grpcL, err := listenGRPC(s.opts.GRPCAddr)
	if err != nil {
		return fmt.Errorf("server: gRPC listener: %w", err)
	}
	httpL, err := net.Listen("tcp", s.opts.HTTPAddr)
	if err != nil {
		grpcL.Close()
		return fmt.Errorf("server: HTTP listener: %w", err)
	}
	optional, err := s.listenOptional()
	if err != nil {
		grpcL.Close()
		httpL.Close()
		return err
	}
	debugL, promL := optional[0], optional[1]
	s.mu.Lock()
	ls := &s.listeners
	ls.grpc = newConnListener(grpcL, "grpc", s.opts.Conns.GRPCMaxConns, s.opts.Logger)
	ls.http = newConnListener(httpL, "http", s.opts.Conns.HTTPMaxConns, s.opts.Logger)
	if debugL != nil {
		ls.debug = newConnListener(debugL, "debug", s.opts.Conns.HTTPMaxConns, s.opts.Logger)
	}
	if promL != nil {
		ls.prom = newConnListener(promL, "prometheus", s.opts.Conns.HTTPMaxConns, s.opts.Logger)
	}
	s.mu.Unlock()

	errc := make(chan error, 4)
	go func() { errc <- s.grpc.Serve(ls.grpc) }()
	go func() { errc <- serveHTTP(s.http, ls.http) }()
	if s.debug != nil {
		go func() { errc <- serveHTTP(s.debug, ls.debug) }()
	}
	if s.prom != nil {
		go func() { errc <- serveHTTP(s.prom, ls.prom) }()
	}

	s.mu.Lock()
	s.addrs = Addrs{GRPC: grpcL.Addr(), HTTP: httpL.Addr()}
	if debugL != nil {
		s.addrs.Debug = debugL.Addr()
	}
	if promL != nil {
		s.addrs.Prometheus = promL.Addr()
	}
	s.mu.Unlock()
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

// listenOptional opens the debug and the Prometheus listeners, those
// that Options ask for (nil for the others), or none of them.
func (s *Server) listenOptional() ([2]net.Listener, error) {
	var ls [2]net.Listener
	for i, l := range []struct {
		on         bool
		name, addr string
	}{{s.debug != nil, "debug", s.opts.DebugAddr}, {s.prom != nil, "Prometheus", s.opts.PrometheusAddr}} {
		if !l.on {
			continue
		}
		var err error
		if ls[i], err = net.Listen("tcp", l.addr); err != nil {
			for _, open := range ls[:i] {
				if open != nil {
					open.Close()
				}
			}
			return ls, fmt.Errorf("server: %s listener: %w", l.name, err)
		}
	}
	return ls, nil
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
		attrs = append(attrs, "prometheus", "http://"+urlHost(a.Prometheus)+cmp.Or(s.opts.PrometheusPath, DefaultPrometheusPath))
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

func serveHTTP(srv *http.Server, l net.Listener) error {
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenGRPC listens on a TCP address, or on a unix socket for
// "unix:/path" (also "unix:///path").
func listenGRPC(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if p, ok := strings.CutPrefix(path, "//"); ok {
			path = p
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

// setServing starts or stops serving; the start-up and shutdown lines
// tell the change of health.
func (s *Server) setServing(on bool) {
	s.serving.Store(on)
	s.updateHealth(false)
}

// updateHealth sets the gRPC health statuses from Serving, when they
// change, logging the change with its reason if asked.
func (s *Server) updateHealth(logChange bool) {
	s.healthMu.Lock()
	defer s.healthMu.Unlock()
	st, why := healthpb.HealthCheckResponse_SERVING, s.notServing()
	if why != "" {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	if st == s.grpcState {
		return
	}
	s.grpcState = st
	for _, name := range s.healthNames {
		s.health.SetServingStatus(name, st)
	}
	switch {
	case !logChange || !s.serving.Load():
		// Start and shutdown have their own lines.
	case why != "":
		s.opts.Logger.Warn("health changed", "status", st.String(), "reason", why)
	default:
		s.opts.Logger.Info("health changed", "status", st.String())
	}
}

// followHealth updates gRPC health from the store's and the rules' until
// ctx ends or they can no longer change it.
func (s *Server) followHealth(ctx context.Context) {
	tick := time.NewTicker(HealthPollInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			s.updateHealth(true)
			if !s.followsHealth() {
				return // the store was reached and nothing else can change
			}
		}
	}
}

// shutdown turns health NOT_SERVING, waits DrainDelay, then stops the
// servers gracefully within ShutdownTimeout, after which it closes every
// connection left, whatever its state, so that the process can exit: a
// client that opened a connection and went silent must not hold a
// deployment. It returns ErrRequestsCut (wrapped) when requests were in
// flight at the timeout.
//
// gRPC's own Stop cannot do that alone: a connection accepted but still in
// its handshake (TLS, HTTP/2 preface) is not yet among the connections it
// closes, and Stop, like GracefulStop, waits for every handshake to end,
// which a silent client makes last the whole connection timeout (120 s by
// gRPC's default). Closing the socket from the listener's side ends the
// handshake at once.
func (s *Server) shutdown() error {
	s.setServing(false)
	s.opts.Logger.Info("shutting down: health is NOT_SERVING, finishing in-flight requests",
		"drain_delay", s.opts.DrainDelay, "timeout", s.opts.ShutdownTimeout)
	if s.opts.DrainDelay > 0 {
		time.Sleep(s.opts.DrainDelay)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownTimeout)
	defer cancel()
	ls := []*connListener{s.listeners.grpc, s.listeners.http, s.listeners.debug, s.listeners.prom}
	if s.opts.RLQS != nil {
		// RLQS streams last as long as their Envoy: GracefulStop would
		// wait for them until the timeout.
		s.opts.RLQS.Shutdown()
	}

	// cut is the most requests in flight when the timeout passed.
	var cut atomic.Int64
	noteCut := func() int64 {
		n := s.inflight.Load()
		for c := cut.Load(); n > c && !cut.CompareAndSwap(c, n); c = cut.Load() {
		}
		return n
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		done := make(chan struct{})
		go func() {
			s.grpc.GracefulStop()
			close(done)
		}()
		// GracefulStop has closed the listener, or soon will: no new
		// connection. It sends the established connections their GOAWAY
		// only once every handshake has ended; those stalled in theirs
		// carry no request, so they are closed, now and as they pass
		// silentGrace.
		stalled := time.NewTicker(silentGrace / 4)
		defer stalled.Stop()
		// Health watches last as long as their clients want: they end at
		// the first tick, by when they have sent the NOT_SERVING above.
		for waiting := true; waiting; {
			s.listeners.grpc.closeHandshaking()
			select {
			case <-done:
				return
			case <-ctx.Done():
				waiting = false
			case <-stalled.C:
				s.health.endWatches()
			}
		}
		s.opts.Logger.Warn("shutdown timeout: cutting the remaining gRPC requests and connections",
			"in_flight", noteCut(), "connections", s.listeners.grpc.open())
		s.listeners.grpc.closeConns(false)
		s.grpc.Stop()
		// Stop no longer waits for handshakes; GracefulStop still waits
		// for the handlers, whose contexts Stop cancelled. A handler that
		// ignores its context must not hold the exit.
		select {
		case <-done:
		case <-time.After(time.Second):
			s.opts.Logger.Warn("shutdown: gRPC handlers still running after their connections closed; exiting anyway")
		}
	})
	for i, srv := range []*http.Server{s.http, s.debug, s.prom} {
		if srv == nil {
			continue
		}
		l := ls[i+1]
		wg.Go(func() {
			l.closeConns(true)
			if err := srv.Shutdown(ctx); err != nil {
				noteCut()
				s.opts.Logger.Warn("shutdown timeout: cutting the remaining HTTP requests and connections",
					"listener", l.name, "connections", l.open(), "err", err)
				srv.Close()
				// Connections http.Server does not track yet (accepted,
				// not yet served) close with the listener's.
				l.closeConns(false)
			}
		})
	}
	wg.Wait()
	if n := cut.Load(); n > 0 {
		s.opts.Logger.Warn("stopped, cutting in-flight requests", "cut", n)
		return fmt.Errorf("%w: %d", ErrRequestsCut, n)
	}
	s.opts.Logger.Info("stopped")
	return nil
}
