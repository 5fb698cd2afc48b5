package server

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	rlqspb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/pkg/option"
)

// The listen addresses of the reference server, but the debug listener's
// on loopback.
const (
	DefaultGRPCAddr  = ":8081"
	DefaultHTTPAddr  = ":8080"
	DefaultDebugAddr = "127.0.0.1:6070"
)

// Defaults of the Options fields left zero.
const (
	DefaultShutdownTimeout = 15 * time.Second
	// DefaultMaxMessageBytes is far above an RLS request's few hundred bytes.
	DefaultMaxMessageBytes = 1 << 20
	// DefaultMaxReportBytes is gRPC's own bound: about 100,000 buckets of
	// an Envoy in one RLQS report.
	DefaultMaxReportBytes = 4 << 20
	// DefaultPrometheusPath is the reference server's PROMETHEUS_PATH.
	DefaultPrometheusPath = "/metrics"
)

// Options configures a Server. Zero values take the defaults.
type Options struct {
	// GRPCAddr, HTTPAddr and DebugAddr are the listen addresses
	// (host:port; ":0" picks a free port); GRPCAddr may be "unix:/path".
	// An empty DebugAddr disables the debug server; the other two are
	// required.
	GRPCAddr, HTTPAddr, DebugAddr string
	// MaxConnectionAge, when positive, closes a gRPC connection with
	// GOAWAY after about that long (±10%), so that clients spread over new
	// replicas; MaxConnectionAgeGrace then bounds its calls (0: no bound).
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
	// DrainDelay is how long the server keeps answering after health turns
	// NOT_SERVING, so that load balancers stop sending first.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the wait for in-flight requests once the
	// listeners close; requests still running then are cut.
	ShutdownTimeout time.Duration
	// Logger receives the lifecycle logs; nil discards them.
	Logger *slog.Logger
	// MaxMessageBytes bounds a request, over gRPC and as /json's body;
	// larger ones are refused (ResourceExhausted, 413).
	MaxMessageBytes int
	// TLS, when set, makes the gRPC listener speak TLS only (NewTLSConfig).
	TLS *tls.Config
	// Store describes the store's health for /rlconfig and readiness, from
	// any goroutine. Nil: no store line, no store readiness.
	Store func() health.Store
	// StoreReadiness says how the store's health decides readiness.
	StoreReadiness StoreReadiness
	// HealthRequiresRules makes health NOT_SERVING while the rules declare
	// no domain.
	HealthRequiresRules bool
	// JSONOverrides lets /json requests carry a limit override, refused by
	// default (400): whoever reaches the HTTP port could raise its own
	// limit, and Envoy never calls /json.
	JSONOverrides bool
	// Conns bounds the listeners' clients.
	Conns ConnOptions
	// Refused, when set, is called once for each request refused before
	// the service sees it, with a reason envoy.Metrics.Refused documents.
	Refused func(reason string)
	// UI and DebugUI, when set, serve the live page at /ui and under /ui/
	// on the HTTP and the debug listener.
	UI, DebugUI http.Handler
	// RLQS, when set, is served on the gRPC listener beside RLS; shutdown
	// ends its streams after DrainDelay, so that each Envoy reopens its
	// stream on another instance.
	RLQS QuotaService
	// MaxReportBytes bounds an RLQS report (0: DefaultMaxReportBytes, or
	// MaxMessageBytes when larger). gRPC bounds every message of the
	// listener alike, so it must be at least MaxMessageBytes.
	MaxReportBytes int
	// PrometheusAddr, with Prometheus, is a listener of its own serving
	// Prometheus at PrometheusPath and nothing else.
	PrometheusAddr, PrometheusPath string
	Prometheus                     http.Handler
	// Counters, when set, serves /counters and under it on the debug
	// listener only; the HTTP listener answers 403 there, since a reset
	// lifts a limit.
	Counters http.Handler
}

// QuotaService is the Rate Limit Quota Service the gRPC listener serves
// beside RLS.
type QuotaService interface {
	rlqspb.RateLimitQuotaServiceServer
	// Shutdown ends every stream and refuses new ones; it returns at once.
	Shutdown()
}

