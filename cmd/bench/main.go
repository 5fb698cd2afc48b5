// Command bench measures what a floodgate decision costs: it drives
// ShouldRateLimit over gRPC and reports decisions per second, exact latency
// percentiles, the CPU the server and Redis spend per decision, the Redis
// commands and round trips per request, and, beside them, the ceiling of
// the machine: redis-benchmark replaying floodgate's own script call.
// With -envoy it measures instead the latency floodgate adds to HTTP
// requests through a real Envoy (envoy.go), with -reloads the start,
// reloads, memory and latency of a large rule set (reload.go), and with
// -peers floodgate beside other RLS servers, the reference and Limitador,
// in interleaved rounds (peers.go).
//
//	go run ./cmd/bench                          1 descriptor, under limit, 64 callers, 10 s
//	go run ./cmd/bench -descriptors 3 -limit over -concurrency 16
//	go run ./cmd/bench -matrix                  the table of docs/benchmarks.md
//	go run ./cmd/bench -envoy                   p50/p99 through Envoy with and without the filter
//	go run ./cmd/bench -envoy -rate 0 -envoys 1,2 -envoy-config examples/envoy.yaml,examples/envoy-rlqs.yaml -envoy-header x-api-key
//	                                            the most one and two Envoys pass through RLS and RLQS (closed loop)
//	go run ./cmd/bench -envoy -envoy-peers floodgate,reference -reference-bin R -rate 575
//	                                            floodgate and the reference behind the same Envoy
//	go run ./cmd/bench -rules 100000 -reloads 3 a domain of 100,000 rules, started and reloaded 3 times
//	go run ./cmd/bench -write-rules DIR -rules 100000   the same rule files, for another server
//	go run ./cmd/bench -peers floodgate,reference,limitador -reference-bin R -limitador-bin L -matrix
//	                                            each server on its own Redis, side by side
//	go run ./cmd/bench fleet -envoys 1000       a fleet of simulated Envoys on RLS and RLQS (fleet.go)
//
// By default it builds floodgate (go build; or -server-bin), starts a
// private redis-server on a free port (or uses -redis-addr), writes a rule
// file for the scenarios (or reads -config), starts floodgate on free
// ports, waits for /healthcheck, warms up, measures for -duration, and
// stops what it started. With -server-addr it drives a running server
// instead and starts nothing. The figures are Linux ones: server CPU and RSS
// come from /proc.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
)

