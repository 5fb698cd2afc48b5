package main

// The rounds of the -envoy mode. A setup is one rate-limit server (a
// floodgate on a store, or a peer from -envoy-peers) with as many Envoys as
// the largest of -envoys, all on one Envoy bootstrap of -envoy-config.
// Every round starts each setup in turn, measures its cases (each Envoy
// count, with and without the filter) and stops it before the next one
// starts, so that only the processes of the case measured are running:
// an idle Envoy still health-checks its server and an RLQS one reports
// every 5 s, work that would otherwise land in another setup's figures.

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/harness"
)

// envoySetup is one setup and what its runs gathered over the rounds.
type envoySetup struct {
	server peer   // kindFloodgate, kindReference, kindFloor or kindFloorRedis, and its binary
	store  string // storeRedis or storeMemory; "" for the floor, which keeps no counters (floor-redis: storeRedis, which it pings)
	config string // the Envoy bootstrap's path, for the report
	// shipped is the bootstrap's text; filter the filter it compares,
	// known once the setup has started.
	shipped []byte
	filter  string
	counts  []*envoyCount
}

// envoyCount is a setup's cases with n Envoys sharing the load.
type envoyCount struct {
	n             int
	with, without caseRuns
	// rateLimit sums the ratelimit filter's counters over the with-filter
	// runs; latency is the server's decision histogram over them
	// (floodgate only).
	rateLimit map[string]int64
	latency   histogram
}

// caseRuns gathers the runs of one case over the rounds.
type caseRuns struct {
	runs []httpRun
	cpu  cpuUse
}

// cpuUse is CPU time spent by each part of a case, and by the whole
// machine (/proc/stat), over its runs.
type cpuUse struct {
	envoy, server, redis, bench, machine time.Duration
}

func (c cpuUse) minus(b cpuUse) cpuUse {
	return cpuUse{c.envoy - b.envoy, c.server - b.server, c.redis - b.redis, c.bench - b.bench, c.machine - b.machine}
}

func (c cpuUse) plus(b cpuUse) cpuUse {
	return cpuUse{c.envoy + b.envoy, c.server + b.server, c.redis + b.redis, c.bench + b.bench, c.machine + b.machine}
}

// name labels the setup in the report: the store, preceded by the server
// when peers are compared, followed by the filter when several bootstraps
// are.
func (s *envoySetup) name(peers, configs bool) string {
	n := s.store
	switch {
	case s.server.Kind == kindFloorRedis:
		n = s.server.Name // its kind names its store
	case peers:
		n = strings.TrimSpace(s.server.Name + " " + n)
	}
	if configs {
		n += " " + filterLabel(s.filter)
	}
	return n
}

// filterLabel is a filter's short name: RLS or RLQS.
func filterLabel(filter string) string {
	if filter == quotaFilter {
		return "RLQS"
	}
	return "RLS"
}

// envoySetups lists the setups of the options, bootstraps outermost.
func envoySetups(o *options) ([]*envoySetup, error) {
	servers := o.envoyPeers
	stores := o.envoyStores
	if len(servers) == 0 {
		servers = []peer{{Name: kindFloodgate, Kind: kindFloodgate, Bin: o.serverBin}}
	}
	var setups []*envoySetup
	for _, config := range o.envoyConfigs {
		shipped, err := os.ReadFile(config)
		if err != nil {
			return nil, fmt.Errorf("-envoy-config: %w (run from the repository's root, or pass its path)", err)
		}
		for _, srv := range servers {
			srvStores := stores
			switch srv.Kind {
			case kindFloor:
				// It keeps no counters: one setup, on no store.
				srvStores = []string{""}
			case kindReference, kindFloorRedis:
				// Redis: the reference's only store of the two it has,
				// and the one floor-redis pings.
				srvStores = []string{storeRedis}
			}
			for _, store := range srvStores {
				s := &envoySetup{server: srv, store: store, config: config, shipped: shipped}
				for _, n := range o.envoyCounts {
					s.counts = append(s.counts, &envoyCount{n: n, rateLimit: map[string]int64{}})
				}
				setups = append(setups, s)
			}
		}
	}
	return setups, nil
}

