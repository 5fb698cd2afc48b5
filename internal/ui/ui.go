// Package ui serves floodgate's live page: the rules in force as a tree per
// domain, the last reload and its errors, and, live, per rule, decisions
// per second, the near-limit share and the most hit counters, with the
// store's health and latency.
//
// The page is plain HTML, JavaScript and CSS embedded in the binary,
// read-only, polling one JSON document (api/snapshot) read from the
// registry /metrics serves, so that its figures are /metrics' figures.
// Handler.Run keeps the last minutes of samples, so that the page opens on
// a chart and can tell which rules refuse now.
package ui

import (
	"cmp"
	"context"
	"embed"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

//go:embed assets
var assets embed.FS

// Defaults of the Options fields left zero: history of 5 minutes at 5 s.
const (
	DefaultInterval      = time.Second
	DefaultHistoryStep   = 5 * time.Second
	DefaultHistoryLength = 60
)

// hotCounters is how many hot counters the page shows per rule.
const hotCounters = 5

// refusingSteps is how many history steps "refusing now" looks back.
const refusingSteps = 3

// Options configures the page. Zero values take the defaults.
type Options struct {
	// Rules returns the rules in force and RuleStatus the state of their
	// loads (rules.Watcher's Current and Status).
	Rules      func() *rules.Set
	RuleStatus func() rules.Status
	// Gatherer is the registry /metrics serves; the page's figures are
	// read from it.
	Gatherer prometheus.Gatherer
	// Metrics supplies the hot counters and the series of rules named by
	// values; nil shows no hot counters.
	Metrics *rlsmetrics.Metrics
	// Store describes the limit store's health; nil shows none.
	Store func() health.Store
	// Values says whose request values the hot counters show; the zero
	// value shows none. Set rlsmetrics.HotAll only where whoever reaches
	// the page may see request values (cmd/server: the debug listener).
	Values rlsmetrics.HotValues
	// Interval is how often the page asks for a new snapshot.
	Interval time.Duration
	// HistoryStep is how often Run samples the counters, and
	// HistoryLength how many samples it keeps.
	HistoryStep   time.Duration
	HistoryLength int
}

// Handler serves the page under /ui/: /ui/ (the page), its assets, and
// /ui/api/snapshot (the figures as JSON; ?history=1 adds the samples Run
// keeps). /ui redirects to /ui/. It answers GET and HEAD only, and is
// safe for concurrent use.
type Handler struct {
	opts Options
	hist *history // shared with the handlers WithValues returns
}

// New returns the page's handler, or an *option.Error naming an option it
// refuses.
func New(opts Options) (*Handler, error) {
	if opts.Rules == nil || opts.RuleStatus == nil || opts.Gatherer == nil {
		return nil, &option.Error{Options: "ui.Options", Field: "Rules", Also: []string{"RuleStatus", "Gatherer"},
			Want: "are required"}
	}
	negative := func(field string, v any) error {
		return &option.Error{Options: "ui.Options", Field: field, Value: v, Want: "must not be negative"}
	}
	switch {
	case opts.Interval < 0:
		return nil, negative("Interval", opts.Interval)
	case opts.HistoryStep < 0:
		return nil, negative("HistoryStep", opts.HistoryStep)
	case opts.HistoryLength < 0:
		return nil, negative("HistoryLength", opts.HistoryLength)
	}
	opts.Interval = cmp.Or(opts.Interval, DefaultInterval)
	opts.HistoryStep = cmp.Or(opts.HistoryStep, DefaultHistoryStep)
	opts.HistoryLength = cmp.Or(opts.HistoryLength, DefaultHistoryLength)
	return &Handler{opts: opts, hist: &history{keep: opts.HistoryLength}}, nil
}

// WithValues returns a handler like h that shows the request values v
// lets through, sharing h's history: one Run feeds both.
func (h *Handler) WithValues(v rlsmetrics.HotValues) *Handler {
	h2 := *h
	h2.opts.Values = v
	return &h2
}

// Run samples the counters every HistoryStep, keeping the last
// HistoryLength samples, until ctx ends. Without it the page's charts
// start empty and the Refusing list counts since the process started.
func (h *Handler) Run(ctx context.Context) {
	t := time.NewTicker(h.opts.HistoryStep)
	defer t.Stop()
	for {
		h.sample(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// contentPolicy lets the page load only its own files and talk only to its
// own server: values from requests are shown as text, and even a mistake
// that put one in markup could neither run nor send anything.
const contentPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// ServeHTTP serves the page, its assets and the snapshot.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the page is read-only: GET or HEAD", http.StatusMethodNotAllowed)
		return
	}
	hd := w.Header()
	hd.Set("Content-Security-Policy", contentPolicy)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	p := path.Clean(r.URL.Path)
	switch {
	case r.URL.Path == "/ui":
		http.Redirect(w, r, "ui/", http.StatusMovedPermanently)
	case p == "/ui/api/snapshot":
		h.serveSnapshot(w, r)
	case p == "/ui":
		http.ServeFileFS(w, r, assets, "assets/index.html")
	case strings.HasPrefix(p, "/ui/"):
		// ServeFileFS redirects /ui/index.html to ./, which is /ui/.
		http.ServeFileFS(w, r, assets, "assets"+strings.TrimPrefix(p, "/ui"))
	default:
		http.NotFound(w, r)
	}
}
