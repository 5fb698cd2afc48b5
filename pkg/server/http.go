package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

func (s *Server) httpHandler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthcheck", s.healthcheck)
	mux.HandleFunc("/json", s.json)
	mux.HandleFunc("/rlconfig", s.rlconfig)
	if gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	}
	return mux
}

func (s *Server) debugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	// The reference server lists its rules on the debug port.
	mux.HandleFunc("/rlconfig", s.rlconfig)
	return mux
}

// healthcheck answers 200 "OK" while serving, 500 once shutdown began (or,
// with Options.HealthRequiresStore, while the store is unhealthy).
func (s *Server) healthcheck(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !s.Serving() {
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, "NOT_SERVING\n")
		return
	}
	io.WriteString(w, "OK")
}

// json decides a RateLimitRequest given as protojson: 200 with the
// response when OK, 429 when OVER_LIMIT, 400 with the reason for a bad
// request, 503 when the store failed and the policy says unavailable.
func (s *Server) json(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a RateLimitRequest as JSON", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(s.opts.MaxMessageBytes)))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		http.Error(w, "reading the body: "+err.Error(), code)
		return
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		http.Error(w, "invalid RateLimitRequest: "+err.Error(), http.StatusBadRequest)
		return
	}
	resp, err := s.svc.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		code := http.StatusInternalServerError
		switch status.Code(err) {
		case codes.InvalidArgument:
			code = http.StatusBadRequest
		case codes.Unavailable:
			code = http.StatusServiceUnavailable
		}
		http.Error(w, status.Convert(err).Message(), code)
		return
	}
	out, err := protojson.Marshal(resp)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// rlconfig lists the loaded rules, one line per limit, after the state of
// the loads (version, load time, last refused reload).
func (s *Server) rlconfig(w http.ResponseWriter, _ *http.Request) {
	st := s.rules.Status()
	set := s.rules.Current()
	var b strings.Builder
	fmt.Fprintf(&b, "version: %d\n", st.Version)
	fmt.Fprintf(&b, "loaded_at: %s\n", st.LoadedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(&b, "reloads: %d\nfailures: %d\n", st.Reloads, st.Failures)
	if st.LastError != nil {
		fmt.Fprintf(&b, "last_error_at: %s\n", st.LastErrorAt.UTC().Format(time.RFC3339Nano))
		var lines []string
		for _, l := range strings.Split(st.LastError.Error(), "\n") {
			lines = append(lines, "  "+l)
		}
		fmt.Fprintf(&b, "last_error: |\n%s\n", strings.Join(lines, "\n"))
	} else {
		b.WriteString("last_error: none\n")
	}
	if s.opts.Store != nil {
		h := s.opts.Store()
		state := "unhealthy"
		if h.Healthy {
			state = "healthy"
		}
		fmt.Fprintf(&b, "store: %s %s (%s)\n", h.Name, state, h.Detail)
	}
	for _, wn := range set.Warnings() {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	b.WriteByte('\n')
	for _, r := range set.Rules() {
		flags := ""
		for _, f := range []struct {
			on   bool
			name string
		}{{r.ShadowMode, "shadow_mode"}, {r.QuotaMode, "quota_mode"}, {r.DetailedMetric, "detailed_metric"}} {
			if f.on {
				flags += " " + f.name
			}
		}
		if r.FailureMode != 0 {
			flags += " failure_mode=" + r.FailureMode.String()
		}
		if len(r.Limits) == 0 {
			fmt.Fprintf(&b, "%s: no limit%s (%v)\n", r.Path, flags, r.Pos)
			continue
		}
		for _, l := range r.Limits {
			repl := ""
			if len(l.Replaces) > 0 {
				repl = " replaces=" + strings.Join(l.Replaces, ",")
			}
			fmt.Fprintf(&b, "%s: %s%s%s (%v)\n", r.Path, l.Describe(), repl, flags, l.Pos)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, b.String())
}
