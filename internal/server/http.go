package server

import (
	"expvar"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate/floodgate/internal/health"
	"github.com/floodgate/floodgate/pkg/rules"
)

// httpHandler serves the HTTP listener: json answers /json
// (envoy.Codec.JSONHandler).
func (s *Server) httpHandler(gatherer prometheus.Gatherer, json http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", s.healthcheck)
	mux.Handle("/json", json)
	mux.HandleFunc("/rlconfig", s.rlconfig)
	if gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	if s.opts.UI != nil {
		mux.Handle("/ui", s.opts.UI)
		mux.Handle("/ui/", s.opts.UI)
	}
	if s.opts.Counters != nil {
		mux.HandleFunc("/counters", s.countersRefused)
		mux.HandleFunc("/counters/", s.countersRefused)
	}
	return mux
}

// countersRefused answers /counters on the HTTP listener: 403, naming
// the debug listener that serves it.
func (s *Server) countersRefused(w http.ResponseWriter, _ *http.Request) {
	where := "the debug listener is off (-debug-addr, DEBUG_HOST/DEBUG_PORT)"
	if a := s.Addrs().Debug; a != nil {
		where = "the debug listener is on " + a.String() + " (-debug-addr, DEBUG_HOST/DEBUG_PORT)"
	}
	http.Error(w, "/counters is served on the debug listener only, not on this public HTTP listener: resetting a counter lifts a limit; "+where,
		http.StatusForbidden)
}

// debugEndpoint is an endpoint of the debug listener, listed with its help
// by the index at /, as the reference server's debug port does.
type debugEndpoint struct {
	path, help string
	handler    http.Handler
}

func (s *Server) debugHandler() http.Handler {
	// By path, as the index lists them; those Options leave nil drop out.
	eps := slices.DeleteFunc([]debugEndpoint{
		{"/counters", "GET ?domain=d&key=value...: every limit of a descriptor with its counter's used, remaining and reset (JSON)", s.opts.Counters},
		{"/counters/reset", "POST ?domain=d&key=value...: reset those counters (logged with the peer, counted in floodgate_counter_resets_total)", s.opts.Counters},
		{"/debug/pprof/", "root of various pprof endpoints. hit for help.", http.HandlerFunc(pprof.Index)},
		{"/debug/pprof/cmdline", "the command line", http.HandlerFunc(pprof.Cmdline)},
		{"/debug/pprof/profile", "CPU profiling endpoint", http.HandlerFunc(pprof.Profile)},
		{"/debug/pprof/symbol", "symbol lookup", http.HandlerFunc(pprof.Symbol)},
		{"/debug/pprof/trace", "trace endpoint", http.HandlerFunc(pprof.Trace)},
		// The reference server lists its rules on the debug port.
		{"/rlconfig", "print out the currently loaded configuration for debugging", http.HandlerFunc(s.rlconfig)},
		{"/stats", "print out stats", http.HandlerFunc(stats)},
		{"/ui/", "the live page, with the values of detailed_metric and value_to_metric rules", s.opts.DebugUI},
	}, func(e debugEndpoint) bool { return e.handler == nil })
	mux := http.NewServeMux()
	for _, e := range eps {
		mux.Handle(e.path, e.handler)
	}
	if s.opts.DebugUI != nil {
		mux.Handle("/ui", s.opts.DebugUI) // and /ui/, an endpoint above
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, e := range eps {
			fmt.Fprintf(w, "%s: %s\n", e.path, e.help)
		}
	})
	return mux
}

// stats writes the process's expvar variables, "name: value" a line, as
// the reference server's /stats does.
func stats(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	expvar.Do(func(kv expvar.KeyValue) {
		fmt.Fprintf(w, "%s: %s\n", kv.Key, kv.Value)
	})
}

// healthcheck answers 200 "OK" while serving, 500 "NOT_SERVING" when not.
func (s *Server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.Serving() {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "NOT_SERVING\n")
		return
	}
	io.WriteString(w, "OK")
}

// refuseOverrides refuses a /json request carrying a limit override
// (Options.JSONOverrides).
func refuseOverrides(req *pb.RateLimitRequest) error {
	hasLimit := func(d *rlv3.RateLimitDescriptor) bool { return d.GetLimit() != nil }
	if i := slices.IndexFunc(req.GetDescriptors(), hasLimit); i >= 0 {
		return fmt.Errorf("descriptors[%d].limit: limit overrides are refused on /json (-json-overrides, FLOODGATE_JSON_OVERRIDES, accepts them)", i)
	}
	return nil
}

// rlconfig describes the server: the state of the rule loads, health with
// the reason when it is NOT_SERVING, the store, the rules' warnings, then
// one line per limit.
func (s *Server) rlconfig(w http.ResponseWriter, _ *http.Request) {
	set := s.current()
	var b strings.Builder
	writeLoads(&b, s.status())
	if why := s.notServing(); why != "" {
		fmt.Fprintf(&b, "health: NOT_SERVING: %s\n", why)
	} else {
		b.WriteString("health: SERVING\n")
	}
	if s.opts.Store != nil {
		b.WriteString(describeStore(s.opts.Store()) + "\n")
	}
	for _, wn := range set.Warnings() {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	b.WriteByte('\n')
	writeLimits(&b, set.Rules())
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, b.String())
}

// writeLoads writes /rlconfig's lines on the rule loads: version, load
// time, counts, origin (xDS's version_info), source and the last refused
// reload.
func writeLoads(b *strings.Builder, st rules.Status) {
	fmt.Fprintf(b, "version: %d\n", st.Version)
	fmt.Fprintf(b, "loaded_at: %s\n", st.LoadedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(b, "reloads: %d\nfailures: %d\n", st.Reloads, st.Failures)
	if st.Origin != "" {
		fmt.Fprintf(b, "origin: %s\n", st.Origin)
	}
	if st.Source != "" {
		fmt.Fprintf(b, "source: %s\n", st.Source)
	}
	if st.LastError == nil {
		b.WriteString("last_error: none\n")
		return
	}
	fmt.Fprintf(b, "last_error_at: %s\n", st.LastErrorAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(b, "last_error: |\n  %s\n", strings.ReplaceAll(st.LastError.Error(), "\n", "\n  "))
}

// writeLimits writes one line per limit of rs, with the rule's flags.
func writeLimits(b *strings.Builder, rs []*rules.Rule) {
	if len(rs) == 0 {
		b.WriteString("no rules: every request is allowed\n")
	}
	for _, r := range rs {
		flags := ""
		for _, f := range r.Flags() {
			// /rlconfig has never listed value_to_metric, and scripts read it.
			if f != "value_to_metric" {
				flags += ", " + f
			}
		}
		if len(r.Limits) == 0 {
			fmt.Fprintf(b, "%s: no limit%s (%v)\n", r.Path, flags, r.Pos)
			continue
		}
		for _, l := range r.Limits {
			fmt.Fprintf(b, "%s: %s%s (%v)\n", r.Path, l.Describe(), flags, l.Pos)
		}
	}
}

// describeStore is /rlconfig's store line: "store: redis healthy (breaker
// closed)", "store: redis unhealthy, not reached since start (...)".
func describeStore(h health.Store) string {
	line := "store: " + h.Name + " healthy"
	if !h.Healthy {
		line = "store: " + h.Name + " unhealthy"
	}
	if !h.Reached {
		line += ", not reached since start"
	}
	if h.Detail != "" {
		line += " (" + h.Detail + ")"
	}
	return line
}
