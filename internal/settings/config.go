package settings

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/floodgate/floodgate/internal/capture"
	"github.com/floodgate/floodgate/internal/promsink"
	"github.com/floodgate/floodgate/internal/rlqs"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/internal/tracing"
	"github.com/floodgate/floodgate/internal/xds"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Config is the binary's whole configuration. Each setting lands in the
// Options of the package it configures; what configures the binary itself
// (logs, commands, whether a part is on) has a field of its own here.
type Config struct {
	Rules   Rules
	Store   store.Options
	Service envoy.Options
	Metrics rlsmetrics.Options
	Server  server.Options
	GRPCTLS GRPCTLS
	// UI serves the live page (-ui).
	UI bool
	// RLQS is the Rate Limit Quota Service, served beside RLS.
	RLQS Part[rlqs.Options]
	// Statsd is the reference server's statsd stats.
	Statsd Part[statsd.Options]
	// Prometheus maps the statsd stats for -prometheus-addr.
	Prometheus promsink.Options
	// Tracing is the OpenTelemetry export.
	Tracing Part[tracing.Options]
	Capture Capture
	Log     Log
	Command Command

	// From says, for each flag set by the environment, the variable(s)
	// that set it: "NEAR_LIMIT_RATIO".
	From map[string]string
	// Notes are remarks about the settings, logged at start.
	Notes []string
}

// Rules says where the rules come from.
type Rules struct {
	// Path is the rule file or directory (-config), and PathFrom what set
	// it: "-config", the variable(s), or "" for the default.
	Path     string
	PathFrom string
	// Options are the loader's; Supports is the store's.
	Options rules.Options
	// XDS takes the rules from an xDS management server instead of Path
	// (-config-type grpc_xds_sotw), with XDSOptions and XDSTLS.
	XDS        ConfigType
	XDSOptions xds.Options
	XDSTLS     ClientTLS
	// XDSForceStart serves before the first rules arrive, every request
	// allowed until then, instead of waiting for them.
	XDSForceStart bool
}

// ClientTLS is TLS to a server floodgate connects to: on or off, the
// files, and the name the server's certificate must hold (empty: its
// host).
type ClientTLS struct {
	On    bool
	Files tlsclient.Files
	SAN   string
}

// GRPCTLS is TLS on the gRPC listener.
type GRPCTLS struct {
	On    bool
	Files server.TLSFiles
}

// Part is a part of the server that runs, with its package's Options,
// only when On.
type Part[O any] struct {
	On      bool
	Options O
}

// Capture records the requests served to Path, when set, for replay.
type Capture struct {
	Path    string
	Options capture.Options
}

// Log is the format and level of the logs.
type Log struct {
	Level  LogLevel
	Format LogFormat
}

// Command is what the binary does besides serving: -check, -explain (with
// its arguments, Args) or -version.
type Command struct {
	Check, Explain, Version bool
	Args                    []string
}

// ConfigType is -config-type: false for files, true for an xDS server.
type ConfigType bool

// UnmarshalText reads file or grpc_xds_sotw, in any case and with '-' for
// '_' (CONFIG_TYPE=GRPC_XDS_SOTW).
func (t *ConfigType) UnmarshalText(b []byte) error {
	switch strings.ReplaceAll(strings.ToLower(string(b)), "-", "_") {
	case "file":
		*t = false
	case "grpc_xds_sotw":
		*t = true
	default:
		return errors.New("want file or grpc_xds_sotw")
	}
	return nil
}

// MarshalText writes file or grpc_xds_sotw.
func (t ConfigType) MarshalText() ([]byte, error) {
	if t {
		return []byte("grpc_xds_sotw"), nil
	}
	return []byte("file"), nil
}

// LogLevel is -log-level: slog's levels, read without regard to case as
// logrus reads the reference server's LOG_LEVEL, with its names (trace,
// warning, fatal, panic) mapped to the nearest.
type LogLevel slog.Level

// UnmarshalText reads a level's name.
func (l *LogLevel) UnmarshalText(b []byte) error {
	switch strings.ToLower(string(b)) {
	case "trace", "debug":
		*l = LogLevel(slog.LevelDebug)
	case "info":
		*l = LogLevel(slog.LevelInfo)
	case "warn", "warning":
		*l = LogLevel(slog.LevelWarn)
	case "error", "fatal", "panic":
		*l = LogLevel(slog.LevelError)
	default:
		return fmt.Errorf("unknown log level %q (want debug, info, warn or error)", b)
	}
	return nil
}

// MarshalText writes slog's name of the level.
func (l LogLevel) MarshalText() ([]byte, error) { return []byte(slog.Level(l).String()), nil }

// Level returns the slog level.
func (l LogLevel) Level() slog.Level { return slog.Level(l) }

// LogFormat is -log-format: text or json.
type LogFormat string

// UnmarshalText reads text or json, in any case, as the reference reads
// LOG_FORMAT.
func (f *LogFormat) UnmarshalText(b []byte) error {
	switch v := strings.ToLower(string(b)); v {
	case "text", "json":
		*f = LogFormat(v)
		return nil
	}
	return errors.New("want text or json")
}

// MarshalText writes the format.
func (f LogFormat) MarshalText() ([]byte, error) { return []byte(f), nil }
