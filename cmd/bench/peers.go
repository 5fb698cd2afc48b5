package main

// The -peers mode: floodgate beside the other Envoy rate-limit servers people
// deploy, the reference (envoyproxy/ratelimit) and Kuadrant's Limitador,
// each started once on the same rules, with a private Redis of its own or
// in memory, then measured in interleaved rounds: every scenario of every
// round runs every peer in turn, the order rotating from round to round,
// so that a change of the machine's load falls on all of them.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/floodgate/floodgate/internal/harness"
)

// Kinds of peer servers.
const (
	kindFloodgate = "floodgate"
	kindReference = "reference"
	kindLimitador = "limitador"
	// kindFloor is the gRPC floor of -grpc-floor (floor.go), a child of
	// this tool: no binary, no store, no rules, every call answered OK.
	kindFloor = "floor"
	// kindFloorRedis is the floor with one Redis round trip (a PING) per
	// call before its answer, behind Envoy only: the least any RLS server
	// over Redis adds.
	kindFloorRedis = "floor-redis"
)

// peerKinds are the kinds of peer servers, in the order errors list them.
var peerKinds = []string{kindFloodgate, kindReference, kindLimitador, kindFloor, kindFloorRedis}

// peer is one server of the -peers mode.
type peer struct {
	// Name labels the peer in the report: its kind, or the NAME of
	// NAME=KIND:BIN.
	Name string `json:"name"`
	Kind string `json:"kind"`
	Bin  string `json:"bin"`
}

// parsePeers reads a list of peers given as the flag named flag (-peers or
// -envoy-peers): comma-separated KIND (its binary from -server-bin,
// -reference-bin or -limitador-bin; the floor has none) or NAME=KIND:BIN,
// so that two floodgate builds can be compared too. refused maps the kinds
// the flag's mode cannot run to the reason, which the error gives.
func parsePeers(flag, list string, o *options, refused map[string]string) ([]peer, error) {
	var peers []peer
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		p := peer{Name: item, Kind: item}
		if name, spec, ok := strings.Cut(item, "="); ok {
			kind, bin, ok := strings.Cut(spec, ":")
			if !ok || name == "" || bin == "" {
				return nil, fmt.Errorf("%s %q: %q: want KIND or NAME=KIND:BIN", flag, list, item)
			}
			p = peer{Name: name, Kind: kind, Bin: bin}
		} else {
			switch p.Kind {
			case kindFloodgate:
				p.Bin = o.serverBin // "" builds it
			case kindReference:
				p.Bin = o.referenceBin
			case kindLimitador:
				p.Bin = o.limitadorBin
			}
		}
		if why, ok := refused[p.Kind]; ok {
			return nil, fmt.Errorf("%s: %q: %s", flag, item, why)
		}
		if err := checkPeer(flag, item, p, o, refused); err != nil {
			return nil, err
		}
		if slices.ContainsFunc(peers, func(q peer) bool { return q.Name == p.Name }) {
			return nil, fmt.Errorf("%s: %q named twice", flag, p.Name)
		}
		peers = append(peers, p)
	}
	return peers, nil
}

// checkPeer says what is wrong with the peer p, given as item of the flag.
func checkPeer(flag, item string, p peer, o *options, refused map[string]string) error {
	switch {
	case !slices.Contains(peerKinds, p.Kind):
		var kinds []string
		for _, k := range peerKinds {
			if _, ok := refused[k]; !ok {
				kinds = append(kinds, k)
			}
		}
		return fmt.Errorf("%s: %q: the kind must be %s or %s", flag, item, strings.Join(kinds[:len(kinds)-1], ", "), kinds[len(kinds)-1])
	case (p.Kind == kindFloor || p.Kind == kindFloorRedis) && p.Bin != "":
		return fmt.Errorf("%s: %q: the floor is this tool's own child process, with no binary: give it as %s", flag, item, p.Kind)
	case p.Bin == "" && p.Kind == kindReference:
		return fmt.Errorf("%s: %q needs -reference-bin (envoyproxy/ratelimit's service_cmd) or %s=%s:BIN", flag, item, p.Name, p.Kind)
	case p.Bin == "" && p.Kind == kindLimitador:
		return fmt.Errorf("%s: %q needs -limitador-bin (limitador-server) or %s=%s:BIN", flag, item, p.Name, p.Kind)
	case p.Kind == kindReference && o.store == storeMemory:
		return fmt.Errorf("%s: %q: the reference server keeps counters in Redis or Memcached only, not with -store %s", flag, item, storeMemory)
	}
	return nil
}

