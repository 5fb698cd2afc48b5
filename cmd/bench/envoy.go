package main

// The -envoy mode: the latency floodgate adds to a request through Envoy.
//
// For each store it starts a floodgate and an Envoy running the shipped
// bootstrap (examples/envoy.yaml) in front of a backend in this process.
// That Envoy has two listeners: the shipped one, whose ratelimit filter asks
// floodgate before every request, and a copy of it without that filter, the
// baseline. Both route to the same backend over the same Envoy workers, so
// the filter and the call to floodgate are the only difference. Rounds
// alternate the two (and the order within a round), so that the rest of the
// machine's load falls on both alike.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/harness/envoytest"
)

// Names in the shipped bootstrap that the bench relies on.
const (
	// envoyListener is the listener whose ratelimit filter asks floodgate.
	envoyListener = "http"
	// baselineListener is the copy of envoyListener without the filter.
	baselineListener = "http-nofilter"
	rateLimitFilter  = "envoy.filters.http.ratelimit"
	// quotaFilter is RLQS's filter: Envoy decides locally from floodgate's
	// assignments, and reports every 5 s.
	quotaFilter = "envoy.filters.http.rate_limit_quota"
	hcmFilter   = "envoy.filters.network.http_connection_manager"
	// backendCluster and floodgateCluster are the clusters pointed at the
	// bench's backend and at the floodgate it starts.
	backendCluster   = "backend"
	floodgateCluster = "floodgate"
)

// The stores -envoy compares.
const (
	storeRedis  = "redis"
	storeMemory = "memory"
)

// Defaults of the -envoy mode where the gRPC mode's do not fit.
const (
	// envoyDefaultRate is -rate when it is 0: the question is latency at a
	// load the machine carries easily, not throughput.
	envoyDefaultRate = 500
	// envoyDefaultConfig is -config: the rules examples/envoy.yaml is
	// written for (domain demo).
	envoyDefaultConfig = "config"
)

// benchClientNet is where the client addresses come from: 198.18.0.0/15,
// reserved for benchmarks (RFC 2544), so that no address is one the demo
// rules single out (10.0.0.10 is unlimited, 192.0.2.66 blocked).
const (
	benchClientNet  = "198.18.0.0"
	maxBenchClients = 1<<17 - 1
)

// clientAddrs returns n distinct addresses of benchClientNet, one per
// client the load plays through X-Forwarded-For.
func clientAddrs(n int) []string {
	base := net.ParseIP(benchClientNet).To4()
	out := make([]string, n)
	for i := range out {
		v := uint32(base[0])<<24 | uint32(base[1])<<16 + uint32(i+1)
		out[i] = net.IPv4(byte(v>>24), byte(v>>16), byte(v>>8), byte(v)).String()
	}
	return out
}

// envoyVersion returns what `envoy --version` says after "version: ", e.g.
// 9e55…/1.40.0/Clean/RELEASE/BoringSSL.
func envoyVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w\n%s", bin, err, out)
	}
	s := strings.TrimSpace(string(out))
	if _, v, ok := strings.Cut(s, "version: "); ok {
		return v, nil
	}
	return s, nil
}