func main() {
	if addr := os.Getenv(floorAddrEnv); addr != "" {
		if err := serveFloor(addr, os.Getenv(floorRedisEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "grpc floor:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options is the command line.
type options struct {
	scenario          scenario
	matrix            bool
	matrixConcurrency []int
	algorithm         string

	serverBin, config, redisAddr string
	serverArgs                   []string
	serverAddr, serverDebugAddr  string
	serverPID                    int
	grpcFloor                    bool

	conns            int
	warmup, duration time.Duration
	ceiling          bool
	ceilingDuration  time.Duration
	cpuProfile       string
	json             bool
	writeRules       string
	rules            int

	// The -reloads mode (reload.go).
	reloads      int
	referenceBin string
	settle       time.Duration

	// The -envoy mode (envoy.go, envoyrun.go).
	envoy bool
	// envoyConfigs are the Envoy bootstraps, each its own setups.
	envoyConfigs     []string
	envoyStores      []string
	envoyConcurrency int
	// envoyCounts are the numbers of Envoys measured per setup (-envoys).
	envoyCounts []int
	// envoyPeers are the servers behind Envoy (-envoy-peers); empty: a
	// floodgate per store.
	envoyPeers []peer
	// envoyClosed is -rate 0 given explicitly with -envoy: closed loop.
	envoyClosed bool
	// envoyStoresSet is -envoy-stores given explicitly: with -envoy-peers
	// floodgate runs on each of them, else on Redis only.
	envoyStoresSet bool
	// envoyHeader, when set, is a request header carrying the client
	// address too (x-api-key for examples/envoy-rlqs.yaml's buckets).
	envoyHeader string
	rounds      int

	// The -peers mode (peers.go).
	peers        []peer
	limitadorBin string
	store        string
}

// envoyRate is the arrival rate of the -envoy mode: -rate; 0 (closed
// loop) only when -rate 0 was given, since the mode's first question is
// added latency at a load the machine carries, so that without -rate it
// is envoyDefaultRate.
func (o *options) envoyRate() float64 {
	if o.scenario.Rate == 0 && !o.envoyClosed {
		return envoyDefaultRate
	}
	return o.scenario.Rate
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./cmd/bench [flags]\n\nMeasures floodgate's decisions/s, latency and CPU per decision against Redis, or with -envoy the latency it adds through Envoy; see docs/benchmarks.md.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	fs.IntVar(&o.scenario.Descriptors, "descriptors", 1, "descriptors per request; each has one entry and matches one limit")
	fs.IntVar(&o.scenario.Keys, "keys", 1000, "distinct values per descriptor key, picked uniformly at random per request (with -envoy: client addresses sent in turn as X-Forwarded-For, each its own token bucket)")
	fs.StringVar(&o.scenario.Limit, "limit", limitUnder, "under: a limit never reached (every decision writes); over: 1 per second per key (all but -keys requests a second are denied)")
	fs.IntVar(&o.scenario.Concurrency, "concurrency", 64, "concurrent callers")
	fs.Float64Var(&o.scenario.Rate, "rate", 0, fmt.Sprintf("fixed arrival rate in requests/s (open loop; latency counts from the scheduled send); 0: closed loop. With -envoy %d/s when not given, and closed loop only when -rate 0 is", envoyDefaultRate))
	fs.BoolVar(&o.matrix, "matrix", false, "run under/over limit x 1/3 descriptors x -matrix-concurrency and print one Markdown table (ignores -limit, -descriptors, -concurrency)")
	concurrency := fs.String("matrix-concurrency", "16,64,256", "comma-separated concurrencies of -matrix")
	fs.StringVar(&o.algorithm, "algorithm", limit.FixedWindow.String(), "algorithm of the generated rules")
	fs.StringVar(&o.serverBin, "server-bin", "", "floodgate binary to start; empty: built from ./cmd/server with go build, inside the floodgate module")
	serverArgs := fs.String("server-args", "", "extra flags for the started server, space-separated, after the tool's own ("+strings.Join(serverDefaults, " ")+"), e.g. '-redis-pool-size 64'")
	fs.StringVar(&o.config, "config", "", "rule file or directory for the started server; it must define domains bench-under and bench-over with keys key1..keyN. Empty: generated (with -envoy: "+envoyDefaultConfig+", the rules of -envoy-config)")
	fs.StringVar(&o.redisAddr, "redis-addr", "", "host:port of an existing Redis (TCP) for the started server, the Redis figures and the ceiling; empty: a private redis-server on a free port")
	fs.StringVar(&o.serverAddr, "server-addr", "", "gRPC host:port of a running floodgate to drive instead of starting one")
	fs.IntVar(&o.serverPID, "server-pid", 0, "pid of the -server-addr server, for its CPU and RSS")
	fs.StringVar(&o.serverDebugAddr, "server-debug-addr", "", "debug host:port of the -server-addr server, for -cpuprofile")
	fs.BoolVar(&o.grpcFloor, "grpc-floor", false, "drive, instead of floodgate, a grpc-go server that answers every call OK without deciding (set up as floodgate sets up grpc-go): the least CPU per call any grpc-go server needs under this load (behind Envoy: -envoy -envoy-peers "+kindFloor+")")
	fs.IntVar(&o.conns, "conns", 4, "gRPC connections the callers share")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "load before each measurement, not measured")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "measured load per scenario")
	fs.BoolVar(&o.ceiling, "ceiling", true, "measure the ceiling with redis-benchmark before and after each scenario")
	fs.DurationVar(&o.ceilingDuration, "ceiling-duration", 2500*time.Millisecond, "about how long each of the two ceiling runs lasts")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write the server's CPU profile of the measured run to this file (with -matrix, one file per scenario, the scenario in the name)")
	fs.StringVar(&o.writeRules, "write-rules", "", "write the generated rule files into this new directory and exit (to serve the same rules from another server, e.g. envoyproxy/ratelimit)")
	fs.IntVar(&o.rules, "rules", 0, "add that many rules to the generated domain bench-under: key1 with the values v0, v1, ..., each its own rule with its own limit (a large rule set; requests with those values match them)")
	fs.IntVar(&o.reloads, "reloads", 0, "measure a large rule set instead of decisions: start floodgate (or -reference-bin) on -rules rules, time its start to the first answer, then rewrite the rule file this many times under load at -rate (default "+strconv.Itoa(reloadDefaultRate)+"/s), timing each reload and the decisions meanwhile, with the server's RSS after each step")
	fs.StringVar(&o.referenceBin, "reference-bin", "", "with -reloads: the reference server's binary (envoyproxy/ratelimit's service_cmd) to start instead of floodgate, on the same rules, as RUNTIME_ROOT/ratelimit/config")
	fs.DurationVar(&o.settle, "settle", 2*time.Second, "with -reloads: the wait after the first answer and after each reload before reading RSS")
	fs.BoolVar(&o.json, "json", false, "print JSON (one object, or an array with -matrix) instead of text")
	fs.BoolVar(&o.envoy, "envoy", false, "measure the latency floodgate adds to HTTP requests through Envoy: -envoy-config with and without its ratelimit (or rate_limit_quota) filter, alternating, at -rate, for each of -envoy-stores; needs envoy ($ENVOY_BIN or the PATH)")
	envoyConfigs := fs.String("envoy-config", "examples/envoy.yaml", "with -envoy: the Envoy bootstrap to run, rewritten for the loopback; its listener "+envoyListener+" must have the ratelimit filter (RLS), or the rate_limit_quota filter (RLQS, examples/envoy-rlqs.yaml). Several, separated by commas, are measured in the same rounds")
	envoyCounts := fs.String("envoys", "1", "with -envoy: comma-separated numbers of Envoys, each its own process on the same server, sharing the callers; each number is measured in every round")
	envoyPeers := fs.String("envoy-peers", "", "with -envoy: comma-separated servers to put behind Envoy instead of one floodgate per store: "+kindFloodgate+" (-server-bin, or built) and "+kindReference+" (-reference-bin), each on Redis, or NAME=KIND:BIN; without -config they read generated rules for domain demo that no run reaches, in fixed windows. "+kindFloor+" is the server of -grpc-floor, which answers every call OK without deciding and keeps no counters: the latency and CPU any grpc-go RLS server adds through Envoy, at the least; "+kindFloorRedis+" is the floor with one Redis round trip (PING) per call before its answer: what any RLS server over Redis adds, at the least")
	stores := fs.String("envoy-stores", storeRedis+","+storeMemory, "with -envoy: comma-separated stores of floodgate to measure: "+storeRedis+" (-redis-addr, or a private redis-server), "+storeMemory+"; with -envoy-peers, "+storeRedis+" unless given (the reference runs on "+storeRedis+" only)")
	fs.IntVar(&o.envoyConcurrency, "envoy-concurrency", 1, "with -envoy: Envoy's worker threads (--concurrency)")
	fs.StringVar(&o.envoyHeader, "envoy-header", "", "with -envoy: a request header that carries the request's client address too, e.g. x-api-key, the bucket of examples/envoy-rlqs.yaml and a descriptor of examples/envoy.yaml")
	fs.IntVar(&o.rounds, "rounds", 3, "with -envoy or -peers: how many times each case is measured for -duration, cases alternating")
	peers := fs.String("peers", "", "compare RLS servers in interleaved rounds: comma-separated "+kindFloodgate+" (-server-bin, or built), "+kindReference+" (-reference-bin), "+kindLimitador+" (-limitador-bin) or NAME=KIND:BIN, each started once on the generated rules with a private Redis (or in memory with -store memory), then every scenario measured on each in turn for -rounds rounds; ratios are to the first")
	fs.StringVar(&o.limitadorBin, "limitador-bin", "", "with -peers: Kuadrant Limitador's limitador-server binary")
	fs.StringVar(&o.store, "store", storeRedis, "with -peers: where the servers keep counters: "+storeRedis+" (a private redis-server each) or "+storeMemory)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.serverArgs = strings.Fields(*serverArgs)
	switch {
	case o.rules < 0:
		return nil, fmt.Errorf("-rules %d: must not be negative", o.rules)
	case o.reloads < 0:
		return nil, fmt.Errorf("-reloads %d: must not be negative", o.reloads)
	case *peers != "":
		if o.store != storeRedis && o.store != storeMemory {
			return nil, fmt.Errorf("-store %q: want %s or %s", o.store, storeRedis, storeMemory)
		}
		if err := o.checkPeers(*peers); err != nil {
			return nil, err
		}
	case o.reloads > 0:
		if err := o.checkReloads(); err != nil {
			return nil, err
		}
	case o.referenceBin != "" && *envoyPeers == "":
		return nil, errors.New("-reference-bin is for -reloads, -peers and -envoy-peers")
	case o.limitadorBin != "":
		return nil, errors.New("-limitador-bin is for -peers")
	}
	if o.envoy {
		fs.Visit(func(f *flag.Flag) {
			o.envoyClosed = o.envoyClosed || f.Name == "rate" && o.scenario.Rate == 0
			o.envoyStoresSet = o.envoyStoresSet || f.Name == "envoy-stores"
		})
		if err := o.checkEnvoy(*stores, *envoyConfigs, *envoyCounts, *envoyPeers); err != nil {
			return nil, err
		}
	} else if *envoyPeers != "" || *envoyCounts != "1" {
		return nil, errors.New("-envoy-peers and -envoys are for -envoy")
	}
	for c := range strings.SplitSeq(*concurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-matrix-concurrency %q: want positive integers separated by commas", *concurrency)
		}
		o.matrixConcurrency = append(o.matrixConcurrency, n)
	}
	for _, sc := range o.scenarios() {
		if err := sc.validate(); err != nil {
			return nil, err
		}
	}
	var a limit.Algorithm
	if err := a.UnmarshalText([]byte(o.algorithm)); err != nil {
		return nil, fmt.Errorf("-algorithm: %w", err)
	}
	switch {
	case o.conns < 1:
		return nil, fmt.Errorf("-conns %d: want at least 1", o.conns)
	case o.duration <= 0:
		return nil, fmt.Errorf("-duration %v: must be positive", o.duration)
	case o.warmup < 0:
		return nil, fmt.Errorf("-warmup %v: must not be negative", o.warmup)
	case o.ceilingDuration <= 0:
		return nil, fmt.Errorf("-ceiling-duration %v: must be positive", o.ceilingDuration)
	case o.serverAddr == "" && (o.serverPID != 0 || o.serverDebugAddr != ""):
		return nil, errors.New("-server-pid and -server-debug-addr describe a running server: pass -server-addr too")
	case o.serverAddr != "" && (o.serverBin != "" || o.config != "" || len(o.serverArgs) > 0):
		return nil, errors.New("-server-bin, -server-args and -config configure a server the tool starts: drop them with -server-addr")
	case o.grpcFloor && (o.serverAddr != "" || o.serverBin != "" || o.config != "" || len(o.serverArgs) > 0 || o.cpuProfile != "" || o.envoy || o.redisAddr != ""):
		return nil, errors.New("-grpc-floor drives a server of its own, without Redis: drop -server-addr, -server-bin, -server-args, -config, -cpuprofile, -envoy and -redis-addr (behind Envoy, the floor is -envoy -envoy-peers " + kindFloor + ")")
	case o.cpuProfile != "" && o.serverAddr != "" && o.serverDebugAddr == "":
		return nil, errors.New("-cpuprofile with -server-addr needs -server-debug-addr")
	}
	if o.redisAddr != "" && !isHostPort(o.redisAddr) {
		// The tool reads INFO and runs redis-benchmark over TCP; a started
		// server may still reach the same Redis another way.
		return nil, fmt.Errorf("-redis-addr %q: want host:port (for a server on the same Redis's Unix socket, add -server-args=-redis=unix:///PATH)", o.redisAddr)
	}
	return o, nil
}

// isHostPort reports whether addr is host:port with a numeric port.
func isHostPort(addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	_, err = strconv.ParseUint(port, 10, 16)
	return err == nil
}

// checkEnvoy validates and completes the options of the -envoy mode from
// -envoy-stores, -envoy-config, -envoys and -envoy-peers.
func (o *options) checkEnvoy(stores, configs, counts, peers string) error {
	switch {
	case o.matrix, o.serverAddr != "", o.cpuProfile != "", o.writeRules != "":
		return errors.New("-envoy starts its own servers and reports latency only: drop -matrix, -server-addr, -cpuprofile and -write-rules")
	case o.rounds < 1:
		return fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	case o.envoyConcurrency < 1:
		return fmt.Errorf("-envoy-concurrency %d: want at least 1", o.envoyConcurrency)
	case o.scenario.Keys > maxBenchClients:
		return fmt.Errorf("-keys %d: -envoy has %d client addresses (%s/15)", o.scenario.Keys, maxBenchClients, benchClientNet)
	}
	for st := range strings.SplitSeq(stores, ",") {
		st = strings.TrimSpace(st)
		if st != storeRedis && st != storeMemory || slices.Contains(o.envoyStores, st) {
			return fmt.Errorf("-envoy-stores %q: want %s and/or %s, each once, separated by commas", stores, storeRedis, storeMemory)
		}
		o.envoyStores = append(o.envoyStores, st)
	}
	for c := range strings.SplitSeq(configs, ",") {
		if c = strings.TrimSpace(c); c == "" || slices.Contains(o.envoyConfigs, c) {
			return fmt.Errorf("-envoy-config %q: want bootstrap paths, each once, separated by commas", configs)
		}
		o.envoyConfigs = append(o.envoyConfigs, c)
	}
	for c := range strings.SplitSeq(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > maxEnvoys || slices.Contains(o.envoyCounts, n) {
			return fmt.Errorf("-envoys %q: want numbers from 1 to %d, each once, separated by commas", counts, maxEnvoys)
		}
		o.envoyCounts = append(o.envoyCounts, n)
	}
	if peers != "" {
		return o.checkEnvoyPeers(peers)
	}
	if o.config == "" {
		o.config = envoyDefaultConfig
	}
	return nil
}

// maxEnvoys bounds -envoys: each Envoy is a process of its own on the
// machine that runs the load.
const maxEnvoys = 8

// checkEnvoyPeers reads -envoy-peers: floodgate on Redis, or on each of
// -envoy-stores when given; the reference on Redis, its only store of the
// two the mode knows; the gRPC floor, which keeps no counters; and
// floor-redis, the floor pinging Redis.
func (o *options) checkEnvoyPeers(list string) error {
	if !o.envoyStoresSet {
		o.envoyStores = []string{storeRedis}
	}
	var err error
	o.envoyPeers, err = parsePeers("-envoy-peers", list, o, map[string]string{
		kindLimitador: "Limitador is not run behind Envoy by this tool (its limits file differs)",
	})
	return err
}

// scenarios lists what to measure, in report order.
func (o *options) scenarios() []scenario {
	if !o.matrix {
		return []scenario{o.scenario}
	}
	var list []scenario
	for _, lim := range []string{limitUnder, limitOver} {
		for _, desc := range matrixDescriptors {
			for _, c := range o.matrixConcurrency {
				sc := o.scenario
				sc.Limit, sc.Descriptors, sc.Concurrency = lim, desc, c
				list = append(list, sc)
			}
		}
	}
	return list
}

// run is the whole program; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "fleet" {
		return runFleet(ctx, args[1:], stdout, stderr)
	}
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if o.writeRules != "" {
		if err := writeRuleFiles(o.writeRules, o.ruleSpec()); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		return 0
	}
	if o.reloads > 0 {
		rep, err := benchReloads(ctx, o, stderr)
		if err == nil && o.json {
			err = writeJSON(stdout, rep)
		} else if err == nil {
			writeReloadText(stdout, rep)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		return 0
	}
	if len(o.peers) > 0 {
		rep, err := benchPeers(ctx, o, stderr)
		if err == nil && o.json {
			err = writeJSON(stdout, rep)
		} else if err == nil {
			writePeerTable(stdout, rep)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		return 0
	}
	if o.envoy {
		rep, err := benchEnvoy(ctx, o, stderr)
		if err == nil && o.json {
			err = writeJSON(stdout, rep)
		} else if err == nil {
			writeEnvoyText(stdout, rep)
		}
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		return 0
	}
	results, err := bench(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	switch {
	case o.json && o.matrix:
		err = writeJSON(stdout, results)
	case o.json:
		err = writeJSON(stdout, results[0])
	case o.matrix:
		writeTable(stdout, results)
	default:
		writeText(stdout, results[0])
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// target is what the scenarios run against.
type target struct {
	srv       server
	proc      *child        // the started floodgate; nil with -server-addr
	redisAddr string        // "" when unknown
	redis     *redis.Client // nil when redisAddr is ""
	conns     []*grpc.ClientConn
}

// bench sets up the target, measures every scenario and tears down what it
// started. Progress goes to log.
func bench(ctx context.Context, o *options, log io.Writer) (results []result, err error) {
	var stops []func()
	defer func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}()
	t := &target{redisAddr: o.redisAddr}
	switch {
	case o.serverAddr != "":
		t.srv = server{grpcAddr: o.serverAddr, debugAddr: o.serverDebugAddr, pid: o.serverPID}
	case o.grpcFloor:
		p, srv, err := startFloor(ctx, "")
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { p.Stop(5 * time.Second) })
		t.srv, t.proc, t.redisAddr = srv, p, ""
		fmt.Fprintf(log, "bench: grpc floor pid %d, gRPC on %s\n", srv.pid, srv.grpcAddr)
	default:
		dir, err := os.MkdirTemp("", "floodgate-bench-")
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { os.RemoveAll(dir) })
		var bin string
		if t.redisAddr, bin, err = setUp(ctx, o, dir, true, true, log, &stops); err != nil {
			return nil, err
		}
		config := o.config
		if config == "" {
			config = filepath.Join(dir, "rules")
			if err := writeRuleFiles(config, o.ruleSpec()); err != nil {
				return nil, err
			}
		}
		p, srv, err := startServer(ctx, bin, config, t.redisAddr, o.serverArgs)
		if err != nil {
			return nil, err
		}
		stops = append(stops, func() { p.Stop(10 * time.Second) })
		t.srv, t.proc = srv, p
		fmt.Fprintf(log, "bench: floodgate pid %d, gRPC on %s\n", srv.pid, srv.grpcAddr)
	}
	if t.redisAddr != "" {
		t.redis = redis.NewClient(&redis.Options{Addr: t.redisAddr, PoolSize: 2})
		stops = append(stops, func() { t.redis.Close() })
	}
	if t.conns, err = dial(t.srv.grpcAddr, o.conns); err != nil {
		return nil, err
	}
	stops = append(stops, func() { closeAll(t.conns) })

	scenarios := o.scenarios()
	for i, sc := range scenarios {
		fmt.Fprintf(log, "bench: [%d/%d] %s: warm-up %v, measuring %v\n", i+1, len(scenarios), sc, o.warmup, o.duration)
		r, err := measure(ctx, o, t, sc)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", sc, err)
		}
		results = append(results, r)
	}
	return results, nil
}