// envoyEnv is what every setup shares: the Redis, the backend, the rules
// and the server binaries.
type envoyEnv struct {
	o         *options
	dir       string
	redisAddr string
	redis     *redis.Client // nil without Redis
	backend   string
	serverBin string // floodgate's, when a setup names none
	// config is the rules every server reads: -config, or with
	// -envoy-peers and no -config the generated ones (peerRules).
	config string
	log    io.Writer
}

// benchEnvoy runs the -envoy mode: it starts the backend and Redis if
// needed, then measures o.rounds rounds of every setup, and tears down
// what it started. Progress goes to log.
func benchEnvoy(ctx context.Context, o *options, log io.Writer) (*envoyReport, error) {
	var stops stopList
	defer stops.run()
	bin, err := harness.Find("envoy")
	if err != nil {
		return nil, err
	}
	version, err := envoyVersion(ctx, bin)
	if err != nil {
		return nil, err
	}
	setups, err := envoySetups(o)
	if err != nil {
		return nil, err
	}
	env, err := startEnvoyEnv(ctx, o, setups, log, &stops)
	if err != nil {
		return nil, err
	}
	load := &httpLoad{
		client:      newHTTPClient(o.scenario.Concurrency),
		clients:     clientAddrs(o.scenario.Keys),
		concurrency: o.scenario.Concurrency,
		rate:        o.envoyRate(),
		header:      o.envoyHeader,
	}
	defer load.client.CloseIdleConnections()
	for round := range o.rounds {
		for k := range setups {
			// Rotate the setups every round, so that none always runs
			// right after the same one.
			s := setups[(k+round)%len(setups)]
			if err := env.measureSetup(ctx, s, load, round); err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round+1, s.name(len(o.envoyPeers) > 0, len(o.envoyConfigs) > 1), err)
			}
		}
	}
	return envoyReportOf(o, version, load, setups), nil
}

// startEnvoyEnv provides what the setups share: a directory, the rules,
// Redis and floodgate's binary when a setup needs them, and the backend.
// What it starts, it adds a stop for to stops.
func startEnvoyEnv(ctx context.Context, o *options, setups []*envoySetup, log io.Writer, stops *stopList) (*envoyEnv, error) {
	env := &envoyEnv{o: o, log: log, config: o.config}
	var err error
	if env.dir, err = os.MkdirTemp("", "floodgate-bench-envoy-"); err != nil {
		return nil, err
	}
	stops.add(func() { os.RemoveAll(env.dir) })
	if env.config == "" {
		env.config = filepath.Join(env.dir, "rules")
		if err := writePeerRules(env.config); err != nil {
			return nil, err
		}
	}
	needFloodgate := slices.ContainsFunc(setups, func(s *envoySetup) bool { return s.server.Kind == kindFloodgate && s.server.Bin == "" })
	needRedis := slices.ContainsFunc(setups, func(s *envoySetup) bool { return s.store == storeRedis })
	if env.redisAddr, env.serverBin, err = setUp(ctx, o, env.dir, needRedis, needFloodgate, log, stops); err != nil {
		return nil, err
	}
	if env.redisAddr != "" {
		env.redis = redis.NewClient(&redis.Options{Addr: env.redisAddr, PoolSize: 2})
		stops.add(func() { env.redis.Close() })
	}
	var stopBackend func()
	if env.backend, stopBackend, err = startBackend(); err != nil {
		return nil, err
	}
	stops.add(stopBackend)
	return env, nil
}

// runningSetup is a started setup: its server and Envoys.
type runningSetup struct {
	server *child
	srv    server
	envoys []*envoyProcess
}

func (r *runningSetup) stop() {
	for _, e := range r.envoys {
		e.Stop()
	}
	r.server.Stop(10 * time.Second)
}

