// Command floodgate is an Envoy rate-limit service (RLS v3) that can replace
// envoyproxy/ratelimit: it reads the same rule files and honours the same
// environment variables. floodgate -h lists its commands and every flag.
//
// This package wires the parts together: the settings (internal/settings)
// into the store (internal/store), the rule source (pkg/rules,
// internal/xds), the service (pkg/envoy) and the listeners
// (internal/server), then runs them (serve.go). floodgate counters is
// internal/counters' Command; floodgate replay runs the floodgate-replay
// program (cmd/replay).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/settings"
)

func main() {
	applyGCDefault(os.LookupEnv, "/")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code. ctx ends the server.
// Reports go to stderr in the log format asked for, credentials hidden;
// stdout gets only what a command prints.
func run(ctx context.Context, args []string, env settings.Lookup, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "replay" {
		return runReplay(args[1:], env, stderr)
	}
	if len(args) > 0 && args[0] == "counters" {
		return packageCommand(stderr, func(*slog.Logger) (int, error) {
			return counters.Command(ctx, args[1:], defaultDebugAddr(env), stdout)
		})
	}
	args = commandArgs(args)
	hide := newRedactor(args, env)
	cfg, err := settings.Load(args, env)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usageHead)
		settings.PrintFlags(stdout)
		return 0
	}
	if err != nil {
		newLogOutput(stderr, string(settings.StartFormat(args, env)), slog.LevelInfo, hide).fatal(err, flagHint)
		return 2
	}
	if cfg.Command.Version {
		fmt.Fprintln(stdout, version())
		return 0
	}
	out := newLogOutput(stderr, string(cfg.Log.Format), cfg.Log.Level.Level(), hide)
	logNotes(out.logger, cfg.Notes)
	switch {
	case cfg.Command.Check:
		return check(stdout, out, cfg)
	case cfg.Command.Explain:
		return explain(stdout, out, cfg)
	}
	logRulesOrigin(out.logger, cfg)
	logGC(out.logger, env)
	return serve(ctx, cfg, out)
}

// packageCommand runs a command its package holds whole, reporting the
// error it returns as the server reports its own; it returns the exit code.
func packageCommand(stderr io.Writer, cmd func(*slog.Logger) (int, error)) int {
	out := newLogOutput(stderr, "text", slog.LevelInfo, &redactor{})
	code, err := cmd(out.logger)
	if err != nil {
		out.fatal(err, "")
	}
	return code
}

// defaultDebugAddr is where the server's debug listener is with this
// environment, as an address to dial (":6070" is loopback's); the
// listener's default when the server would refuse the environment.
func defaultDebugAddr(env settings.Lookup) string {
	addr := server.DefaultDebugAddr
	if cfg, err := settings.Load(nil, env); err == nil {
		addr = cfg.Server.DebugAddr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch ip := net.ParseIP(host); {
	case host == "" || ip != nil && ip.To4() != nil && ip.IsUnspecified():
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// logNotes logs, once each, the remarks about the configuration.
func logNotes(logger *slog.Logger, notes []string) {
	seen := map[string]bool{}
	for _, n := range notes {
		if !seen[n] {
			seen[n] = true
			logger.Warn(n)
		}
	}
}

// logRulesOrigin says where the rules come from when a default chose them,
// so that an operator who meant RUNTIME_ROOT sees it was not set.
func logRulesOrigin(logger *slog.Logger, cfg *settings.Config) {
	if cfg.Rules.XDS {
		return // openRules says where they come from
	}
	path := cfg.Rules.Path
	switch cfg.Rules.PathFrom {
	case settings.DefaultConfigVar:
		logger.Info("rules from "+settings.DefaultConfigVar+", the image's demo rules: mount yours at "+settings.ReferenceDefaultDir+", or set RUNTIME_ROOT (with RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY as needed) or -config", "path", path)
	case settings.ReferenceDefaultFrom:
		logger.Info("rules from "+settings.ReferenceDefaultFrom+" (no RUNTIME_* variable set): the reference server, without RUNTIME_SUBDIRECTORY, would serve no rules; floodgate reads this directory", "path", path)
	case "":
		logger.Info("rules from -config's default: set RUNTIME_ROOT (with RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY as needed) or -config for others", "path", path)
	}
}