// setUp provides what the modes need and the options may leave out: a
// private redis-server in dir when needRedis and -redis-addr is empty, and
// when needServer a floodgate binary built into dir when -server-bin is
// empty. What it starts, it adds a stop for to stops.
func setUp(ctx context.Context, o *options, dir string, needRedis, needServer bool, log io.Writer, stops *[]func()) (redisAddr, serverBin string, err error) {
	redisAddr, serverBin = o.redisAddr, o.serverBin
	if redisAddr == "" && needRedis {
		rd, err := redistest.Run(dir)
		if err != nil {
			return "", "", fmt.Errorf("%w (or pass -redis-addr)", err)
		}
		*stops = append(*stops, rd.Stop)
		redisAddr = rd.Addr
		fmt.Fprintf(log, "bench: redis-server on %s\n", rd.Addr)
	}
	if serverBin == "" && needServer {
		fmt.Fprintln(log, "bench: go build ./cmd/server")
		serverBin = filepath.Join(dir, "floodgate")
		if err = harness.Build(ctx, serverBin); err != nil {
			return "", "", fmt.Errorf("%w (or pass -server-bin)", err)
		}
	}
	return redisAddr, serverBin, nil
}

// matrixDescriptors are the descriptor counts -matrix measures.
var matrixDescriptors = []int{1, 3}

