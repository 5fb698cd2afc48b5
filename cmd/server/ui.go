package main

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/ui"
	"github.com/floodgate/floodgate/pkg/envoy"
)

// uiPages are the live page's handlers for the HTTP and the debug
// listener; nil when -ui=false.
type uiPages struct{ http, debug http.Handler }

// newUI builds the live pages. The HTTP listener's hides every request
// value, as it is exposed like /json; the debug listener's shows the
// values of detailed_metric and value_to_metric rules, as it is on
// loopback unless -debug-addr (DEBUG_HOST) says otherwise, the same choice
// that guards pprof.
func newUI(on bool, w ruleSource, reg *prometheus.Registry, m *envoy.Metrics, store func() server.StoreHealth) (uiPages, error) {
	if !on {
		return uiPages{}, nil
	}
	var p uiPages
	for _, page := range []struct {
		dst        *http.Handler
		showValues bool
	}{{&p.http, false}, {&p.debug, true}} {
		h, err := ui.New(ui.Options{Rules: w, Gatherer: reg, Metrics: m, Store: store, ShowValues: page.showValues})
		if err != nil {
			return uiPages{}, fmt.Errorf("-ui: %w", err)
		}
		*page.dst = h
	}
	return p, nil
}
