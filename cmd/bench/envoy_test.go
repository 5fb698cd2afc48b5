package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestEnvoySmoke runs the -envoy mode briefly against the real Envoy, both
// stores: every request answered 200, every request through the filter
// decided by floodgate, and the added latency computed from the two cases.
// With -tags processes it fails, not skips, without Envoy: the mode is part
// of the tool. It asserts no performance figure.
func TestEnvoySmoke(t *testing.T) {
	harness.Require(t, "envoy")
	harness.Require(t, "redis-server")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const rate, rounds = 200, 2
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{
		"-envoy", "-envoy-config", "../../examples/envoy.yaml", "-config", "../../config",
		"-rate", "200", "-rounds", "2", "-duration", "500ms", "-warmup", "200ms", "-concurrency", "8", "-keys", "500", "-json",
	}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
	}
	var rep envoyReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("output is not a report: %v\n%s", err, stdout.String())
	}
	if rep.Rounds != rounds || rep.RatePerSec != rate || rep.ClientAddresses != 500 || !strings.Contains(rep.Envoy, ".") {
		t.Errorf("report header %+v, want 2 rounds at 200/s from 500 addresses and Envoy's version", rep)
	}
	if len(rep.Stores) != 2 || rep.Stores[0].Store != storeRedis || rep.Stores[1].Store != storeMemory {
		t.Fatalf("stores %+v, want redis then memory", rep.Stores)
	}
	// Open loop at 200/s for 0.5 s sends exactly 100 requests a run.
	const want = rate / 2 * rounds
	for _, s := range rep.Stores {
		for name, c := range map[string]envoyCaseResult{"with": s.With, "without": s.Without} {
			if c.Requests != want || c.OK != want {
				t.Errorf("%s, %s the filter: %d requests, %d answered 200, want %d and %d (first error %q)", s.Store, name, c.Requests, c.OK, want, want, c.FirstError)
			}
			l := c.Latency
			if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
				t.Errorf("%s, %s the filter: percentiles not positive and ascending: %+v", s.Store, name, l)
			}
			if lag := c.SendLag; lag.P50 < 0 || lag.P50 > lag.P99 || lag.P99 > lag.Max || lag.Max <= 0 {
				t.Errorf("%s, %s the filter: send lag %+v, want percentiles ascending and a positive max", s.Store, name, lag)
			}
		}
		if s.RateLimit["ok"] != want {
			t.Errorf("%s: Envoy's ratelimit counters %v, want ok %d: every request through the filter decided", s.Store, s.RateLimit, want)
		}
		if s.Added != s.With.Latency.minus(s.Without.Latency) || len(s.AddedPerRound) != rounds {
			t.Errorf("%s: added %+v over %d rounds, want with minus without over %d", s.Store, s.Added, len(s.AddedPerRound), rounds)
		}
		if len(s.Notes) > 0 {
			t.Errorf("%s: notes %q", s.Store, s.Notes)
		}
	}
}

// TestEnvoyMissing: without an Envoy the mode fails at once with the
// install hint, before it starts anything.
func TestEnvoyMissing(t *testing.T) {
	t.Setenv("ENVOY_BIN", "/nonexistent/envoy")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"-envoy"}, &bytes.Buffer{}, &stderr); code != 1 || !strings.Contains(stderr.String(), harness.InstallHint("envoy")) {
		t.Errorf("exit code %d, stderr %q; want 1 and the install hint", code, stderr.String())
	}
}

// TestEnvoyDefaults: -envoy measures the demo rules at a fixed rate unless
// told otherwise, for both stores.
func TestEnvoyDefaults(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		rate   float64
		config string
		stores string
	}{
		{[]string{"-envoy"}, envoyDefaultRate, envoyDefaultConfig, "redis,memory"},
		{[]string{"-envoy", "-rate", "1000", "-config", "rules", "-envoy-stores", "memory,redis"}, 1000, "rules", "memory,redis"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseFlags(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if o.envoyRate() != tc.rate || o.config != tc.config || strings.Join(o.envoyStores, ",") != tc.stores {
				t.Errorf("rate %v, config %q, stores %q; want %v, %q, %q", o.envoyRate(), o.config, o.envoyStores, tc.rate, tc.config, tc.stores)
			}
		})
	}
}