// envoyBootstrap turns the shipped bootstrap into the one the bench runs.
// envoytest.Rewrite puts the admin and the listeners on the loopback (port
// 0: Envoy picks, and envoytest reads the ports back) and points the
// backend and floodgate clusters at the given addresses; then the listener
// envoyListener gets a twin, baselineListener, the same but for the
// ratelimit filter and its stat prefix. Nothing else changes.
func envoyBootstrap(shipped []byte, backend, floodgate string) (conf []byte, filter string, err error) {
	conf, err = envoytest.Rewrite(shipped, map[string][]string{
		backendCluster:   {backend},
		floodgateCluster: {floodgate},
	})
	if err != nil {
		return nil, "", err
	}
	var root map[string]any
	if err := yaml.Unmarshal(conf, &root); err != nil {
		return nil, "", err
	}
	static, _ := root["static_resources"].(map[string]any)
	listeners, _ := static["listeners"].([]any)
	var with map[string]any
	for _, l := range listeners {
		if lm, _ := l.(map[string]any); lm["name"] == envoyListener {
			with = lm
		}
	}
	if with == nil {
		return nil, "", fmt.Errorf("bootstrap: no listener %q", envoyListener)
	}
	// A deep copy, through YAML: the maps of the two listeners must not be
	// shared when one loses its filter.
	b, err := yaml.Marshal(with)
	if err != nil {
		return nil, "", err
	}
	var without map[string]any
	if err := yaml.Unmarshal(b, &without); err != nil {
		return nil, "", err
	}
	if filter = withoutRateLimit(without); filter == "" {
		return nil, "", fmt.Errorf("bootstrap: listener %q has no %s or %s filter: there is nothing to compare", envoyListener, rateLimitFilter, quotaFilter)
	}
	without["name"] = baselineListener
	static["listeners"] = append(listeners, without)
	conf, err = yaml.Marshal(root)
	return conf, filter, err
}

// withoutRateLimit removes the ratelimit and rate_limit_quota filters from
// every HTTP connection manager of a listener, and gives each a stat prefix
// of its own so that the two listeners' statistics stay apart. It returns
// the name of the last filter it removed, "" for none.
func withoutRateLimit(listener map[string]any) (removed string) {
	chains, _ := listener["filter_chains"].([]any)
	for _, c := range chains {
		cm, _ := c.(map[string]any)
		filters, _ := cm["filters"].([]any)
		for _, f := range filters {
			fm, _ := f.(map[string]any)
			hcm, _ := fm["typed_config"].(map[string]any)
			if fm["name"] != hcmFilter || hcm == nil {
				continue
			}
			httpFilters, _ := hcm["http_filters"].([]any)
			kept := httpFilters[:0:0]
			for _, hf := range httpFilters {
				if hm, _ := hf.(map[string]any); hm["name"] == rateLimitFilter || hm["name"] == quotaFilter {
					removed = hm["name"].(string)
					continue
				}
				kept = append(kept, hf)
			}
			hcm["http_filters"] = kept
			if p, ok := hcm["stat_prefix"].(string); ok {
				hcm["stat_prefix"] = p + "_nofilter"
			}
		}
	}
	return removed
}

// envoyProcess is an Envoy the bench started.
type envoyProcess struct {
	*envoytest.Envoy
	// with and without are host:port of envoyListener and baselineListener.
	with, without string
	// filter is the filter compared: rateLimitFilter or quotaFilter.
	filter string
}

// startEnvoy writes the bench's bootstrap for the shipped one into dir and
// starts Envoy on it with concurrency workers, and returns once its admin
// /ready answers LIVE (Envoy has initialized its clusters, including the
// first health check of floodgate, and opened its listeners).
func startEnvoy(ctx context.Context, shipped []byte, backend, floodgate, dir string, concurrency int) (*envoyProcess, error) {
	conf, filter, err := envoyBootstrap(shipped, backend, floodgate)
	if err != nil {
		return nil, err
	}
	e, err := envoytest.Run(ctx, envoytest.Config{Bootstrap: conf, Concurrency: concurrency, LogLevel: "warn"}, dir)
	if err != nil {
		return nil, err
	}
	ls := e.Listeners()
	return &envoyProcess{Envoy: e, with: ls[envoyListener], without: ls[baselineListener], filter: filter}, nil
}

// rateLimitStats reads the ratelimit filter's counters from the admin
// (cluster.backend.ratelimit.ok, over_limit, error, failure_mode_allowed),
// by their last name part.
func (e *envoyProcess) rateLimitStats(ctx context.Context) (map[string]int64, error) {
	prefix := "cluster." + backendCluster + ".ratelimit."
	u := "http://" + e.Admin + "/stats?format=json&filter=" + url.QueryEscape("^"+strings.ReplaceAll(prefix, ".", `\.`))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin /stats: %s: %s", resp.Status, body)
	}
	return parseStatsJSON(body, prefix)
}

