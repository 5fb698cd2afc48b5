package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/xds"
)

// xdsConfig is -config-type grpc_xds_sotw and the -xds-* flags: the rules
// come from an xDS management server, as the reference server's
// CONFIG_TYPE=GRPC_XDS_SOTW takes them (docs/xds.md).
type xdsConfig struct {
	on                         bool
	server, nodeID             string
	nodeMetadata, headers      string
	tls                        bool
	files                      tlsclient.Files
	san                        string
	retry                      time.Duration
	backoffInitial, backoffMax time.Duration
	backoffRandomFactor        float64
	backoffJitter              bool
	maxMessageBytes            int
	forceStart                 bool
}

// configTypeValue is -config-type: file or grpc_xds_sotw, in any case and
// with '-' for '_' (CONFIG_TYPE=GRPC_XDS_SOTW).
type configTypeValue bool

func (v *configTypeValue) String() string {
	if v != nil && *v {
		return "grpc_xds_sotw"
	}
	return "file"
}

// Get returns the value's name, for flag.Getter.
func (v *configTypeValue) Get() any { return v.String() }

func (v *configTypeValue) Set(s string) error {
	switch strings.ReplaceAll(strings.ToLower(s), "-", "_") {
	case "file":
		*v = false
	case "grpc_xds_sotw":
		*v = true
	default:
		return errors.New("want file or grpc_xds_sotw")
	}
	return nil
}

// xdsOn reports whether CONFIG_TYPE=GRPC_XDS_SOTW: the reference reads its
// xDS variables only then.
func xdsOn(env lookupFunc) bool {
	v, _ := env("CONFIG_TYPE")
	var on configTypeValue
	return on.Set(v) == nil && bool(on)
}

// whileXDS is src while CONFIG_TYPE=GRPC_XDS_SOTW, and unset otherwise.
func whileXDS(src envSource) envSource {
	return func(env lookupFunc) (string, string, bool) {
		if !xdsOn(env) {
			return "", "", false
		}
		return src(env)
	}
}

// setFlags returns the -xds-* flags whose values differ from their
// defaults, so that an error can name the settings at fault.
func (x *xdsConfig) setFlags() []string {
	// The flags of a new set point into scratch, reset to the defaults;
	// given x's values, each flag's String is x's and its DefValue the
	// default.
	var scratch config
	fs := newFlagSet(&scratch)
	scratch.xds = *x
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Name, "xds-") && f.Value.String() != f.DefValue {
			names = append(names, "-"+f.Name)
		}
	})
	return names
}

func (x *xdsConfig) validate(c *config) error {
	if !x.on {
		if set := x.setFlags(); len(set) > 0 {
			// The flags first: namingSources then names their
			// variables (FLOODGATE_XDS_SERVER) before CONFIG_TYPE's.
			return fmt.Errorf("%s set, but the rules come from files: xDS settings need -config-type grpc_xds_sotw (CONFIG_TYPE=GRPC_XDS_SOTW)", strings.Join(set, ", "))
		}
		return nil
	}
	if x.server == "" {
		return errors.New("-xds-server (CONFIG_GRPC_XDS_SERVER_URL) is empty: give the management server's host:port")
	}
	if err := xds.CheckTarget(x.server); err != nil {
		return fmt.Errorf("-xds-server %w", err)
	}
	if _, err := splitPairs(x.nodeMetadata, "=", "-xds-node-metadata"); err != nil {
		return err
	}
	if _, err := splitPairs(x.headers, ":", "-xds-headers"); err != nil {
		return err
	}
	if !x.tls && (x.files != tlsclient.Files{} || x.san != "") {
		// The reference reads them only with TLS on; a user who set them
		// meant TLS, and would silently get none.
		return errors.New("-xds-tls-ca, -xds-tls-cert, -xds-tls-key and -xds-tls-san (CONFIG_GRPC_XDS_*_TLS_*) need -xds-tls (CONFIG_GRPC_XDS_SERVER_USE_TLS=true)")
	}
	switch {
	case x.retry <= 0:
		return fmt.Errorf("-xds-retry-interval %v: must be positive", x.retry)
	case x.backoffInitial <= 0 || x.backoffMax < x.backoffInitial:
		return fmt.Errorf("-xds-backoff-initial %v and -xds-backoff-max %v: want 0 < initial <= max", x.backoffInitial, x.backoffMax)
	case x.backoffRandomFactor < 0 || x.backoffRandomFactor > 1:
		return fmt.Errorf("-xds-backoff-random-factor %v: want a number from 0 to 1", x.backoffRandomFactor)
	case x.maxMessageBytes < 0:
		return fmt.Errorf("-xds-max-message-bytes %d: must not be negative", x.maxMessageBytes)
	}
	if c.rulesFrom != "" && c.rulesFrom != defaultConfigVar && c.rulesFrom != referenceDefaultFrom {
		c.notes = append(c.notes, "the rules come from the xDS server (-config-type grpc_xds_sotw): "+c.rulesFrom+" is not read; floodgate check and explain still read it")
	}
	return nil
}

