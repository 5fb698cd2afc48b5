package server

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/option"
)

// Validate reports the first option New refuses as an *option.Error
// ("server.Options.ShutdownTimeout -1s: must not be negative"), or nil.
// Zero values are valid: they mean the defaults.
func (o Options) Validate() error {
	if o.GRPCAddr == "" || o.HTTPAddr == "" {
		return &option.Error{Options: "server.Options", Field: "GRPCAddr", Also: []string{"HTTPAddr"}, Want: "are required"}
	}
	for _, a := range []struct{ field, addr string }{{"GRPCAddr", o.GRPCAddr}, {"HTTPAddr", o.HTTPAddr}, {"DebugAddr", o.DebugAddr}, {"PrometheusAddr", o.PrometheusAddr}} {
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
	msg := o.MaxMessageBytes
	if msg == 0 {
		msg = DefaultMaxMessageBytes
	}
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

// checkListenAddr returns what was wanted of an address that would fail
// only when the listener opens, where the error would not name the
// setting: a port that is neither a number nor a service name (PORT=abc);
// "" when it will do. Empty (a listener switched off) and unix:/path
// sockets pass.
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
