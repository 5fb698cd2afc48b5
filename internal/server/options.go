package server

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// Validate reports the first option New refuses, naming the field and
// its value ("server: Options.ShutdownTimeout -1s: must not be
// negative"), or nil. Zero values are valid: they mean the defaults.
func (o Options) Validate() error {
	if o.GRPCAddr == "" || o.HTTPAddr == "" {
		return errors.New("server: Options.GRPCAddr and Options.HTTPAddr are required")
	}
	for _, a := range []struct{ field, addr string }{{"GRPCAddr", o.GRPCAddr}, {"HTTPAddr", o.HTTPAddr}, {"DebugAddr", o.DebugAddr}, {"PrometheusAddr", o.PrometheusAddr}} {
		if err := checkListenAddr(a.addr); err != nil {
			return fmt.Errorf("server: Options.%s %q: %w", a.field, a.addr, err)
		}
	}
	if o.PrometheusPath != "" && !strings.HasPrefix(o.PrometheusPath, "/") {
		return fmt.Errorf("server: Options.PrometheusPath %q: want a path starting with /", o.PrometheusPath)
	}
	if o.MaxMessageBytes < 0 {
		return fmt.Errorf("server: Options.MaxMessageBytes %d: must not be negative", o.MaxMessageBytes)
	}
	msg := o.MaxMessageBytes
	if msg == 0 {
		msg = DefaultMaxMessageBytes
	}
	if o.MaxReportBytes < 0 || o.MaxReportBytes > 0 && o.MaxReportBytes < msg {
		return fmt.Errorf("server: Options.MaxReportBytes %d: want 0 or at least Options.MaxMessageBytes (%d): gRPC bounds every message of the listener alike", o.MaxReportBytes, msg)
	}
	if o.StoreReadiness < StoreReachedOnce || o.StoreReadiness > StoreIgnored {
		return fmt.Errorf("server: Options.StoreReadiness %v: unknown", o.StoreReadiness)
	}
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"MaxConnectionAge", o.MaxConnectionAge}, {"MaxConnectionAgeGrace", o.MaxConnectionAgeGrace},
		{"ShutdownTimeout", o.ShutdownTimeout}, {"DrainDelay", o.DrainDelay}} {
		if d.v < 0 {
			return fmt.Errorf("server: Options.%s %v: must not be negative", d.field, d.v)
		}
	}
	_, err := o.Conns.normalize(0)
	return err
}

// checkListenAddr refuses an address that would fail only when the
// listener opens, where the error would not name the setting: a port that
// is neither a number nor a service name (PORT=abc). Empty (a listener
// switched off) and unix:/path sockets pass.
func checkListenAddr(addr string) error {
	if addr == "" || strings.HasPrefix(addr, "unix:") {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}
