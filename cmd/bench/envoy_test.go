package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestEnvoySmoke runs the -envoy mode briefly against the real Envoy:
// open loop on both stores, closed loop through RLS and RLQS with one and
// two Envoys, and floodgate as a peer on the generated rules. Every
// request answered 200, every request through the ratelimit filter
// decided by the server, the added latency computed from the two cases,
// and the CPU of each part read. With -tags processes it fails, not
// skips, without Envoy: the mode is part of the tool. It asserts no
// performance figure.
func TestEnvoySmoke(t *testing.T) {
	harness.Require(t, "envoy")
	harness.Require(t, "redis-server")
	const rounds = 2
	common := []string{"-config", "../../config", "-rounds", "2", "-duration", "500ms", "-warmup", "200ms", "-concurrency", "8", "-json"}
	rls, rlqs := "../../examples/envoy.yaml", "../../examples/envoy-rlqs.yaml"
	for _, tc := range []struct {
		name string
		args []string
		// want lists the results in order, as name/filter/Envoys.
		want []string
		// perRun is the exact request count of a run (open loop at 200/s
		// for 0.5 s), 0 in closed loop: some.
		perRun int64
		// keys is -keys: in closed loop enough that no key reaches the
		// api_key rule's 5 per second, which RLQS paces per Envoy from
		// reports 5 s apart.
		keys int
	}{
		{"open loop, both stores", []string{"-envoy-config", rls, "-rate", "200"},
			[]string{"redis/RLS/1", "memory/RLS/1"}, 100, 500},
		{"closed loop, RLS and RLQS, 1 and 2 Envoys", []string{"-envoy-config", rls + "," + rlqs, "-envoy-header", "x-api-key", "-envoy-stores", "redis", "-rate", "0", "-envoys", "1,2"},
			[]string{"redis RLS/RLS/1", "redis RLS/RLS/2", "redis RLQS/RLQS/1", "redis RLQS/RLQS/2"}, 0, 50000},
		// The floor answers one status whatever the descriptors (two
		// here: remote_address and user_agent), which Envoy must take as
		// a decision; 400/s so that its CPU over the runs is several
		// ticks of /proc.
		{"floodgate and the gRPC floors as peers, generated rules", []string{"-envoy-config", rls, "-rate", "400", "-envoy-peers", "floodgate,floor,floor-redis"},
			[]string{"floodgate redis/RLS/1", "floor/RLS/1", "floor-redis/RLS/1"}, 200, 500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := append(slices.Clone(tc.args), append(common, "-keys", strconv.Itoa(tc.keys))...)
			if slices.Contains(args, "-envoy-peers") {
				args = slices.Delete(args, slices.Index(args, "-config"), slices.Index(args, "-config")+2)
			}
			var stdout, stderr bytes.Buffer
			if code := run(ctx, append([]string{"-envoy"}, args...), &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d\nstderr:\n%s", code, stderr.String())
			}
			var rep envoyReport
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("output is not a report: %v\n%s", err, stdout.String())
			}
			if rep.Rounds != rounds || rep.ClientAddresses != tc.keys || !strings.Contains(rep.Envoy, ".") {
				t.Errorf("report header %+v, want 2 rounds from %d addresses and Envoy's version", rep, tc.keys)
			}
			var got []string
			for _, s := range rep.Stores {
				got = append(got, fmt.Sprintf("%s/%s/%d", s.Name, filterLabel(s.Filter), s.Envoys))
				checkEnvoyResult(t, s, tc.perRun*rounds)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("results %q, want %q", got, tc.want)
			}
		})
	}
}