func TestEnvoyBootstrap(t *testing.T) {
	shipped, err := os.ReadFile("../../examples/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	quota, err := os.ReadFile("../../examples/envoy-rlqs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Every address on the loopback, at port 0: Envoy picks the ports,
	// and the harness reads them back.
	const anyPort = "127.0.0.1:0"
	noFilter := strings.ReplaceAll(string(shipped), "name: "+rateLimitFilter, "name: envoy.filters.http.other")
	for _, tc := range []struct {
		name      string
		bootstrap string
		wantErr   string // "" for success
		// filter is the filter compared, and prefix and filters the
		// stat prefix and filter count of the listener with it.
		filter  string
		prefix  string
		filters int
	}{
		{"shipped example", string(shipped), "", rateLimitFilter, "demo", 3},
		{"RLQS example", string(quota), "", quotaFilter, "demo", 2},
		{"no listener http", strings.Replace(string(shipped), "- name: "+envoyListener+"\n", "- name: web\n", 1), `no listener "http"`, "", "", 0},
		{"no ratelimit filter", noFilter, "nothing to compare", "", "", 0},
		{"off-loopback cluster left", strings.Replace(string(shipped), "- name: "+floodgateCluster+"\n", "- name: rls\n", 1), "off the loopback", "", "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf, filter, err := envoyBootstrap([]byte(tc.bootstrap), "127.0.0.1:7001", "127.0.0.1:7002")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if filter != tc.filter {
				t.Errorf("filter compared %q, want %q", filter, tc.filter)
			}
			got := bootstrapListeners(t, conf)
			want := map[string]listenerSummary{
				"(admin)":        {addr: anyPort},
				envoyListener:    {addr: anyPort, statPrefix: tc.prefix, filters: tc.filters, rateLimit: true},
				baselineListener: {addr: anyPort, statPrefix: tc.prefix + "_nofilter", filters: tc.filters - 1},
			}
			if len(got) != len(want) {
				t.Errorf("listeners %+v, want %+v", got, want)
			}
			for name, w := range want {
				if got[name] != w {
					t.Errorf("listener %s: %+v, want %+v", name, got[name], w)
				}
			}
			if strings.Contains(string(conf), "address: "+backendCluster) || !strings.Contains(string(conf), "port_value: 7001") {
				t.Errorf("backend cluster not pointed at 127.0.0.1:7001:\n%s", conf)
			}
		})
	}
}

// listenerSummary is what TestEnvoyBootstrap checks of a listener, and of
// the admin's address.
type listenerSummary struct {
	addr, statPrefix string
	filters          int
	rateLimit        bool
}