// ruleSpec is what the generated rule files hold for these options. They
// cover the matrix as well as -descriptors, so that files written once
// serve every scenario.
func (o *options) ruleSpec() ruleSpec {
	maxDesc := slices.Max(matrixDescriptors)
	for _, sc := range o.scenarios() {
		maxDesc = max(maxDesc, sc.Descriptors)
	}
	return ruleSpec{maxDescriptors: maxDesc, algorithm: o.algorithm, rules: o.rules}
}

// writeRuleFiles writes the generated rules into dir, which must not exist,
// one file per domain.
func writeRuleFiles(dir string, rs ruleSpec) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, lim := range []string{limitUnder, limitOver} {
		if err := writeRuleFile(filepath.Join(dir, scenario{Limit: lim}.domain()+".yaml"), lim, rs); err != nil {
			return err
		}
	}
	return nil
}

// writeRuleFile writes the rules of regime lim into the file path.
func writeRuleFile(path, lim string, rs ruleSpec) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = writeRules(f, lim, rs)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// measure runs one scenario: the warm-up (during which it captures the
// script call for the ceiling), a ceiling run, the measured load with
// readings before and after, and a second ceiling run.
func measure(ctx context.Context, o *options, t *target, sc scenario) (result, error) {
	r := result{Scenario: sc}
	switch {
	case o.grpcFloor:
		r.Target = targetFloor
	case o.config == "" && o.serverAddr == "":
		r.Algorithm = o.algorithm
	}
	values := sc.values()

	call, err := warmUp(ctx, o, t, sc, values)
	if ctxErr := ctx.Err(); ctxErr != nil {
		return r, ctxErr
	}
	if err == nil && call != nil && call.keys() != sc.Descriptors {
		r.Notes = append(r.Notes, fmt.Sprintf("the server decided %d limits per request, not %d: does the rule file limit each of keys %s..%s?",
			call.keys(), sc.Descriptors, descriptorKey(0), descriptorKey(sc.Descriptors-1)))
	}
	var runner *ceilingRunner
	var ceilBefore float64
	var ceilBeforeDelta redisDelta
	switch {
	case !o.ceiling, o.grpcFloor:
	case t.redis == nil:
		r.Notes = append(r.Notes, "no ceiling: the Redis address is unknown (pass -redis-addr)")
	case err != nil:
		r.Notes = append(r.Notes, "no ceiling: "+err.Error())
	default:
		runner, err = newCeilingRunner(ctx, t.redis, t.redisAddr, call, sc.Concurrency, sc.Keys, o.ceilingDuration)
		if err == nil {
			ceilBefore, ceilBeforeDelta, err = runner.run(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			r.Notes = append(r.Notes, "no ceiling: "+err.Error())
			runner = nil
		}
	}

	before, err := t.snapshot(ctx)
	if err != nil {
		return r, err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	var wg sync.WaitGroup
	rssMax := before.serverRSS
	if t.srv.pid != 0 {
		wg.Go(func() {
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-sampleCtx.Done():
					return
				case <-tick.C:
					if rss, err := procRSS(t.srv.pid); err == nil {
						rssMax = max(rssMax, rss)
					}
				}
			}
		})
	}
	var profileErr error
	if o.cpuProfile != "" {
		r.CPUProfile = profilePath(o, sc)
		wg.Go(func() { profileErr = fetchProfile(ctx, t.srv.debugAddr, o.duration, r.CPUProfile) })
	}

	load := runLoad(ctx, t.conns, sc, values, o.duration)

	after, err := t.snapshot(ctx)
	stopSampling()
	wg.Wait()
	if err != nil {
		return r, err
	}
	if err := ctx.Err(); err != nil {
		return r, err
	}
	if t.proc != nil && t.proc.Exited() {
		return r, fmt.Errorf("floodgate exited during the run:\n%s", t.proc.logTail())
	}
	if profileErr != nil {
		return r, fmt.Errorf("cpu profile: %w", profileErr)
	}
	if err := r.fill(load, before, after, t); err != nil {
		return r, err
	}
	r.Server.maybeMax(rssMax)

	if runner != nil {
		ceilAfter, ceilAfterDelta, err := runner.run(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return r, ctx.Err()
			}
			r.Notes = append(r.Notes, "no ceiling: "+err.Error())
		} else {
			r.Ceiling = runner.combine(ceilBefore, ceilBeforeDelta, ceilAfter, ceilAfterDelta)
			r.CeilingShare = r.DecisionsPerSec / r.Ceiling.RequestsPerSec
			if lo, hi := min(ceilBefore, ceilAfter), max(ceilBefore, ceilAfter); hi > 1.25*lo {
				r.Notes = append(r.Notes, fmt.Sprintf("the machine's load changed during the scenario: the ceiling was %.0f/s before and %.0f/s after", ceilBefore, ceilAfter))
			}
		}
	}
	return r, nil
}

