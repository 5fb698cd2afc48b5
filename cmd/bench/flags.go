package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// options is the command line, as benchFlags reads it: a field's meaning
// is its flag's usage.
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
	envoy            bool
	envoyConfigs     []string
	envoyStores      []string
	envoyConcurrency int
	envoyCounts      []int // -envoys
	envoyPeers       []peer
	// envoyClosed is -rate 0 given explicitly with -envoy: closed loop.
	envoyClosed bool
	// envoyStoresSet is -envoy-stores given explicitly: with -envoy-peers
	// floodgate runs on each of them, else on Redis only.
	envoyStoresSet bool
	envoyHeader    string
	rounds         int

	// The -peers mode (peers.go).
	peers        []peer
	limitadorBin string
	store        string
}

// envoyRate is the -envoy mode's arrival rate: -rate, or envoyDefaultRate
// when -rate is not given. The mode asks what latency the filter adds at a
// load the machine carries, so closed loop takes an explicit -rate 0.
func (o *options) envoyRate() float64 {
	if o.scenario.Rate == 0 && !o.envoyClosed {
		return envoyDefaultRate
	}
	return o.scenario.Rate
}

// benchLists are the flags read as text and turned into options after
// parsing: lists, and the server's extra flags.
type benchLists struct {
	matrixConcurrency, serverArgs string
	envoyConfigs, envoyCounts     string
	envoyPeers, envoyStores       string
	peers                         string
}

// benchIntro is what -h says bench does.
const benchIntro = "Measures floodgate's decisions/s, latency and CPU per decision against Redis, or with -envoy the latency it adds through Envoy; see docs/benchmarks.md."