// splitPairs parses "k1<sep>v1,k2<sep>v2" (blank entries skipped); flag
// names the setting in errors.
func splitPairs(s, sep, flag string) (map[string]string, error) {
	out := map[string]string{}
	for _, e := range strings.Split(s, ",") {
		if strings.TrimSpace(e) == "" {
			continue
		}
		k, v, ok := strings.Cut(e, sep)
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("%s: entry %q: want key%svalue", flag, e, sep)
		}
		out[k] = strings.TrimSpace(v)
	}
	return out, nil
}

// options turns the flags into the client's options, reading the TLS
// files.
func (x *xdsConfig) options(logger *slog.Logger) (xds.Options, error) {
	meta, _ := splitPairs(x.nodeMetadata, "=", "-xds-node-metadata") // checked by validate
	headers, _ := splitPairs(x.headers, ":", "-xds-headers")
	o := xds.Options{
		ServerURL: x.server, NodeID: x.nodeID, NodeMetadata: meta, Headers: headers,
		RetryInterval: x.retry, BackoffInitial: x.backoffInitial, BackoffMax: x.backoffMax,
		BackoffRandomFactor: x.backoffRandomFactor, NoJitter: !x.backoffJitter,
		MaxMessageBytes: x.maxMessageBytes, Logger: logger,
	}
	if x.backoffRandomFactor == 0 {
		o.NoJitter = true // zero means none here, not the package's default
	}
	if x.tls {
		tc, err := x.files.Config("xds")
		if err != nil {
			return o, err
		}
		tc.ServerName = x.san
		o.TLS = tc
	}
	return o, nil
}

// ruleSource is where the server takes its rules from: a rules.Watcher of
// the rule files, or a rules.Feed that the xDS client fills.
type ruleSource interface {
	Current() *rules.Set
	Status() rules.Status
	Changed() <-chan struct{}
}

// openRules returns the configured source of the rules and the function
// that keeps it current until its context ends. For xDS the client starts
// at once and, unless -xds-force-start, openRules waits for the first good
// rules, as the reference server does before serving; ctx ending first is
// an error.
func openRules(ctx context.Context, cfg *config, opts rules.Options, logger *slog.Logger) (ruleSource, func(context.Context) error, error) {
	if !cfg.xds.on {
		w, err := rules.NewWatcher(cfg.rulesPath, opts, logger)
		if err != nil {
			return nil, nil, fmt.Errorf("refusing to start, cannot load the rules in %s:\n%w", cfg.rulesPath, err)
		}
		return w, w.Run, nil
	}
	xo, err := cfg.xds.options(logger)
	if err != nil {
		return nil, nil, err
	}
	feed := rules.NewFeed(opts, logger, "source", "xds", "server", cfg.xds.server)
	client, err := xds.New(feed, xo)
	if err != nil {
		return nil, nil, err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Run(runCtx) }()
	follow := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
		case <-runCtx.Done():
		}
		stop()
		return <-done
	}
	if cfg.xds.forceStart {
		logger.Warn("xds: serving before the first rules arrive (-xds-force-start): every request is allowed until then", "server", cfg.xds.server)
		return feed, follow, nil
	}
	logger.Info("xds: waiting for the first rules before serving (-xds-force-start serves at once)", "server", cfg.xds.server, "node", cfg.xds.nodeID)
	select {
	case <-feed.Loaded():
		return feed, follow, nil
	case <-ctx.Done():
		stop()
		<-done
		return nil, nil, fmt.Errorf("stopped before the first rules arrived from the xDS server %s", cfg.xds.server)
	}
}