// warmUp loads the server for -warmup without measuring and, when a ceiling
// is wanted, captures the script call the server sends meanwhile.
func warmUp(ctx context.Context, o *options, t *target, sc scenario, values []string) (scriptCall, error) {
	warmCtx, cancel := context.WithTimeout(ctx, o.warmup)
	defer cancel()
	var call scriptCall
	var err error
	var wg sync.WaitGroup
	if o.ceiling && t.redis != nil {
		wg.Go(func() { call, err = captureScriptCall(warmCtx, t.redisAddr) })
	}
	runLoad(ctx, t.conns, sc, values, o.warmup)
	cancel()
	wg.Wait()
	return call, err
}

// snapshot is the readings taken before and after a measured run.
type snapshot struct {
	serverCPU time.Duration // 0 when the pid is unknown
	serverRSS int64
	redis     redisStats // zero when Redis is unknown
	self      time.Duration
}

func (t *target) snapshot(ctx context.Context) (snapshot, error) {
	s := snapshot{self: selfCPU()}
	var err error
	if t.redis != nil {
		if s.redis, err = readRedisStats(ctx, t.redis); err != nil {
			return s, err
		}
	}
	if t.srv.pid != 0 {
		if s.serverCPU, err = procCPU(t.srv.pid); err != nil {
			return s, fmt.Errorf("server CPU: %w", err)
		}
		if s.serverRSS, err = procRSS(t.srv.pid); err != nil {
			return s, fmt.Errorf("server RSS: %w", err)
		}
	}
	return s, nil
}