// checkPeers validates the options of the -peers mode.
func (o *options) checkPeers(list string) error {
	switch {
	case o.store != storeRedis && o.store != storeMemory:
		return fmt.Errorf("-store %q: want %s or %s", o.store, storeRedis, storeMemory)
	case o.envoy, o.reloads > 0, o.grpcFloor, o.serverAddr != "", o.writeRules != "", o.config != "", o.cpuProfile != "":
		return errors.New("-peers starts its own servers on generated rules: drop -envoy, -reloads, -grpc-floor, -server-addr, -write-rules, -config and -cpuprofile")
	case o.rounds < 1:
		return fmt.Errorf("-rounds %d: want at least 1", o.rounds)
	case o.store == storeMemory && o.redisAddr != "":
		return fmt.Errorf("-store %s keeps counters in the servers: drop -redis-addr", storeMemory)
	case o.redisAddr != "":
		return errors.New("-peers starts a private Redis per server, so that each one's Redis CPU is its own: drop -redis-addr")
	}
	// The ceiling replays floodgate's script call, which the others do
	// not send.
	o.ceiling = false
	var err error
	o.peers, err = parsePeers("-peers", list, o, map[string]string{
		kindFloor:      "the gRPC floor decides nothing, and -peers compares decisions under and over limits: measure it alone with -grpc-floor, or behind Envoy with -envoy -envoy-peers",
		kindFloorRedis: "the gRPC floor decides nothing, and -peers compares decisions under and over limits: measure it behind Envoy with -envoy -envoy-peers",
	})
	return err
}

// peerRound is one peer's result in one round of one scenario.
type peerRound struct {
	Peer  string `json:"peer"`
	Round int    `json:"round"`
	result
}

// peerReport is the -peers mode's output: every run, and per scenario the
// medians by peer.
type peerReport struct {
	Store   string      `json:"store"`
	Rounds  int         `json:"rounds"`
	Peers   []peer      `json:"peers"`
	Runs    []peerRound `json:"runs"`
	Summary []peerRow   `json:"summary"`
}

// peerRow is the summary of one peer in one scenario: medians of the
// rounds, with the lowest and highest, and per-round ratios to the first
// peer.
type peerRow struct {
	Scenario        scenario `json:"scenario"`
	Peer            string   `json:"peer"`
	DecisionsPerSec spread   `json:"decisions_per_sec"`
	ServerCPU       spread   `json:"server_cpu_us_per_decision"`
	RedisCPU        *spread  `json:"redis_cpu_us_per_decision,omitempty"`
	// TotalCPU is server plus Redis CPU per decision.
	TotalCPU spread  `json:"total_cpu_us_per_decision"`
	LoadCPU  spread  `json:"load_cpu_us_per_decision"`
	P99Ms    spread  `json:"p99_ms"`
	Errors   int64   `json:"errors"`
	OverPct  float64 `json:"over_limit_pct"`
	// CPURatio is this peer's TotalCPU over the first peer's, per round;
	// RateRatio the same for decisions/s.
	CPURatio  spread `json:"total_cpu_ratio_to_first"`
	RateRatio spread `json:"decisions_ratio_to_first"`
}

// spread is the median of some rounds' figures with their range.
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