// checkEnvoyResult checks one result of TestEnvoySmoke: want requests per
// case (0: any positive number), all answered 200 and decided. RLQS may
// answer 429 under the limit: Envoy paces each bucket from floodgate's
// assignment, a token bucket of a quarter second's share, which a key's
// requests bunched closer than that exceed.
func checkEnvoyResult(t *testing.T, s envoyStoreResult, want int64) {
	t.Helper()
	for name, c := range map[string]envoyCaseResult{"with": s.With, "without": s.Without} {
		answered := c.OK
		if s.Filter == quotaFilter {
			answered += c.TooMany
		}
		if c.Requests == 0 || want > 0 && c.Requests != want || answered != c.Requests || c.PerSec <= 0 || len(c.PerSecByRound) != 2 || len(c.SendLagP99ByRound) != 2 {
			t.Errorf("%s, %s the filter: %d requests, %d answered 200 at %.0f/s, want %d (0: any), all 200 (first error %q)", s.Name, name, c.Requests, c.OK, c.PerSec, want, c.FirstError)
		}
		l := c.Latency
		if !(0 < l.P50 && l.P50 <= l.P90 && l.P90 <= l.P99 && l.P99 <= l.P999 && l.P999 <= l.Max) {
			t.Errorf("%s, %s the filter: percentiles not positive and ascending: %+v", s.Name, name, l)
		}
		if (c.RedisCPUMicrosPerRequest != nil) != (s.Store == storeRedis) || c.Cores.Envoy <= 0 || c.Cores.Bench <= 0 || c.Cores.Machine < c.Cores.Envoy {
			t.Errorf("%s, %s the filter: Redis CPU %v, cores %+v; want Redis CPU read with Redis only, Envoy and bench busy, the machine at least the Envoys", s.Name, name, c.RedisCPUMicrosPerRequest, c.Cores)
		}
	}
	// With RLS the server answers every request; with RLQS it may not
	// have worked during a short run (Envoy reports every 5 s).
	if s.Filter == rateLimitFilter && (s.With.ServerCPUMicrosPerRequest <= 0 || s.With.Cores.Server <= 0) {
		t.Errorf("%s: server CPU with the filter %v µs/request, %v cores; want both positive", s.Name, s.With.ServerCPUMicrosPerRequest, s.With.Cores.Server)
	}
	switch {
	case s.Filter == rateLimitFilter && (s.Server == kindFloor || s.Server == kindFloorRedis):
		// The floors answer OK and fail only without Redis: a request
		// they did not decide is an answer Envoy refused.
		var others int64
		for name, v := range s.RateLimit {
			if name != "ok" {
				others += v
			}
		}
		if s.RateLimit["ok"] != s.With.Requests || others != 0 {
			t.Errorf("%s: Envoy's ratelimit counters %v, want ok = %d and nothing else", s.Name, s.RateLimit, s.With.Requests)
		}
		if wantStore := map[string]string{kindFloor: "", kindFloorRedis: storeRedis}[s.Server]; s.ServerLatency != nil || s.Store != wantStore {
			t.Errorf("%s: store %q, decision latency %+v: want store %q and no latency", s.Name, s.Store, s.ServerLatency, wantStore)
		}
	case s.Filter == rateLimitFilter:
		// On a busy machine a few requests outlast the example's 0.1 s
		// timeout and pass undecided (error, failure_mode_allowed): the
		// counters must still account for every request.
		ok, failed := s.RateLimit["ok"], s.RateLimit["error"]
		if ok+failed != s.With.Requests || ok < s.With.Requests*9/10 || s.RateLimit["failure_mode_allowed"] != failed {
			t.Errorf("%s: Envoy's ratelimit counters %v, want ok + error = %d, nearly all ok, every error failed open", s.Name, s.RateLimit, s.With.Requests)
		}
		if l := s.ServerLatency; l == nil || l.Decisions < ok || !(0 < l.P50 && l.P50 <= l.P99) || l.Mean <= 0 {
			t.Errorf("%s: floodgate's decision latency %+v, want at least %d decisions and positive ascending figures", s.Name, l, ok)
		}
	case s.ServerLatency != nil:
		t.Errorf("%s: RLQS has no decision per request, yet the server's latency %+v", s.Name, s.ServerLatency)
	}
	if s.Added != s.With.Latency.minus(s.Without.Latency) || len(s.AddedPerRound) != 2 {
		t.Errorf("%s: added %+v over %d rounds, want with minus without over 2", s.Name, s.Added, len(s.AddedPerRound))
	}
	for _, n := range s.Notes {
		if !(s.Filter == quotaFilter && strings.Contains(n, "answered 429") || strings.Contains(n, "let through without a decision")) {
			t.Errorf("%s: note %q", s.Name, n)
		}
	}
}