// measureSetup starts s, measures each of its cases once, in an order
// that flips every round, and stops it.
func (env *envoyEnv) measureSetup(ctx context.Context, s *envoySetup, load *httpLoad, round int) error {
	rs, err := env.start(ctx, s, round)
	if err != nil {
		return err
	}
	defer rs.stop()
	counts := slices.Clone(s.counts)
	order := []bool{true, false}
	if round%2 == 1 {
		slices.Reverse(counts)
		order = []bool{false, true}
	}
	name := s.name(len(env.o.envoyPeers) > 0, len(env.o.envoyConfigs) > 1)
	for _, c := range counts {
		for _, withFilter := range order {
			fmt.Fprintf(env.log, "bench: round %d/%d: %s, %d Envoy(s), %s: warm-up %v, measuring %v\n",
				round+1, env.o.rounds, name, c.n, filterName(withFilter), env.o.warmup, env.o.duration)
			if err := env.measure(ctx, s, rs, c, load, withFilter); err != nil {
				return fmt.Errorf("%d Envoy(s), %s: %w", c.n, filterName(withFilter), err)
			}
		}
	}
	return nil
}

// start starts s's server and Envoys in a directory of the round's own.
func (env *envoyEnv) start(ctx context.Context, s *envoySetup, round int) (*runningSetup, error) {
	dir := filepath.Join(env.dir, fmt.Sprintf("r%d-%p", round, s))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	rs := &runningSetup{}
	var err error
	if rs.server, rs.srv, err = env.startServer(ctx, s, dir); err != nil {
		return nil, err
	}
	most := slices.MaxFunc(s.counts, func(a, b *envoyCount) int { return a.n - b.n }).n
	for i := range most {
		edir := filepath.Join(dir, "envoy"+strconv.Itoa(i))
		if err := os.Mkdir(edir, 0o755); err != nil {
			rs.stop()
			return nil, err
		}
		ep, err := startEnvoy(ctx, s.shipped, env.backend, rs.srv.grpcAddr, edir, env.o.envoyConcurrency)
		if err != nil {
			rs.stop()
			return nil, fmt.Errorf("envoy: %w", err)
		}
		rs.envoys = append(rs.envoys, ep)
		s.filter = ep.filter
		fmt.Fprintf(env.log, "bench: %s pid %d on %s; envoy pid %d, with the filter on %s, without on %s\n",
			s.server.Name, rs.srv.pid, rs.srv.grpcAddr, ep.Process.Pid(), ep.with, ep.without)
	}
	return rs, nil
}

// startServer starts the setup's server on the shared rules: floodgate
// as the other modes start it, the reference with the rules copied under
// its runtime root; the floor reads none.
func (env *envoyEnv) startServer(ctx context.Context, s *envoySetup, dir string) (*child, server, error) {
	redisAddr := ""
	if s.store == storeRedis {
		redisAddr = env.redisAddr
	}
	switch s.server.Kind {
	case kindFloor, kindFloorRedis:
		return startFloor(ctx, redisAddr)
	case kindFloodgate:
		bin := s.server.Bin
		if bin == "" {
			bin = env.serverBin
		}
		return startServer(ctx, bin, env.config, redisAddr, env.o.serverArgs)
	}
	if err := copyRules(env.config, filepath.Join(dir, "ratelimit", "config")); err != nil {
		return nil, server{}, err
	}
	vars := harness.ReferenceVars(dir, redisAddr)
	f, err := harness.StartFloodgate(ctx, harness.Options{Bin: s.server.Bin, Env: append(os.Environ(), vars...), EnvAddrs: true})
	if err != nil {
		return nil, server{}, fmt.Errorf("%s: %w", s.server.Name, err)
	}
	// The reference's /metrics is not floodgate's: no httpAddr.
	return &child{Process: f.Process, logs: f.Logs}, server{grpcAddr: f.GRPCAddr, pid: f.Pid()}, nil
}