// StoreReadiness says whether /healthcheck and gRPC health report
// NOT_SERVING because of the store. Requests are answered by the failure
// policy whatever it says.
type StoreReadiness int

const (
	// StoreReachedOnce, the zero value, reports NOT_SERVING until the
	// store has answered once since start: a wrong store address stalls a
	// rolling deploy, an outage later does not unroute every replica.
	StoreReachedOnce StoreReadiness = iota
	// StoreAlways reports NOT_SERVING whenever the store is unhealthy,
	// SERVING again within HealthPollInterval of its recovery.
	StoreAlways
	// StoreIgnored never lets the store change readiness.
	StoreIgnored
)

var storeReadinessNames = [...]string{"reached-once", "always", "ignored"}

// String returns the mode's name: "reached-once", "always" or "ignored".
func (r StoreReadiness) String() string {
	if r >= 0 && int(r) < len(storeReadinessNames) {
		return storeReadinessNames[r]
	}
	return fmt.Sprintf("StoreReadiness(%d)", int(r))
}

// UnmarshalText reads a mode's name, as String names it, regardless of
// case.
func (r *StoreReadiness) UnmarshalText(b []byte) error {
	for i, name := range storeReadinessNames {
		if strings.EqualFold(string(b), name) {
			*r = StoreReadiness(i)
			return nil
		}
	}
	return fmt.Errorf("unknown store readiness %q (want reached-once, always or ignored)", b)
}

// MarshalText writes the mode's name.
func (r StoreReadiness) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Validate reports the first option New refuses as an *option.Error
// ("server.Options.ShutdownTimeout -1s: must not be negative"), or nil.
func (o Options) Validate() error {
	if o.GRPCAddr == "" || o.HTTPAddr == "" {
		return &option.Error{Options: "server.Options", Field: "GRPCAddr", Also: []string{"HTTPAddr"}, Want: "are required"}
	}
	for _, a := range []struct{ field, addr string }{
		{"GRPCAddr", o.GRPCAddr}, {"HTTPAddr", o.HTTPAddr}, {"DebugAddr", o.DebugAddr}, {"PrometheusAddr", o.PrometheusAddr},
	} {
		if want := checkListenAddr(a.addr); want != "" {
			return refused(a.field, a.addr, want)
		}
	}
	if o.PrometheusPath != "" && !strings.HasPrefix(o.PrometheusPath, "/") {
		return refused("PrometheusPath", o.PrometheusPath, "want a path starting with /")
	}
	if o.MaxMessageBytes < 0 {
		return refused("MaxMessageBytes", o.MaxMessageBytes, "must not be negative")
	}
	msg := cmp.Or(o.MaxMessageBytes, DefaultMaxMessageBytes)
	if o.MaxReportBytes < 0 || o.MaxReportBytes > 0 && o.MaxReportBytes < msg {
		return &option.Error{Options: "server.Options", Field: "MaxReportBytes", Value: o.MaxReportBytes, With: []string{"MaxMessageBytes"},
			Want: "want 0 or at least %s (" + strconv.Itoa(msg) + "): gRPC bounds every message of the listener alike"}
	}
	if o.StoreReadiness < StoreReachedOnce || o.StoreReadiness > StoreIgnored {
		return refused("StoreReadiness", o.StoreReadiness, "unknown")
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"MaxConnectionAge", o.MaxConnectionAge}, {"MaxConnectionAgeGrace", o.MaxConnectionAgeGrace},
		{"ShutdownTimeout", o.ShutdownTimeout}, {"DrainDelay", o.DrainDelay}} {
		if d.v < 0 {
			return refused(d.field, d.v, "must not be negative")
		}
	}
	_, err := o.Conns.normalize(0)
	return err
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "server.Options", Field: field, Value: v, Want: want}
}

// checkListenAddr returns what is wanted of an address that would fail
// only when its listener opens, naming no setting (PORT=abc); "" when it
// will do.
func checkListenAddr(addr string) string {
	if addr == "" || strings.HasPrefix(addr, "unix:") {
		return ""
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want host:port"
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Sprintf("port %q: want a number from 0 to 65535", port)
	}
	return ""
}
