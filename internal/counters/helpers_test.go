package counters_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/internal/harness/rlstest"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// parseRules compiles one rule file, refusing what supports refuses.
func parseRules(t *testing.T, yaml string, supports func(limit.Spec) error) *rules.Set {
	t.Helper()
	set, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(yaml)}, rules.Options{Supports: supports})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// fixture is the endpoints over one store, served on loopback, with the
// service deciding real requests on the same store.
type fixture struct {
	url  string
	svc  *envoy.Service
	reg  *prometheus.Registry
	logs *testlog.Buffer
}

// newFixture serves the endpoints for set over lim and r.
func newFixture(t *testing.T, set *rules.Set, lim limit.Limiter, r counters.Resetter) *fixture {
	t.Helper()
	f := &fixture{reg: prometheus.NewRegistry(), logs: &testlog.Buffer{}}
	h, err := counters.New(counters.Options{Rules: func() *rules.Set { return set }, Limiter: lim, Resetter: r,
		Logger: slog.New(slog.NewTextHandler(f.logs, nil)), Registerer: f.reg})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	f.url = srv.URL
	// A generous store deadline: a slow moment of a shared machine must
	// not turn a request into the failure policy's answer.
	if f.svc, err = envoy.New(func() *rules.Set { return set }, lim, envoy.Options{}); err != nil {
		t.Fatal(err)
	}
	return f
}

// decide sends a request of one descriptor (key, value pairs) to the
// service and returns its overall code.
func (f *fixture) decide(t *testing.T, domain string, kv ...string) pb.RateLimitResponse_Code {
	t.Helper()
	return f.charge(t, nil, domain, kv...)
}

// charge is decide with the descriptor's own hits_addend when not nil:
// usage reported after the fact, as Envoy charges it at stream done.
func (f *fixture) charge(t *testing.T, hits *uint64, domain string, kv ...string) pb.RateLimitResponse_Code {
	t.Helper()
	d := rlstest.Desc(kv...)
	if hits != nil {
		d.HitsAddend = wrapperspb.UInt64(*hits)
	}
	resp, err := f.svc.ShouldRateLimit(context.Background(), rlstest.Request(domain, d))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range resp.GetStatuses() {
		if s.GetCode() == pb.RateLimitResponse_UNKNOWN {
			t.Fatalf("a status UNKNOWN: the store failed (%v)", resp)
		}
	}
	return resp.GetOverallCode()
}

// call sends method to path?query and returns the status and body.
func (f *fixture) call(t *testing.T, method, pathQuery string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, f.url+pathQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// answer calls method on path?query, expects 200, and decodes the answer.
func (f *fixture) answer(t *testing.T, method, pathQuery string) counters.Answer {
	t.Helper()
	code, body := f.call(t, method, pathQuery)
	if code != http.StatusOK {
		t.Fatalf("%s %s: %d %s", method, pathQuery, code, body)
	}
	var a counters.Answer
	if err := json.Unmarshal([]byte(body), &a); err != nil {
		t.Fatalf("%s %s: %v in %s", method, pathQuery, err, body)
	}
	return a
}

// resets is floodgate_counter_resets_total for domain and rule.
func (f *fixture) resets(domain, rule string) float64 {
	mfs, _ := f.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "floodgate_counter_resets_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["domain"] == domain && labels["rule"] == rule {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// endpoints are the two endpoints with their methods.
var endpoints = []struct{ method, path string }{{http.MethodGet, counters.Path}, {http.MethodPost, counters.ResetPath}}

// lines returns the log lines holding every one of parts.
func lines(logs string, parts ...string) []string {
	var out []string
	for _, l := range strings.Split(logs, "\n") {
		all := l != ""
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}