// fill sets the figures of a measured run from what the callers saw and
// the readings around it.
func (r *result) fill(load loadResult, before, after snapshot, t *target) error {
	decisions := load.Requests()
	if decisions == 0 {
		msg := "no decision"
		if load.FirstError != nil {
			msg += fmt.Sprintf(": %d calls failed, e.g. %v", load.Errors, load.FirstError)
		}
		return errors.New(msg)
	}
	perDecision := func(d time.Duration) float64 { return micros(d) / float64(decisions) }
	r.DurationSec = load.Elapsed.Seconds()
	r.Decisions = decisions
	r.DecisionsPerSec = float64(decisions) / load.Elapsed.Seconds()
	r.OverLimitShare = float64(load.OverLimit) / float64(decisions)
	r.Errors = load.Errors
	if load.FirstError != nil {
		r.FirstError = load.FirstError.Error()
		r.Notes = append(r.Notes, fmt.Sprintf("%d calls failed, e.g. %v", load.Errors, load.FirstError))
	}
	r.Latency = toLatencyMicros(percentiles(load.Samples))
	r.LoadCPUMicrosPerDecision = perDecision(after.self - before.self)
	if t.srv.pid != 0 {
		r.Server = &serverResult{
			CPUMicrosPerDecision: perDecision(after.serverCPU - before.serverCPU),
			RSSStartMiB:          float64(before.serverRSS) / mib,
			RSSEndMiB:            float64(after.serverRSS) / mib,
			RSSMaxMiB:            float64(max(before.serverRSS, after.serverRSS)) / mib,
		}
	}
	if t.redis != nil {
		d := after.redis.delta(before.redis)
		// Failed calls count as requests here: most reached Redis.
		requests := float64(decisions + load.Errors)
		rd := &redisResult{
			CPUMicrosPerDecision: perDecision(d.CPU),
			CommandsPerRequest:   float64(d.total()) / requests,
			RoundTripsPerRequest: float64(d.scripts()) / requests,
			CallsPerRequest:      map[string]float64{},
		}
		for cmd, n := range d.Calls {
			rd.CallsPerRequest[cmd] = float64(n) / requests
		}
		r.Redis = rd
		switch {
		case rd.CommandsPerRequest < 0.5 && r.Scenario.Limit == limitUnder:
			// Over the limit, the deny cache answers most requests without
			// Redis; under it, every decision writes its counters.
			r.Notes = append(r.Notes, fmt.Sprintf("%.2f Redis commands per request: most requests did not reach this Redis (does the rule file define domain %s with keys %s..?)",
				rd.CommandsPerRequest, r.Scenario.domain(), descriptorKey(0)))
		case d.scripts() == 0:
			r.Notes = append(r.Notes, "the server sent no script call: its round trips cannot be told from INFO (pipelined commands look like separate ones); commands/request still counts them")
		}
	}
	return nil
}

// maybeMax raises the highest RSS to a sample taken during the run.
func (s *serverResult) maybeMax(rss int64) {
	if s != nil {
		s.RSSMaxMiB = max(s.RSSMaxMiB, float64(rss)/mib)
	}
}

// profilePath names the CPU profile of sc: -cpuprofile itself, or with
// -matrix the scenario inserted before the extension.
func profilePath(o *options, sc scenario) string {
	if !o.matrix {
		return o.cpuProfile
	}
	ext := filepath.Ext(o.cpuProfile)
	return fmt.Sprintf("%s-%s-d%d-c%d%s", strings.TrimSuffix(o.cpuProfile, ext), sc.Limit, sc.Descriptors, sc.Concurrency, ext)
}

// fetchProfile saves the server's CPU profile over d (rounded up to whole
// seconds, pprof's unit) from its debug listener.
func fetchProfile(ctx context.Context, debugAddr string, d time.Duration, path string) error {
	seconds := int((d + time.Second - 1) / time.Second)
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debugAddr, seconds)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