// parseStatsJSON reads the counters and gauges of the admin's /stats JSON
// whose names start with prefix, by the rest of their names. Histograms
// have no single value and are left out.
func parseStatsJSON(body []byte, prefix string) (map[string]int64, error) {
	var st struct {
		Stats []struct {
			Name  string          `json:"name"`
			Value json.RawMessage `json:"value"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("envoy admin /stats: %w", err)
	}
	out := map[string]int64{}
	for _, s := range st.Stats {
		name, ok := strings.CutPrefix(s.Name, prefix)
		if !ok || s.Value == nil {
			continue
		}
		var v int64
		if err := json.Unmarshal(s.Value, &v); err != nil {
			return nil, fmt.Errorf("envoy admin /stats: %s: %w", s.Name, err)
		}
		out[name] = v
	}
	return out, nil
}

// startBackend serves the upstream Envoy routes to: a 200 with a short
// body for every request, as cheap as a backend gets, so that the figures
// are Envoy's and floodgate's.
func startBackend() (addr string, stop func(), err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go srv.Serve(l)
	return l.Addr().String(), func() { srv.Close() }, nil
}

// httpLoad sends GET requests to one Envoy listener.
type httpLoad struct {
	client      *http.Client
	clients     []string // X-Forwarded-For values, taken in turn
	concurrency int
	rate        float64
	// header, when set, carries the client address too (-envoy-header).
	header string
}

// newHTTPClient returns a client keeping one connection per caller alive,
// so that the runs measure requests, not connection set-ups.
func newHTTPClient(concurrency int) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			MaxIdleConnsPerHost: concurrency,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
		Timeout: 10 * time.Second,
	}
}

// httpRun is what the callers saw during one run through Envoy.
type httpRun struct {
	loadResult
	// SendLags holds, for every request, how late it left after its
	// scheduled time (ns, unsorted).
	SendLags []int64
}

// run sends GET / for d, closed loop when h.rate is 0 and otherwise on
// the open-loop schedule (see drive); caller i sends to addrs[i%len(addrs)],
// so that several Envoys share the callers evenly. 200 counts as OK and 429
// as over the limit; any other status or a failed request is an error.
//
// Latency runs from the moment a request leaves to the end of its body,
// not from its scheduled time as in the gRPC mode's open loop: Go's timers
// wake a sleeping caller late (docs/benchmarks.md says how late), which
// would add the same noise to both sides of the comparison. The lateness
// is kept apart, in SendLags, so that a run whose callers all waited on
// slow answers, and so sent late, still shows.
func (h *httpLoad) run(ctx context.Context, addrs []string, d time.Duration) httpRun {
	targets := make([]string, len(addrs))
	for i, a := range addrs {
		targets[i] = "http://" + a + "/"
	}
	var next atomic.Uint64
	tallies := make([]*tally, h.concurrency)
	lags := make([][]int64, h.concurrency)
	for i := range tallies {
		tallies[i] = &tally{samples: make([]int64, 0, 1024)}
		lags[i] = make([]int64, 0, 1024)
	}
	elapsed := drive(ctx, h.concurrency, h.rate, d, func(i int, at time.Time) {
		t, target := tallies[i], targets[i%len(targets)]
		since := time.Now()
		lags[i] = append(lags[i], int64(since.Sub(at)))
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			t.record(since, failed, err)
			return
		}
		client := h.clients[(next.Add(1)-1)%uint64(len(h.clients))]
		req.Header.Set("X-Forwarded-For", client)
		if h.header != "" {
			req.Header.Set(h.header, client)
		}
		req.Header.Set("User-Agent", "floodgate-bench")
		resp, err := h.client.Do(req)
		if err != nil {
			t.record(since, failed, err)
			return
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			t.record(since, failed, err)
		case resp.StatusCode == http.StatusOK:
			t.record(since, answeredOK, nil)
		case resp.StatusCode == http.StatusTooManyRequests:
			t.record(since, answeredOverLimit, nil)
		default:
			t.record(since, failed, fmt.Errorf("GET %s: %s", target, resp.Status))
		}
	})
	return httpRun{loadResult: collect(tallies, elapsed), SendLags: slices.Concat(lags...)}
}