// copyRules copies the rule file src, or the .yaml files of the directory
// src, into the new directory dst.
func copyRules(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	files := []string{src}
	if fi, err := os.Stat(src); err != nil {
		return fmt.Errorf("-config: %w", err)
	} else if fi.IsDir() {
		if files, err = filepath.Glob(filepath.Join(src, "*.yaml")); err != nil {
			return err
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// measure runs one case: a warm-up, then the measured load with the
// readings before and after it.
func (env *envoyEnv) measure(ctx context.Context, s *envoySetup, rs *runningSetup, c *envoyCount, load *httpLoad, withFilter bool) error {
	envoys := rs.envoys[:c.n]
	addrs := make([]string, len(envoys))
	for i, e := range envoys {
		addrs[i] = e.without
		if withFilter {
			addrs[i] = e.with
		}
	}
	runs := &c.without
	if withFilter {
		runs = &c.with
	}
	if env.o.warmup > 0 {
		load.run(ctx, addrs, env.o.warmup)
	}
	before, err := env.read(ctx, s, rs, envoys)
	if err != nil {
		return err
	}
	r := load.run(ctx, addrs, env.o.duration)
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, e := range envoys {
		if e.Process.Exited() {
			return fmt.Errorf("envoy exited during the run:\n%s", e.Log())
		}
	}
	if rs.server.Exited() {
		return fmt.Errorf("%s exited during the run:\n%s", s.server.Name, rs.server.logTail())
	}
	after, err := env.read(ctx, s, rs, envoys)
	if err != nil {
		return err
	}
	runs.runs = append(runs.runs, r)
	runs.cpu = runs.cpu.plus(after.cpu.minus(before.cpu))
	if withFilter {
		for name, v := range after.rateLimit {
			c.rateLimit[name] += v - before.rateLimit[name]
		}
		c.latency = c.latency.plus(after.latency.minus(before.latency))
	}
	return nil
}

// setupReadings are the figures read before and after a run.
type setupReadings struct {
	cpu       cpuUse
	rateLimit map[string]int64
	latency   histogram
}

// read takes the readings of a case run on envoys.
func (env *envoyEnv) read(ctx context.Context, s *envoySetup, rs *runningSetup, envoys []*envoyProcess) (setupReadings, error) {
	r := setupReadings{rateLimit: map[string]int64{}, cpu: cpuUse{bench: selfCPU()}}
	var err error
	if r.cpu.machine, err = machineCPU(); err != nil {
		return r, err
	}
	for _, e := range envoys {
		cpu, err := procCPU(e.Process.Pid())
		if err != nil {
			return r, fmt.Errorf("envoy CPU: %w", err)
		}
		r.cpu.envoy += cpu
		st, err := e.rateLimitStats(ctx)
		if err != nil {
			return r, err
		}
		for name, v := range st {
			r.rateLimit[name] += v
		}
	}
	if r.cpu.server, err = procCPU(rs.srv.pid); err != nil {
		return r, fmt.Errorf("%s CPU: %w", s.server.Name, err)
	}
	if s.store == storeRedis && env.redis != nil {
		st, err := readRedisStats(ctx, env.redis)
		if err != nil {
			return r, err
		}
		r.cpu.redis = st.CPU
	}
	if rs.srv.httpAddr != "" {
		if r.latency, err = decisionHistogram(ctx, rs.srv.httpAddr); err != nil {
			return r, err
		}
	}
	return r, nil
}

// machineCPU returns the CPU time all of the machine's cores have spent
// busy (user, nice, system, irq, softirq and steal of /proc/stat's cpu
// line): with the processes' own, it tells how much of the machine the
// rest of it, other tenants included, took during a run.
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return parseMachineStat(string(b))
}

// parseMachineStat reads the busy time of the "cpu" line of /proc/stat.
func parseMachineStat(stat string) (time.Duration, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: first line %q: want cpu and at least 8 counters", line)
	}
	var ticks int64
	// user nice system idle iowait irq softirq steal: all but idle and
	// iowait are busy. guest time is counted in user already.
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", f[i], err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, nil
}

func filterName(withFilter bool) string {
	if withFilter {
		return "with the filter"
	}
	return "without the filter"
}

// peerRules are the rules of -envoy-peers without -config: domain demo as
// Envoy's examples send it, with a limit on each descriptor they send for
// GET / (remote_address, and api_key with -envoy-header x-api-key) that no
// run reaches, in fixed windows, the reference server's only algorithm,
// so that every server decides and allows every request on one counter
// per descriptor.
const peerRules = `domain: demo
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: api_key
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// writePeerRules writes peerRules into the new directory dir.
func writePeerRules(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "demo.yaml"), []byte(peerRules), 0o644)
}
