package xds

import (
	"cmp"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/resolver"

	"github.com/floodgate/floodgate/pkg/option"
)

// The defaults of Options, those of envoyproxy/ratelimit's settings.
const (
	DefaultServerURL           = "localhost:18000"
	DefaultNodeID              = "default"
	DefaultRetryInterval       = 3 * time.Second
	DefaultBackoffInitial      = 10 * time.Second
	DefaultBackoffMax          = 60 * time.Second
	DefaultBackoffRandomFactor = 0.5
	DefaultStallWarning        = 10 * time.Second
)

// Options configure a Client. A zero field means its default.
type Options struct {
	// ServerURL is the management server as a gRPC target ("host:port",
	// "dns:///host:port"). Required.
	ServerURL string
	// NodeID and NodeMetadata describe this server to the management
	// server, which picks the snapshot by them.
	NodeID       string
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream (a token, say).
	Headers map[string]string
	// TLS, when not nil, secures the connection; its ServerName, when set,
	// is the name the server's certificate must hold.
	TLS *tls.Config
	// RetryInterval is the pause, ±50 %, before subscribing again after
	// the stream ended.
	RetryInterval time.Duration
	// BackoffInitial, BackoffMax and BackoffRandomFactor space the
	// attempts to connect while the server cannot be reached: the first
	// waits BackoffInitial, each next one 1.6 times longer up to
	// BackoffMax, each randomised by ±BackoffRandomFactor unless NoJitter
	// (a zero factor means the default).
	BackoffInitial, BackoffMax time.Duration
	BackoffRandomFactor        float64
	NoJitter                   bool
	// MaxMessageBytes bounds a response; zero is gRPC's 4 MiB.
	MaxMessageBytes int
	// Logger receives the connection's events; nil discards them.
	Logger *slog.Logger
	// StallWarning is how often a warning is logged while no stream
	// delivers rules: the server cannot be reached, or holds no snapshot
	// for this node.
	StallWarning time.Duration
}

// Validate reports the first option New refuses as an *option.Error, or
// nil.
func (o Options) Validate() error {
	if o.ServerURL == "" {
		return &option.Error{Options: "xds.Options", Field: "ServerURL", Want: "is empty: give the management server's host:port"}
	}
	if err := checkTarget(o.ServerURL); err != nil {
		return err
	}
	n := o.withDefaults()
	switch {
	case o.RetryInterval < 0:
		return refused("RetryInterval", o.RetryInterval, "must not be negative")
	case o.BackoffInitial < 0:
		return refused("BackoffInitial", o.BackoffInitial, "must not be negative")
	case o.BackoffMax < 0:
		return refused("BackoffMax", o.BackoffMax, "must not be negative")
	case n.BackoffInitial > n.BackoffMax:
		return &option.Error{Options: "xds.Options", Field: "BackoffInitial", Value: n.BackoffInitial,
			Want: "want at most %s (" + n.BackoffMax.String() + ")", With: []string{"BackoffMax"}}
	case o.BackoffRandomFactor < 0 || o.BackoffRandomFactor > 1:
		return refused("BackoffRandomFactor", o.BackoffRandomFactor, "want a number from 0 to 1")
	case o.StallWarning < 0:
		return refused("StallWarning", o.StallWarning, "must not be negative")
	case o.MaxMessageBytes < 0:
		return refused("MaxMessageBytes", o.MaxMessageBytes, "must not be negative")
	}
	return nil
}

func (o Options) withDefaults() Options {
	o.NodeID = cmp.Or(o.NodeID, DefaultNodeID)
	o.RetryInterval = cmp.Or(o.RetryInterval, DefaultRetryInterval)
	o.BackoffInitial = cmp.Or(o.BackoffInitial, DefaultBackoffInitial)
	o.BackoffMax = cmp.Or(o.BackoffMax, DefaultBackoffMax)
	o.BackoffRandomFactor = cmp.Or(o.BackoffRandomFactor, DefaultBackoffRandomFactor)
	o.StallWarning = cmp.Or(o.StallWarning, DefaultStallWarning)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// checkTarget refuses a ServerURL that is not host:port, or that with a
// resolver's scheme (dns:///host:port, unix:path). grpc would accept more
// and fail only when dialing, silently behind the retries: an http:// URL
// resolves as a host named "http", and a host without a port dials 443.
func checkTarget(target string) error {
	endpoint := target
	if scheme, rest, ok := strings.Cut(target, ":"); ok && resolver.Get(scheme) != nil {
		if scheme == "unix" || scheme == "unix-abstract" {
			return nil
		}
		// scheme://authority/endpoint or scheme:endpoint
		if after, ok := strings.CutPrefix(rest, "//"); ok {
			_, endpoint, _ = strings.Cut(after, "/")
		} else {
			endpoint = rest
		}
	} else if ok && strings.HasPrefix(rest, "//") {
		return refused("ServerURL", target, scheme+":// is not a gRPC target; give host:port (or dns:///host:port)")
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return &option.Error{Options: "xds.Options", Field: "ServerURL", Value: target, Want: "want host:port (or dns:///host:port)", Err: err}
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return refused("ServerURL", target, fmt.Sprintf("port %q: want a number from 1 to 65535", port))
	}
	if host == "" {
		return refused("ServerURL", target, "no host; give host:port")
	}
	return nil
}

func refused(field string, v any, want string) error {
	return &option.Error{Options: "xds.Options", Field: field, Value: v, Want: want}
}