func spreadOf(v []float64) spread {
	if len(v) == 0 {
		return spread{}
	}
	s := slices.Clone(v)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{Median: m, Min: s[0], Max: s[len(s)-1]}
}

// runningPeer is a started peer and what the tool measures it through.
type runningPeer struct {
	peer
	t *target
}

// benchPeers runs the -peers mode. Progress goes to log.
func benchPeers(ctx context.Context, o *options, log io.Writer) (rep *peerReport, err error) {
	var stops stopList
	defer stops.run()
	dir, err := os.MkdirTemp("", "floodgate-bench-peers-")
	if err != nil {
		return nil, err
	}
	stops.add(func() { os.RemoveAll(dir) })
	var running []*runningPeer
	for i, p := range o.peers {
		pdir := filepath.Join(dir, strconv.Itoa(i))
		if err := os.Mkdir(pdir, 0o755); err != nil {
			return nil, err
		}
		t, err := startPeer(ctx, o, p, pdir, log, &stops)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		running = append(running, &runningPeer{peer: p, t: t})
	}
	rep = &peerReport{Store: o.store, Rounds: o.rounds, Peers: o.peers}
	scenarios := o.scenarios()
	for round := range o.rounds {
		for i, sc := range scenarios {
			for k := range running {
				// Rotate the order each round, so that no peer always
				// follows the same one.
				rp := running[(k+round)%len(running)]
				fmt.Fprintf(log, "bench: round %d/%d, [%d/%d] %s: %s\n", round+1, o.rounds, i+1, len(scenarios), sc, rp.Name)
				r, err := measure(ctx, o, rp.t, sc)
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", rp.Name, sc, err)
				}
				if rp.t.proc != nil && rp.t.proc.Exited() {
					return nil, fmt.Errorf("%s exited:\n%s", rp.Name, rp.t.proc.logTail())
				}
				rep.Runs = append(rep.Runs, peerRound{Peer: rp.Name, Round: round + 1, result: r})
			}
		}
	}
	rep.Summary = summarizePeers(rep.Runs, scenarios, o.peers)
	return rep, nil
}

// startPeer starts p on the generated rules in dir, with a private Redis
// unless -store is memory, and returns its target with connections open.
func startPeer(ctx context.Context, o *options, p peer, dir string, log io.Writer, stops *stopList) (*target, error) {
	needRedis := o.store == storeRedis
	redisAddr, bin, err := setUp(ctx, &options{serverBin: p.Bin}, dir, needRedis, p.Kind == kindFloodgate, log, stops)
	if err != nil {
		return nil, err
	}
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = harness.FreeAddr(); err != nil {
			return nil, err
		}
	}
	args, env, err := peerCommand(o, p, dir, redisAddr, addrs)
	if err != nil {
		return nil, err
	}
	proc, err := startChild(p.Name, bin, args, env...)
	if err != nil {
		return nil, err
	}
	stops.add(func() { proc.Stop(10 * time.Second) })
	t := &target{srv: server{grpcAddr: addrs[0], pid: proc.Pid()}, proc: proc, redisAddr: redisAddr}
	if p.Kind == kindFloodgate {
		t.srv.debugAddr = addrs[2]
	}
	if t.conns, err = dial(t.srv.grpcAddr, o.conns); err != nil {
		return nil, err
	}
	stops.add(func() { closeAll(t.conns) })
	if err := harness.WaitReady(ctx, proc.Process, 30*time.Second, answersRLS(t.conns[0])); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, proc.logTail())
	}
	if redisAddr != "" {
		t.redis = redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 2})
		stops.add(func() { t.redis.Close() })
	}
	fmt.Fprintf(log, "bench: %s (%s) pid %d, gRPC on %s, redis %q\n", p.Name, bin, proc.Pid(), addrs[0], redisAddr)
	return t, nil
}