// benchFlags is bench's command line, the fleet mode's aside: one row per
// flag, parsed into o and l.
func benchFlags(o *options, l *benchLists) []flagRow {
	return []flagRow{
		flagOf("descriptors", 1, "descriptors per request; each has one entry and matches one limit", &o.scenario.Descriptors),
		flagOf("keys", 1000, "distinct values per descriptor key, picked uniformly at random per request (with -envoy: client addresses sent in turn as X-Forwarded-For, each its own token bucket)", &o.scenario.Keys),
		flagOf("limit", limitUnder, "under: a limit never reached (every decision writes); over: 1 per second per key (all but -keys requests a second are denied)", &o.scenario.Limit),
		flagOf("concurrency", 64, "concurrent callers", &o.scenario.Concurrency),
		flagOf("rate", 0, fmt.Sprintf("fixed arrival rate in requests/s (open loop; latency counts from the scheduled send); 0: closed loop. With -envoy %d/s when not given, and closed loop only when -rate 0 is", envoyDefaultRate), &o.scenario.Rate),
		flagOf("matrix", false, "run under/over limit x 1/3 descriptors x -matrix-concurrency and print one Markdown table (ignores -limit, -descriptors, -concurrency)", &o.matrix),
		flagOf("matrix-concurrency", "16,64,256", "comma-separated concurrencies of -matrix", &l.matrixConcurrency),
		flagOf("algorithm", limit.FixedWindow.String(), "algorithm of the generated rules", &o.algorithm),
		flagOf("server-bin", "", "floodgate binary to start; empty: built from ./cmd/server with go build, inside the floodgate module", &o.serverBin),
		flagOf("server-args", "", "extra flags for the started server, space-separated, after the tool's own ("+strings.Join(serverDefaults, " ")+"), e.g. '-redis-pool-size 64'", &l.serverArgs),
		flagOf("config", "", "rule file or directory for the started server; it must define domains bench-under and bench-over with keys key1..keyN. Empty: generated (with -envoy: "+envoyDefaultConfig+", the rules of -envoy-config)", &o.config),
		flagOf("redis-addr", "", "host:port of an existing Redis (TCP) for the started server, the Redis figures and the ceiling; empty: a private redis-server on a free port", &o.redisAddr),
		flagOf("server-addr", "", "gRPC host:port of a running floodgate to drive instead of starting one", &o.serverAddr),
		flagOf("server-pid", 0, "pid of the -server-addr server, for its CPU and RSS", &o.serverPID),
		flagOf("server-debug-addr", "", "debug host:port of the -server-addr server, for -cpuprofile", &o.serverDebugAddr),
		flagOf("grpc-floor", false, "drive, instead of floodgate, a grpc-go server that answers every call OK without deciding (set up as floodgate sets up grpc-go): the least CPU per call any grpc-go server needs under this load (behind Envoy: -envoy -envoy-peers "+kindFloor+")", &o.grpcFloor),
		flagOf("conns", 4, "gRPC connections the callers share", &o.conns),
		flagOf("warmup", 2*time.Second, "load before each measurement, not measured", &o.warmup),
		flagOf("duration", 10*time.Second, "measured load per scenario", &o.duration),
		flagOf("ceiling", true, "measure the ceiling with redis-benchmark before and after each scenario", &o.ceiling),
		flagOf("ceiling-duration", 2500*time.Millisecond, "about how long each of the two ceiling runs lasts", &o.ceilingDuration),
		flagOf("cpuprofile", "", "write the server's CPU profile of the measured run to this file (with -matrix, one file per scenario, the scenario in the name)", &o.cpuProfile),
		flagOf("write-rules", "", "write the generated rule files into this new directory and exit (to serve the same rules from another server, e.g. envoyproxy/ratelimit)", &o.writeRules),
		flagOf("rules", 0, "add that many rules to the generated domain bench-under: key1 with the values v0, v1, ..., each its own rule with its own limit (a large rule set; requests with those values match them)", &o.rules),
		flagOf("reloads", 0, "measure a large rule set instead of decisions: start floodgate (or -reference-bin) on -rules rules, time its start to the first answer, then rewrite the rule file this many times under load at -rate (default "+strconv.Itoa(reloadDefaultRate)+"/s), timing each reload and the decisions meanwhile, with the server's RSS after each step", &o.reloads),
		flagOf("reference-bin", "", "with -reloads: the reference server's binary (envoyproxy/ratelimit's service_cmd) to start instead of floodgate, on the same rules, as RUNTIME_ROOT/ratelimit/config", &o.referenceBin),
		flagOf("settle", 2*time.Second, "with -reloads: the wait after the first answer and after each reload before reading RSS", &o.settle),
		flagOf("json", false, "print JSON (one object, or an array with -matrix) instead of text", &o.json),
		flagOf("envoy", false, "measure the latency floodgate adds to HTTP requests through Envoy: -envoy-config with and without its ratelimit (or rate_limit_quota) filter, alternating, at -rate, for each of -envoy-stores; needs envoy ($ENVOY_BIN or the PATH)", &o.envoy),
		flagOf("envoy-config", "examples/envoy.yaml", "with -envoy: the Envoy bootstrap to run, rewritten for the loopback; its listener "+envoyListener+" must have the ratelimit filter (RLS), or the rate_limit_quota filter (RLQS, examples/envoy-rlqs.yaml). Several, separated by commas, are measured in the same rounds", &l.envoyConfigs),
		flagOf("envoys", "1", "with -envoy: comma-separated numbers of Envoys, each its own process on the same server, sharing the callers; each number is measured in every round", &l.envoyCounts),
		flagOf("envoy-peers", "", "with -envoy: comma-separated servers to put behind Envoy instead of one floodgate per store: "+kindFloodgate+" (-server-bin, or built) and "+kindReference+" (-reference-bin), each on Redis, or NAME=KIND:BIN; without -config they read generated rules for domain demo that no run reaches, in fixed windows. "+kindFloor+" is the server of -grpc-floor, which answers every call OK without deciding and keeps no counters: the latency and CPU any grpc-go RLS server adds through Envoy, at the least; "+kindFloorRedis+" is the floor with one Redis round trip (PING) per call before its answer: what any RLS server over Redis adds, at the least", &l.envoyPeers),
		flagOf("envoy-stores", storeRedis+","+storeMemory, "with -envoy: comma-separated stores of floodgate to measure: "+storeRedis+" (-redis-addr, or a private redis-server), "+storeMemory+"; with -envoy-peers, "+storeRedis+" unless given (the reference runs on "+storeRedis+" only)", &l.envoyStores),
		flagOf("envoy-concurrency", 1, "with -envoy: Envoy's worker threads (--concurrency)", &o.envoyConcurrency),
		flagOf("envoy-header", "", "with -envoy: a request header that carries the request's client address too, e.g. x-api-key, the bucket of examples/envoy-rlqs.yaml and a descriptor of examples/envoy.yaml", &o.envoyHeader),
		flagOf("rounds", 3, "with -envoy or -peers: how many times each case is measured for -duration, cases alternating", &o.rounds),
		flagOf("peers", "", "compare RLS servers in interleaved rounds: comma-separated "+kindFloodgate+" (-server-bin, or built), "+kindReference+" (-reference-bin), "+kindLimitador+" (-limitador-bin) or NAME=KIND:BIN, each started once on the generated rules with a private Redis (or in memory with -store memory), then every scenario measured on each in turn for -rounds rounds; ratios are to the first", &l.peers),
		flagOf("limitador-bin", "", "with -peers: Kuadrant Limitador's limitador-server binary", &o.limitadorBin),
		flagOf("store", storeRedis, "with -peers: where the servers keep counters: "+storeRedis+" (a private redis-server each) or "+storeMemory, &o.store),
	}
}