// TestFloorHealthyInEnvoy: an Envoy in front of the floor, as -envoy-peers
// floor runs it, finds it healthy: the shipped bootstrap health-checks
// the rate-limit cluster, and a failed host would leave Envoy routing to
// it in panic mode, unlike floodgate and the reference.
func TestFloorHealthyInEnvoy(t *testing.T) {
	harness.Require(t, "envoy")
	ctx, srv := startTestFloor(t, "")
	shipped, err := os.ReadFile("../../examples/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	backend, stopBackend, err := startBackend()
	if err != nil {
		t.Fatal(err)
	}
	defer stopBackend()
	// startEnvoy returns once Envoy is ready, after the first health
	// check of the cluster.
	e, err := startEnvoy(ctx, shipped, backend, srv.grpcAddr, t.TempDir(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	hosts, err := e.HostHealth(floodgateCluster)
	if err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[srv.grpcAddr] != "healthy" {
		t.Errorf("Envoy's view of the floor at %s: %v, want it healthy", srv.grpcAddr, hosts)
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
		args    []string
		rate    float64
		config  string
		stores  string
		configs string
		counts  string
		peers   string
	}{
		{[]string{"-envoy"}, envoyDefaultRate, envoyDefaultConfig, "redis,memory", "examples/envoy.yaml", "[1]", ""},
		{[]string{"-envoy", "-rate", "1000", "-config", "rules", "-envoy-stores", "memory,redis"}, 1000, "rules", "memory,redis", "examples/envoy.yaml", "[1]", ""},
		// An explicit -rate 0 is closed loop.
		{[]string{"-envoy", "-rate", "0", "-envoys", "1,2", "-envoy-config", "a.yaml,b.yaml"}, 0, envoyDefaultConfig, "redis,memory", "a.yaml,b.yaml", "[1 2]", ""},
		// Peers run on Redis, on generated rules unless -config names some.
		{[]string{"-envoy", "-envoy-peers", "floodgate,reference", "-reference-bin", "/r"}, envoyDefaultRate, "", "redis", "examples/envoy.yaml", "[1]", "floodgate,reference"},
		// The gRPC floor beside them needs no binary.
		{[]string{"-envoy", "-envoy-peers", "floodgate,floor,reference", "-reference-bin", "/r"}, envoyDefaultRate, "", "redis", "examples/envoy.yaml", "[1]", "floodgate,floor,reference"},
		// -envoy-stores given puts floodgate on each; the reference stays on Redis (TestEnvoyPeerSetups).
		{[]string{"-envoy", "-envoy-peers", "floodgate,floor,reference", "-reference-bin", "/r", "-envoy-stores", "redis,memory"}, envoyDefaultRate, "", "redis,memory", "examples/envoy.yaml", "[1]", "floodgate,floor,reference"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseFlags(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			var peers []string
			for _, p := range o.envoyPeers {
				peers = append(peers, p.Name)
			}
			if o.envoyRate() != tc.rate || o.config != tc.config || strings.Join(o.envoyStores, ",") != tc.stores ||
				strings.Join(o.envoyConfigs, ",") != tc.configs || fmt.Sprint(o.envoyCounts) != tc.counts || strings.Join(peers, ",") != tc.peers {
				t.Errorf("rate %v, config %q, stores %q, bootstraps %q, counts %v, peers %q; want %v, %q, %q, %q, %s, %q",
					o.envoyRate(), o.config, o.envoyStores, o.envoyConfigs, o.envoyCounts, peers, tc.rate, tc.config, tc.stores, tc.configs, tc.counts, tc.peers)
			}
		})
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"-envoy", "-envoys", "0"}, "-envoys"},
		{[]string{"-envoy", "-envoys", "1,1"}, "-envoys"},
		{[]string{"-envoy", "-envoy-config", "a.yaml,,b.yaml"}, "-envoy-config"},
		{[]string{"-envoy", "-envoy-peers", "reference"}, `-envoy-peers: "reference" needs -reference-bin`},
		{[]string{"-envoy", "-envoy-peers", "l=limitador:/l"}, `-envoy-peers: "l=limitador:/l": Limitador is not run behind Envoy`},
		{[]string{"-envoy", "-envoy-peers", "envoy"}, `-envoy-peers: "envoy": the kind must be floodgate, reference, floor or floor-redis`},
		{[]string{"-envoy", "-envoy-peers", "f=floor:/bin/f"}, `-envoy-peers: "f=floor:/bin/f": the floor is this tool's own child process`},
		{[]string{"-envoy", "-envoy-peers", "f=floor-redis:/bin/f"}, `-envoy-peers: "f=floor-redis:/bin/f": the floor is this tool's own child process, with no binary: give it as floor-redis`},
		{[]string{"-envoy", "-envoy-peers", "floor,floor"}, `-envoy-peers: "floor" named twice`},
		{[]string{"-envoys", "2"}, "are for -envoy"},
		{[]string{"-reference-bin", "/r"}, "-reference-bin is for"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			if _, err := parseFlags(tc.args, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tc.wantErr)
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
			[]string{"the server decided 97 of the 100 requests through the filter (Envoy's ratelimit counters: error 3, failure_mode_allowed 3, ok 97)"}},
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

// TestWriteEnvoyText: the tables docs/benchmarks.md records, with the
// added row computed from the two cases and the cores the rest of the
// machine took.
func TestWriteEnvoyText(t *testing.T) {
	redisCPU := 12.5
	c := func(p50, p99 float64) envoyCaseResult {
		return envoyCaseResult{Requests: 10, OK: 10, PerSec: 2000, Latency: latencyMicros{P50: p50, P90: p50, P99: p99, P999: p99, Max: p99},
			SendLag: latencyMicros{P99: 700}, EnvoyCPUMicrosPerRequest: 100, ServerCPUMicrosPerRequest: 50, RedisCPUMicrosPerRequest: &redisCPU,
			Cores: cpuShares{Envoy: 0.5, Server: 0.25, Redis: 0.125, Bench: 0.5, Machine: 1.5}, PerSecByRound: []float64{1900, 2100}, SendLagP99ByRound: []float64{650}}
	}
	s := envoyStoreResult{Name: storeRedis, Store: storeRedis, Filter: rateLimitFilter, Envoys: 2, With: c(1500, 3000), Without: c(1000, 2000),
		RateLimit: map[string]int64{"ok": 10}, ServerLatency: &serverLatency{Decisions: 10, Mean: 180, P50: 150, P90: 240, P99: 480}}
	s.Added = s.With.Latency.minus(s.Without.Latency)
	s.AddedPerRound = []latencyMicros{s.Added}
	for _, tc := range []struct {
		rate float64
		want []string
	}{
		{500, []string{
			"Envoy 1.40.0, 1 worker(s) each; GET / at 500/s (open loop, at most 64 in flight)",
			"| redis | 2 | without | 10 | 2000 | 1.000 | 1.000 | 2.000 | 2.000 | 2.000 | 0 | 0.700 | 100.0 | 50.0 | 12.5 |",
			"| redis | 2 | with RLS | 10 | 2000 | 1.500 | 1.500 | 3.000 | 3.000 | 3.000 | 0 | 0.700 | 100.0 | 50.0 | 12.5 |",
			"| redis | 2 | **added** | | | **+0.500** | +0.500 | **+1.000** |",
			"| redis | 2 | with RLS | 2000 (1900, 2100) | 0.50 | 0.25 | 0.12 | 0.50 | 1.50 | 0.12 |",
			"redis, 2 Envoy(s): added p50 / p99 ms by round: +0.500 / +1.000 (send lag p99 0.7 / 0.7); Envoy's ratelimit counters: ok 10",
			"(floodgate_decision_duration_seconds, 10 decisions): mean 180 µs, p50 ≈ 150, p90 ≈ 240, p99 ≈ 480 µs",
		}},
		{0, []string{"GET / closed loop, 64 callers from"}},
	} {
		var out bytes.Buffer
		writeEnvoyText(&out, &envoyReport{Envoy: "abc/1.40.0/Clean/RELEASE/BoringSSL", RatePerSec: tc.rate, Callers: 64, Rounds: 1, DurationSec: 20, EnvoyConcurrency: 1, Stores: []envoyStoreResult{s}})
		for _, want := range tc.want {
			if !strings.Contains(out.String(), want) {
				t.Errorf("rate %v: output lacks %q:\n%s", tc.rate, want, out.String())
			}
		}
	}
}

func TestHistogram(t *testing.T) {
	const text = `# HELP floodgate_decision_duration_seconds Time to answer ShouldRateLimit.
# TYPE floodgate_decision_duration_seconds histogram
floodgate_decision_duration_seconds_bucket{code="ok",le="0.0001"} 10
floodgate_decision_duration_seconds_bucket{code="ok",le="0.00025"} 50
floodgate_decision_duration_seconds_bucket{code="ok",le="0.0005"} 90
floodgate_decision_duration_seconds_bucket{code="ok",le="+Inf"} 100
floodgate_decision_duration_seconds_sum{code="ok"} 0.03
floodgate_decision_duration_seconds_count{code="ok"} 100
floodgate_decision_duration_seconds_bucket{code="over_limit",le="0.0001"} 0
floodgate_decision_duration_seconds_bucket{code="over_limit",le="0.00025"} 0
floodgate_decision_duration_seconds_bucket{code="over_limit",le="0.0005"} 0
floodgate_decision_duration_seconds_bucket{code="over_limit",le="+Inf"} 0
floodgate_decision_duration_seconds_sum{code="over_limit"} 0
floodgate_decision_duration_seconds_count{code="over_limit"} 0
floodgate_store_duration_seconds_bucket{le="0.0001"} 7
`
	h, err := parseHistogram(strings.NewReader(text), decisionMetric)
	if err != nil {
		t.Fatal(err)
	}
	if h.count != 100 || h.sum != 0.03 || len(h.buckets) != 4 {
		t.Fatalf("parsed %+v, want 100 decisions summing to 0.03 s in 4 buckets", h)
	}
	before := histogram{buckets: map[float64]float64{0.0001: 10, 0.00025: 10, 0.0005: 10, math.Inf(1): 10}, sum: 0.001, count: 10}
	for _, tc := range []struct {
		name string
		h    histogram
		q    float64
		want float64 // seconds; NaN for none
	}{
		{"median in the second bucket", h, 0.5, 0.0001 + 0.00015*40/40},
		{"first bucket from 0", h, 0.05, 0.00005},
		{"p99 in +Inf: the highest bound", h, 0.99, 0.0005},
		{"since a reading", h.minus(before), 0.5, 0.00025 + 0.00025*5/40},
		{"empty", histogram{}, 0.5, math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.h.quantile(tc.q)
			if math.IsNaN(tc.want) != math.IsNaN(got) || !math.IsNaN(got) && math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
			}
		})
	}
	if d := h.minus(before); d.count != 90 || math.Abs(d.mean()-0.029/90) > 1e-15 {
		t.Errorf("minus: %d decisions, mean %v; want 90 and %v", int(d.count), d.mean(), 0.029/90)
	}
	if _, err := parseHistogram(strings.NewReader(`floodgate_decision_duration_seconds_bucket{code="ok",le="x"} 1`), decisionMetric); err == nil {
		t.Error("a bad le parsed")
	}
}

func TestParseMachineStat(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       time.Duration
		wantErr    bool
	}{
		// user nice system idle iowait irq softirq steal: 100+1+50+7+2+40 busy ticks.
		{"busy", "cpu  100 1 50 9999 5 7 2 40 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n", 200 * 10 * time.Millisecond, false},
		{"short", "cpu 1 2 3\n", 0, true},
		{"not cpu", "intr 1 2 3 4 5 6 7 8 9\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMachineStat(tc.stat)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseMachineStat = %v, %v; want %v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// TestEnvoyPeerSetups: with -envoy-peers and -envoy-stores, floodgate runs
// on each store, the reference on Redis only (it has no memory store) and
// the floor once, on none, and floor-redis once, on the Redis it pings.
func TestEnvoyPeerSetups(t *testing.T) {
	o, err := parseFlags([]string{"-envoy", "-envoy-peers", "floodgate,floor,reference,floor-redis", "-reference-bin", "/r",
		"-envoy-stores", "memory,redis", "-envoy-config", "../../examples/envoy.yaml"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	setups, err := envoySetups(o)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range setups {
		got = append(got, s.server.Name+"/"+s.store)
	}
	if want := "floodgate/memory floodgate/redis floor/ reference/redis floor-redis/redis"; strings.Join(got, " ") != want {
		t.Errorf("setups %v, want %s", got, want)
	}
}