// peerCommand writes p's rules into dir, in the form its kind reads, and
// returns the arguments and environment that start it on them, on Redis at
// redisAddr (or in memory when it is empty) and on the addresses addrs:
// gRPC, HTTP and debug.
func peerCommand(o *options, p peer, dir, redisAddr string, addrs [3]string) (args, env []string, err error) {
	rs := o.ruleSpec()
	switch p.Kind {
	case kindFloodgate:
		config := filepath.Join(dir, "rules")
		if err := writeRuleFiles(config, rs); err != nil {
			return nil, nil, err
		}
		args = []string{"-config", config, "-grpc-addr", addrs[0], "-http-addr", addrs[1], "-debug-addr", addrs[2]}
		if redisAddr != "" {
			args = append(args, "-redis", redisAddr)
		}
		args = append(append(args, serverDefaults...), o.serverArgs...)
	case kindReference:
		config := filepath.Join(dir, "ratelimit", "config")
		if err := os.MkdirAll(filepath.Dir(config), 0o755); err != nil {
			return nil, nil, err
		}
		if err := writeRuleFiles(config, rs); err != nil {
			return nil, nil, err
		}
		env = referenceEnv(dir, redisAddr, addrs)
	case kindLimitador:
		limits := filepath.Join(dir, "limits.yaml")
		if err := writeLimitadorLimits(limits, rs); err != nil {
			return nil, nil, err
		}
		args = limitadorArgs(limits, redisAddr, addrs)
	}
	return args, env, nil
}

// answersRLS is a readiness check for harness.WaitReady that any RLS
// server passes: it answers a request of a domain no rule names.
func answersRLS(cc *grpc.ClientConn) func(context.Context) error {
	req := &pb.RateLimitRequest{Domain: "bench-ready", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "ready", Value: "1"}}},
	}}
	return func(ctx context.Context) error {
		_, err := pb.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, req)
		return err
	}
}

// limitadorArgs is Limitador's command line: gRPC and HTTP on addrs[0] and
// addrs[1], counters in the Redis at redisAddr, or in memory when it is "".
func limitadorArgs(limits, redisAddr string, addrs [3]string) []string {
	rlsHost, rlsPort, _ := net.SplitHostPort(addrs[0])
	httpHost, httpPort, _ := net.SplitHostPort(addrs[1])
	args := []string{"--rls-ip", rlsHost, "--rls-port", rlsPort, "--http-ip", httpHost, "--http-port", httpPort, limits}
	if redisAddr == "" {
		return append(args, "memory")
	}
	return append(args, "redis", "redis://"+redisAddr)
}

