package main

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"

	"github.com/floodgate/floodgate/internal/settings"
	"github.com/floodgate/floodgate/internal/xds"
	"github.com/floodgate/floodgate/pkg/rules"
)

// ruleSource is where the server takes its rules from: a rules.Watcher of
// the rule files, or a rules.Feed that the xDS client fills.
type ruleSource interface {
	Current() *rules.Set
	Status() rules.Status
	Changed() <-chan struct{}
}

// openRules returns the source of the rules and the function that keeps
// it current until its context ends. With xDS it waits for the first good
// rules, as the reference does, unless -xds-force-start.
func openRules(ctx context.Context, cfg *settings.Config, logger *slog.Logger) (ruleSource, func(context.Context) error, error) {
	r := &cfg.Rules
	if !r.XDS {
		w, err := rules.NewWatcher(r.Path, r.Options, logger)
		if err != nil {
			return nil, nil, fmt.Errorf("refusing to start, cannot load the rules in %s:\n%w", r.Path, err)
		}
		return w, w.Run, nil
	}
	xo := r.XDSOptions
	xo.Logger = logger
	if r.XDSTLS.On {
		tc, err := r.XDSTLS.Files.Config("xds")
		if err != nil {
			return nil, nil, refusedError{cfg.Explain(err)}
		}
		tc.ServerName = r.XDSTLS.SAN
		xo.TLS = tc
	}
	feed := rules.NewFeed(r.Options, logger, "source", "xds", "server", xo.ServerURL)
	client, err := xds.New(feed, xo)
	if err != nil {
		return nil, nil, refusedError{cfg.Explain(err)}
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- client.Run(runCtx) }()
	follow := func(ctx context.Context) error {
		<-ctx.Done() // ends with the server's, which ends runCtx too
		stop()
		return <-done
	}
	if r.XDSForceStart {
		logger.Warn("xds: serving before the first rules arrive (-xds-force-start): every request is allowed until then", "server", xo.ServerURL)
		return feed, follow, nil
	}
	logger.Info("xds: waiting for the first rules before serving (-xds-force-start serves at once)", "server", xo.ServerURL, "node", xo.NodeID)
	select {
	case <-feed.Loaded():
		return feed, follow, nil
	case <-ctx.Done():
		stop()
		<-done
		return nil, nil, fmt.Errorf("stopped before the first rules arrived from the xDS server %s", xo.ServerURL)
	}
}

// withPushedFiles adds to the debug listener's live page (page, nil when
// -ui=false) the rule files last pushed over xDS: /ui/xds/ lists them,
// /ui/xds/<name> is the file errors name xds/<name>:line:col. On the debug
// listener only: the rules hold request values.
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
