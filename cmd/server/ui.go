package main

import (
	"context"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/internal/ui"
)

// uiPages are the live page's handlers for the HTTP and the debug
// listener, and run, which keeps their history; nil when -ui=false.
type uiPages struct {
	http, debug http.Handler
	run         func(context.Context)
}

// newUI builds the live pages, which share one history. The HTTP
// listener's shows the request values /metrics names (detailed_metric,
// value_to_metric); the debug listener's, on loopback like pprof, every
// rule's.
func newUI(on bool, w ruleSource, reg *prometheus.Registry, m *rlsmetrics.Metrics, store func() health.Store) (uiPages, error) {
	if !on {
		return uiPages{run: func(context.Context) {}}, nil
	}
	h, err := ui.New(ui.Options{Rules: w.Current, RuleStatus: w.Status, Gatherer: reg, Metrics: m, Store: store,
		Values: rlsmetrics.HotOptedIn})
	if err != nil {
		return uiPages{}, fmt.Errorf("-ui: %w", err)
	}
	return uiPages{http: h, debug: h.WithValues(rlsmetrics.HotAll), run: h.Run}, nil
}