// writeLimitadorLimits writes the generated rules in Limitador's format:
// the domain is the namespace, and the i-th descriptor's key (key1, key2,
// ...) a variable, so that every value is its own counter as with the
// other servers. A limit on the i-th descriptor applies only to requests
// that have one: Limitador treats an index past the end as an error.
func writeLimitadorLimits(path string, rs ruleSpec) error {
	var b strings.Builder
	for _, lim := range []string{limitUnder, limitOver} {
		maxValue := underLimitPerSecond
		if lim == limitOver {
			maxValue = 1
		}
		for i := range rs.maxDescriptors {
			cond := "[]"
			if i > 0 {
				cond = fmt.Sprintf("[\"size(descriptors) > %d\"]", i)
			}
			fmt.Fprintf(&b, "- namespace: %s\n  max_value: %d\n  seconds: 1\n  conditions: %s\n  variables: [\"descriptors[%d]['%s']\"]\n",
				scenario{Limit: lim}.domain(), maxValue, cond, i, descriptorKey(i))
		}
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// summarizePeers gives per scenario and peer the medians of the rounds.
func summarizePeers(runs []peerRound, scenarios []scenario, peers []peer) []peerRow {
	var rows []peerRow
	for _, sc := range scenarios {
		// first[round] is the first peer's run of that round.
		first := map[int]peerRound{}
		for _, r := range runs {
			if r.Scenario == sc && r.Peer == peers[0].Name {
				first[r.Round] = r
			}
		}
		for _, p := range peers {
			row := peerRow{Scenario: sc, Peer: p.Name}
			var rate, srv, rd, total, load, p99, cpuRatio, rateRatio []float64
			var decisions, over int64
			for _, r := range runs {
				if r.Scenario != sc || r.Peer != p.Name {
					continue
				}
				tot := runTotalCPU(r.result)
				rate = append(rate, r.DecisionsPerSec)
				if r.Server != nil {
					srv = append(srv, r.Server.CPUMicrosPerDecision)
				}
				if r.Redis != nil {
					rd = append(rd, r.Redis.CPUMicrosPerDecision)
				}
				total = append(total, tot)
				load = append(load, r.LoadCPUMicrosPerDecision)
				p99 = append(p99, r.Latency.P99/1000)
				row.Errors += r.Errors
				decisions += r.Decisions
				over += int64(r.OverLimitShare*float64(r.Decisions) + 0.5)
				if f, ok := first[r.Round]; ok {
					cpuRatio = append(cpuRatio, tot/runTotalCPU(f.result))
					rateRatio = append(rateRatio, r.DecisionsPerSec/f.DecisionsPerSec)
				}
			}
			row.DecisionsPerSec, row.ServerCPU, row.TotalCPU = spreadOf(rate), spreadOf(srv), spreadOf(total)
			row.LoadCPU, row.P99Ms = spreadOf(load), spreadOf(p99)
			row.CPURatio, row.RateRatio = spreadOf(cpuRatio), spreadOf(rateRatio)
			if len(rd) > 0 {
				s := spreadOf(rd)
				row.RedisCPU = &s
			}
			if decisions > 0 {
				row.OverPct = 100 * float64(over) / float64(decisions)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// runTotalCPU is a run's server plus Redis CPU per decision.
func runTotalCPU(r result) float64 {
	var t float64
	if r.Server != nil {
		t += r.Server.CPUMicrosPerDecision
	}
	if r.Redis != nil {
		t += r.Redis.CPUMicrosPerDecision
	}
	return t
}

// writePeerTable prints the summary as one Markdown table.
func writePeerTable(w io.Writer, rep *peerReport) {
	fmt.Fprintf(w, "%d interleaved rounds, store %s; medians, ranges in brackets; ratios per round to %s\n\n",
		rep.Rounds, rep.Store, rep.Peers[0].Name)
	fmt.Fprintln(w, "| limit | desc | conc | server | decisions/s | server µs/dec | Redis µs/dec | server+Redis µs/dec | ÷ first CPU | ÷ first dec/s | loadgen µs/dec | p99 ms | over limit | errors |")
	fmt.Fprintln(w, "|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rep.Summary {
		redisCol := "–"
		if r.RedisCPU != nil {
			redisCol = fmt.Sprintf("%.1f", r.RedisCPU.Median)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %s | %.0f (%.0f-%.0f) | %.1f (%.1f-%.1f) | %s | %.1f (%.1f-%.1f) | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.1f | %.1f | %.1f%% | %d |\n",
			r.Scenario.Limit, r.Scenario.Descriptors, r.Scenario.Concurrency, r.Peer,
			r.DecisionsPerSec.Median, r.DecisionsPerSec.Min, r.DecisionsPerSec.Max,
			r.ServerCPU.Median, r.ServerCPU.Min, r.ServerCPU.Max, redisCol,
			r.TotalCPU.Median, r.TotalCPU.Min, r.TotalCPU.Max,
			r.CPURatio.Median, r.CPURatio.Min, r.CPURatio.Max,
			r.RateRatio.Median, r.RateRatio.Min, r.RateRatio.Max,
			r.LoadCPU.Median, r.P99Ms.Median, r.OverPct, r.Errors)
	}
}
