package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"slices"
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

// offlineRules is the error of check and explain when the server takes its
// rules from an xDS server: they read rule files only, and with none at
// -config they would say "no such file" without saying why none is there.
func offlineRules(cfg *config) error {
	if !cfg.xds.on {
		return nil
	}
	if _, err := os.Stat(cfg.rulesPath); err != nil {
		return fmt.Errorf("with -config-type grpc_xds_sotw (CONFIG_TYPE=GRPC_XDS_SOTW) the rules come from the xDS server %s, "+
			"which check and explain do not ask: they read rule files, and -config %s cannot be read (%w); "+
			"point -config at a copy of the pushed rules (a running server's debug listener serves them under /ui/xds/)",
			cfg.xds.server, cfg.rulesPath, err)
	}
	return nil
}

// withPushedFiles adds to the debug listener's live page, page (nil when
// -ui=false), the rule files last pushed over xDS when src is a rules.Feed:
// /ui/xds/ lists them with the push's version_info, /ui/xds/<name> is the
// YAML of the file that errors name xds/<name>:line:col, which exists
// nowhere else. Read-only, and on the debug listener only, like pprof:
// the rules hold request values.
func withPushedFiles(page http.Handler, src ruleSource) http.Handler {
	feed, ok := src.(*rules.Feed)
	if !ok {
		return page
	}
	mux := http.NewServeMux()
	if page != nil {
		mux.Handle("/ui", page)
		mux.Handle("/ui/", page)
	}
	mux.HandleFunc("GET /ui/xds/{name...}", func(w http.ResponseWriter, r *http.Request) {
		origin, files := feed.Pushed()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		name := r.PathValue("name")
		if name == "" {
			fmt.Fprintf(w, "version_info: %s\n", origin)
			for _, n := range slices.Sorted(maps.Keys(files)) {
				fmt.Fprintf(w, "/ui/%s\n", n)
			}
			return
		}
		data, ok := files["xds/"+name]
		if !ok {
			http.Error(w, fmt.Sprintf("no resource %q in the last push (version_info %q); /ui/xds/ lists them", name, origin), http.StatusNotFound)
			return
		}
		w.Write(data)
	})
	return mux
}