// flagRow is one flag: its name, its default, its meaning as -h prints it,
// and where its value goes.
type flagRow struct {
	name  string
	def   any // of the type dest points to
	usage string
	dest  any // *int, *float64, *string, *bool or *time.Duration
}

// flagOf is the row of a flag whose default and destination are of type T.
func flagOf[T int | float64 | string | bool | time.Duration](name string, def T, usage string, dest *T) flagRow {
	return flagRow{name: name, def: def, usage: usage, dest: dest}
}

// parseCommandLine parses args into the destinations of rows; -h prints
// intro and the rows. Arguments that are not flags are refused.
func parseCommandLine(name, intro string, rows []flagRow, args []string, stderr io.Writer) (*flag.FlagSet, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: go run ./cmd/%s [flags]\n\n%s\n\nFlags:\n", name, intro)
		fs.PrintDefaults()
	}
	for _, r := range rows {
		switch p := r.dest.(type) {
		case *int:
			fs.IntVar(p, r.name, r.def.(int), r.usage)
		case *float64:
			fs.Float64Var(p, r.name, r.def.(float64), r.usage)
		case *string:
			fs.StringVar(p, r.name, r.def.(string), r.usage)
		case *bool:
			fs.BoolVar(p, r.name, r.def.(bool), r.usage)
		case *time.Duration:
			fs.DurationVar(p, r.name, r.def.(time.Duration), r.usage)
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return fs, nil
}

// parseFlags reads bench's command line and checks it, naming the flag
// that is wrong.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	l := &benchLists{}
	fs, err := parseCommandLine("bench", benchIntro, benchFlags(o, l), args, stderr)
	if err != nil {
		return nil, err
	}
	o.serverArgs = strings.Fields(l.serverArgs)
	if err := o.checkModes(fs, l); err != nil {
		return nil, err
	}
	if err := o.checkScenarios(l.matrixConcurrency); err != nil {
		return nil, err
	}
	if err := o.checkTarget(); err != nil {
		return nil, err
	}
	return o, nil
}

// checkModes checks the flags of the modes other than the default one:
// -rules, -reloads, -peers and -envoy, and the binaries they start.
func (o *options) checkModes(fs *flag.FlagSet, l *benchLists) error {
	switch {
	case o.rules < 0:
		return fmt.Errorf("-rules %d: must not be negative", o.rules)
	case o.reloads < 0:
		return fmt.Errorf("-reloads %d: must not be negative", o.reloads)
	case l.peers != "":
		if err := o.checkPeers(l.peers); err != nil {
			return err
		}
	case o.reloads > 0:
		if err := o.checkReloads(); err != nil {
			return err
		}
	case o.referenceBin != "" && l.envoyPeers == "":
		return errors.New("-reference-bin is for -reloads, -peers and -envoy-peers")
	case o.limitadorBin != "":
		return errors.New("-limitador-bin is for -peers")
	}
	if !o.envoy {
		if l.envoyPeers != "" || l.envoyCounts != "1" {
			return errors.New("-envoy-peers and -envoys are for -envoy")
		}
		return nil
	}
	fs.Visit(func(f *flag.Flag) {
		o.envoyClosed = o.envoyClosed || f.Name == "rate" && o.scenario.Rate == 0
		o.envoyStoresSet = o.envoyStoresSet || f.Name == "envoy-stores"
	})
	return o.checkEnvoy(l)
}