func bootstrapListeners(t *testing.T, conf []byte) map[string]listenerSummary {
	t.Helper()
	type address struct {
		SocketAddress struct {
			Address   string `yaml:"address"`
			PortValue int    `yaml:"port_value"`
		} `yaml:"socket_address"`
	}
	hostPort := func(a address) string {
		return net.JoinHostPort(a.SocketAddress.Address, strconv.Itoa(a.SocketAddress.PortValue))
	}
	var root struct {
		Admin struct {
			Address address `yaml:"address"`
		} `yaml:"admin"`
		StaticResources struct {
			Listeners []struct {
				Name         string  `yaml:"name"`
				Address      address `yaml:"address"`
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							StatPrefix  string `yaml:"stat_prefix"`
							HTTPFilters []struct {
								Name string `yaml:"name"`
							} `yaml:"http_filters"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(conf, &root); err != nil {
		t.Fatal(err)
	}
	out := map[string]listenerSummary{"(admin)": {addr: hostPort(root.Admin.Address)}}
	for _, l := range root.StaticResources.Listeners {
		s := listenerSummary{addr: hostPort(l.Address)}
		for _, fc := range l.FilterChains {
			for _, f := range fc.Filters {
				s.statPrefix = f.TypedConfig.StatPrefix
				for _, hf := range f.TypedConfig.HTTPFilters {
					s.filters++
					s.rateLimit = s.rateLimit || hf.Name == rateLimitFilter || hf.Name == quotaFilter
				}
			}
		}
		out[l.Name] = s
	}
	return out
}

func TestClientAddrs(t *testing.T) {
	for _, tc := range []struct {
		n           int
		first, last string
	}{
		{1, "198.18.0.1", "198.18.0.1"},
		{256, "198.18.0.1", "198.18.1.0"},
		{maxBenchClients, "198.18.0.1", "198.19.255.255"},
	} {
		got := clientAddrs(tc.n)
		seen := map[string]bool{}
		for _, a := range got {
			seen[a] = true
		}
		if len(got) != tc.n || len(seen) != tc.n || got[0] != tc.first || got[len(got)-1] != tc.last {
			t.Errorf("clientAddrs(%d): %d addresses, %d distinct, %s..%s; want %d distinct, %s..%s",
				tc.n, len(got), len(seen), got[0], got[len(got)-1], tc.n, tc.first, tc.last)
		}
	}
}

func TestParseStatsJSON(t *testing.T) {
	const prefix = "cluster.backend.ratelimit."
	for _, tc := range []struct {
		name, body string
		want       map[string]int64
		wantErr    bool
	}{
		{"counters", `{"stats":[{"name":"cluster.backend.ratelimit.ok","value":42},{"name":"cluster.backend.ratelimit.error","value":0},{"name":"cluster.other.x","value":1}]}`,
			map[string]int64{"ok": 42, "error": 0}, false},
		{"histograms left out", `{"stats":[{"histograms":{"supported_quantiles":[0.5]}},{"name":"cluster.backend.ratelimit.ok","value":1}]}`,
			map[string]int64{"ok": 1}, false},
		{"none", `{"stats":[]}`, map[string]int64{}, false},
		{"not JSON", `cluster.backend.ratelimit.ok: 1`, nil, true},
		{"not a number", `{"stats":[{"name":"cluster.backend.ratelimit.ok","value":"x"}]}`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatsJSON([]byte(tc.body), prefix)
			if (err != nil) != tc.wantErr || countersText(got) != countersText(tc.want) {
				t.Errorf("parseStatsJSON = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestEnvoyNotes(t *testing.T) {
	clean := envoyCaseResult{Requests: 100, OK: 100}
	for _, tc := range []struct {
		name      string
		r         envoyStoreResult
		wantNotes []string
	}{
		{"clean", envoyStoreResult{With: clean, Without: clean, RateLimit: map[string]int64{"ok": 100}}, nil},
		{"limited", envoyStoreResult{With: envoyCaseResult{Requests: 100, OK: 90, TooMany: 10}, Without: clean, RateLimit: map[string]int64{"ok": 90, "over_limit": 10}},
			[]string{"with the filter: 10 of 100 requests answered 429"}},
		{"failed without the filter", envoyStoreResult{With: clean, Without: envoyCaseResult{Requests: 100, OK: 99, Errors: 1, FirstError: "GET: 503"}, RateLimit: map[string]int64{"ok": 100}},
			[]string{"without the filter: 1 of 100 requests failed, e.g. GET: 503"}},
		{"undecided", envoyStoreResult{With: clean, Without: clean, RateLimit: map[string]int64{"ok": 97, "error": 3, "failure_mode_allowed": 3}},
			[]string{"floodgate decided 97 of the 100 requests through the filter (Envoy's ratelimit counters: error 3, failure_mode_allowed 3, ok 97)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := envoyNotes(tc.r, rateLimitFilter)
			if len(got) != len(tc.wantNotes) {
				t.Fatalf("notes %q, want %d starting %q", got, len(tc.wantNotes), tc.wantNotes)
			}
			for i, w := range tc.wantNotes {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("note %q, want it to start %q", got[i], w)
				}
			}
		})
	}
}

// TestWriteEnvoyText: the table docs/benchmarks.md records, with the
// added row computed from the two cases.
func TestWriteEnvoyText(t *testing.T) {
	c := func(p50, p99 float64) envoyCaseResult {
		return envoyCaseResult{Requests: 10, OK: 10, Latency: latencyMicros{P50: p50, P90: p50, P99: p99, P999: p99, Max: p99}, SendLag: latencyMicros{P99: 700}, EnvoyCPUMicrosPerRequest: 100}
	}
	s := envoyStoreResult{Store: storeRedis, With: c(1500, 3000), Without: c(1000, 2000), RateLimit: map[string]int64{"ok": 10}}
	s.Added = s.With.Latency.minus(s.Without.Latency)
	s.AddedPerRound = []latencyMicros{s.Added}
	var out bytes.Buffer
	writeEnvoyText(&out, &envoyReport{Envoy: "abc/1.40.0/Clean/RELEASE/BoringSSL", Filter: rateLimitFilter, RatePerSec: 500, Rounds: 1, DurationSec: 20, EnvoyConcurrency: 1, Stores: []envoyStoreResult{s}})
	for _, want := range []string{
		"Envoy 1.40.0, 1 worker(s), filter envoy.filters.http.ratelimit; GET / at 500/s",
		"| redis | without | 10 | 1.000 | 1.000 | 2.000 | 2.000 | 2.000 | 0 | 0.700 | 100.0 | - |",
		"| redis | with | 10 | 1.500 | 1.500 | 3.000 | 3.000 | 3.000 | 0 | 0.700 | 100.0 | 0.0 |",
		"| redis | **added** | | **+0.500** | +0.500 | **+1.000** |",
		"redis: added p50 / p99 ms by round: +0.500 / +1.000; Envoy's ratelimit counters: ok 10",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