// checkScenarios reads -matrix-concurrency and checks every scenario to
// measure and the algorithm of the generated rules.
func (o *options) checkScenarios(matrixConcurrency string) error {
	for c := range strings.SplitSeq(matrixConcurrency, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 {
			return fmt.Errorf("-matrix-concurrency %q: want positive integers separated by commas", matrixConcurrency)
		}
		o.matrixConcurrency = append(o.matrixConcurrency, n)
	}
	for _, sc := range o.scenarios() {
		if err := sc.validate(); err != nil {
			return err
		}
	}
	var a limit.Algorithm
	if err := a.UnmarshalText([]byte(o.algorithm)); err != nil {
		return fmt.Errorf("-algorithm: %w", err)
	}
	return nil
}

// checkTarget checks the load's flags and those that describe the server
// under load: started by the tool, running already, or the gRPC floor.
func (o *options) checkTarget() error {
	switch {
	case o.conns < 1:
		return fmt.Errorf("-conns %d: want at least 1", o.conns)
	case o.duration <= 0:
		return fmt.Errorf("-duration %v: must be positive", o.duration)
	case o.warmup < 0:
		return fmt.Errorf("-warmup %v: must not be negative", o.warmup)
	case o.ceilingDuration <= 0:
		return fmt.Errorf("-ceiling-duration %v: must be positive", o.ceilingDuration)
	case o.serverAddr == "" && (o.serverPID != 0 || o.serverDebugAddr != ""):
		return errors.New("-server-pid and -server-debug-addr describe a running server: pass -server-addr too")
	case o.serverAddr != "" && (o.serverBin != "" || o.config != "" || len(o.serverArgs) > 0):
		return errors.New("-server-bin, -server-args and -config configure a server the tool starts: drop them with -server-addr")
	case o.grpcFloor && (o.serverAddr != "" || o.serverBin != "" || o.config != "" || len(o.serverArgs) > 0 || o.cpuProfile != "" || o.envoy || o.redisAddr != ""):
		return errors.New("-grpc-floor drives a server of its own, without Redis: drop -server-addr, -server-bin, -server-args, -config, -cpuprofile, -envoy and -redis-addr (behind Envoy, the floor is -envoy -envoy-peers " + kindFloor + ")")
	case o.cpuProfile != "" && o.serverAddr != "" && o.serverDebugAddr == "":
		return errors.New("-cpuprofile with -server-addr needs -server-debug-addr")
	}
	if o.redisAddr != "" && !isHostPort(o.redisAddr) {
		// The tool reads INFO and runs redis-benchmark over TCP; a started
		// server may still reach the same Redis another way.
		return fmt.Errorf("-redis-addr %q: want host:port (for a server on the same Redis's Unix socket, add -server-args=-redis=unix:///PATH)", o.redisAddr)
	}
	return nil
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
func (o *options) checkEnvoy(l *benchLists) error {
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
	for st := range strings.SplitSeq(l.envoyStores, ",") {
		st = strings.TrimSpace(st)
		if st != storeRedis && st != storeMemory || slices.Contains(o.envoyStores, st) {
			return fmt.Errorf("-envoy-stores %q: want %s and/or %s, each once, separated by commas", l.envoyStores, storeRedis, storeMemory)
		}
		o.envoyStores = append(o.envoyStores, st)
	}
	for c := range strings.SplitSeq(l.envoyConfigs, ",") {
		if c = strings.TrimSpace(c); c == "" || slices.Contains(o.envoyConfigs, c) {
			return fmt.Errorf("-envoy-config %q: want bootstrap paths, each once, separated by commas", l.envoyConfigs)
		}
		o.envoyConfigs = append(o.envoyConfigs, c)
	}
	for c := range strings.SplitSeq(l.envoyCounts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > maxEnvoys || slices.Contains(o.envoyCounts, n) {
			return fmt.Errorf("-envoys %q: want numbers from 1 to %d, each once, separated by commas", l.envoyCounts, maxEnvoys)
		}
		o.envoyCounts = append(o.envoyCounts, n)
	}
	if l.envoyPeers != "" {
		return o.checkEnvoyPeers(l.envoyPeers)
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
