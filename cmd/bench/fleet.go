package main

// The fleet mode (`bench fleet`): a thousand Envoys, simulated. Each
// simulated Envoy is a few goroutines speaking RLS (fleetrls.go) or RLQS
// (fleetquota.go) as Envoy 1.40 does, on a connection of its own, to one of
// -floodgates floodgate processes on Redis single, a Cluster of 3 masters
// or Sentinel (fleetsetup.go). Their requests fall on -buckets buckets
// (one API key each: an RLS descriptor or an RLQS bucket) with a Zipf
// skew, and halfway through, one group of Envoys triples its demand for
// the hottest bucket (fleetdemand.go). Each protocol is a part of its own,
// on the same servers: warmed up, measured, then stopped. The report
// (fleetreport.go) gives per part what each process spent per fleet
// request (fleetmeasure.go), memory per bucket and per stream, and what
// the fleet admitted per window against the limit (fleetwindows.go); with
// -kill-master, a master is killed mid-window (fleetfailover.go).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// Protocols of the fleet mode.
const (
	protoRLS  = "rls"
	protoRLQS = "rlqs"
)

// Redis deployments of the fleet mode.
const (
	redisSingle   = "single"
	redisCluster  = "cluster"
	redisSentinel = "sentinel"
)

// fleetOptions is the fleet mode's command line.
type fleetOptions struct {
	Protocols  []string      `json:"protocols"`
	Envoys     int           `json:"envoys"`
	Buckets    int           `json:"buckets"`
	RLSRate    float64       `json:"rls_rate"`
	RLQSRate   float64       `json:"rlqs_rate"`
	Zipf       float64       `json:"zipf"`
	Limit      int           `json:"limit"`
	Window     time.Duration `json:"window_ns"`
	Shift      bool          `json:"shift"`
	Floodgates int           `json:"floodgates"`
	Redis      string        `json:"redis"`
	Replicas   int           `json:"replicas"`
	// FullCoverage is the Cluster's cluster-require-full-coverage.
	FullCoverage bool          `json:"cluster_require_full_coverage"`
	KillMaster   time.Duration `json:"kill_master_ns,omitempty"`
	Warmup       time.Duration `json:"warmup_ns"`
	Duration     time.Duration `json:"duration_ns"`
	RLSTimeout   time.Duration `json:"rls_timeout_ns"`

	serverBin  string
	serverArgs []string
	json       bool
}

// fleetIntro is what -h says the fleet mode does.
const fleetIntro = "Simulates a fleet of Envoys on RLS and RLQS against floodgate and Redis, and reports what each part costs per fleet request; see docs/capacity.md."

// fleetFlags is the fleet mode's command line: one row per flag, parsed
// into o, protocols and serverArgs.
func fleetFlags(o *fleetOptions, protocols, serverArgs *string) []flagRow {
	return []flagRow{
		flagOf("protocols", protoRLS+","+protoRLQS, "the parts to run, in order: "+protoRLS+" (a ShouldRateLimit call per request), "+protoRLQS+" (a stream per Envoy, reports every 5 s)", protocols),
		flagOf("envoys", 100, "simulated Envoys: one connection each, and for RLQS one stream each", &o.Envoys),
		flagOf("buckets", 1000, "API keys the requests fall on: RLS descriptors, RLQS buckets", &o.Buckets),
		flagOf("rls-rate", 2000, "the RLS fleet's requests a second, all Envoys together: calls to floodgate", &o.RLSRate),
		flagOf("rlqs-rate", 100000, "the RLQS fleet's requests a second, all Envoys together, decided by the Envoys", &o.RLQSRate),
		flagOf("zipf", 1.1, "skew of the demand: bucket k gets 1/(k+1)^zipf of it (0: uniform)", &o.Zipf),
		flagOf("limit", 1000, "each bucket's limit per -window (a fixed window, as the reference counts)", &o.Limit),
		flagOf("window", 10*time.Second, "the limit's window: whole seconds", &o.Window),
		flagOf("shift", true, "halfway through the measured run, the first half of the Envoys triples its demand for the hottest bucket", &o.Shift),
		flagOf("floodgates", 1, "floodgate processes; Envoy i talks to floodgate i mod N", &o.Floodgates),
		flagOf("redis", redisSingle, "the counters' Redis: "+redisSingle+", "+redisCluster+" (3 masters) or "+redisSentinel+" (a master, 3 Sentinels)", &o.Redis),
		flagOf("replicas", 0, "replicas per master (cluster) or of the master (sentinel)", &o.Replicas),
		flagOf("full-coverage", true, "the Cluster's cluster-require-full-coverage (Redis's default, yes): while a master's slots are not served, every node refuses every key", &o.FullCoverage),
		flagOf("kill-master", 0, "kill (SIGKILL) the master holding the hottest bucket's counter this long into the measured run; 0: none", &o.KillMaster),
		flagOf("warmup", 15*time.Second, "load before the measured run: the streams open and the buckets fill", &o.Warmup),
		flagOf("duration", 30*time.Second, "measured run per part", &o.Duration),
		flagOf("rls-timeout", 100*time.Millisecond, "the RLS filter's timeout (examples/envoy.yaml's): an answer later than that is the failure policy's", &o.RLSTimeout),
		flagOf("server-bin", "", "floodgate binary; empty: built from ./cmd/server", &o.serverBin),
		flagOf("server-args", "", "extra flags for every floodgate, after the tool's own ("+strings.Join(serverDefaults, " ")+" and the RLQS bounds the fleet needs)", serverArgs),
		flagOf("json", false, "print JSON instead of text", &o.json),
	}
}

// parseFleetFlags reads the fleet mode's command line.
func parseFleetFlags(args []string, stderr io.Writer) (*fleetOptions, error) {
	o := &fleetOptions{}
	var protocols, serverArgs string
	if _, err := parseCommandLine("bench fleet", fleetIntro, fleetFlags(o, &protocols, &serverArgs), args, stderr); err != nil {
		return nil, err
	}
	o.Protocols = strings.Split(protocols, ",")
	o.serverArgs = strings.Fields(serverArgs)
	return o, o.validate()
}

// validate says what is wrong with the options, naming the flag.
func (o *fleetOptions) validate() error {
	for _, p := range o.Protocols {
		if p != protoRLS && p != protoRLQS {
			return fmt.Errorf("-protocols: %q: want %s or %s", p, protoRLS, protoRLQS)
		}
	}
	switch {
	case o.Envoys < 1 || o.Buckets < 1 || o.Floodgates < 1 || o.Limit < 1:
		return errors.New("-envoys, -buckets, -floodgates and -limit: want at least 1")
	case o.RLSRate <= 0 || o.RLQSRate <= 0:
		return errors.New("-rls-rate and -rlqs-rate: want a positive rate")
	case o.Zipf < 0:
		return fmt.Errorf("-zipf %g: must not be negative", o.Zipf)
	case o.Window < time.Second || o.Window%time.Second != 0:
		return fmt.Errorf("-window %v: want whole seconds", o.Window)
	case o.Redis != redisSingle && o.Redis != redisCluster && o.Redis != redisSentinel:
		return fmt.Errorf("-redis %q: want %s, %s or %s", o.Redis, redisSingle, redisCluster, redisSentinel)
	case o.Replicas < 0 || o.Redis == redisSingle && o.Replicas > 0:
		return fmt.Errorf("-replicas %d: for %s or %s, at least 0", o.Replicas, redisCluster, redisSentinel)
	case o.KillMaster < 0 || o.KillMaster >= o.Duration:
		return fmt.Errorf("-kill-master %v: within the measured run (-duration %v)", o.KillMaster, o.Duration)
	case o.KillMaster > 0 && (o.Redis == redisSingle || o.Replicas == 0):
		return errors.New("-kill-master: needs a replica to promote: -redis cluster or sentinel, -replicas 1")
	case o.KillMaster > 0 && len(o.Protocols) != 1:
		return errors.New("-kill-master: one protocol at a time (-protocols rls or rlqs): the next part would find no replica left")
	case o.Warmup < 0 || o.Duration <= 0 || o.RLSTimeout <= 0:
		return errors.New("-warmup, -duration and -rls-timeout: want positive durations")
	}
	return nil
}

// runFleet runs the fleet mode and returns the exit code.
func runFleet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFleetFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench fleet: %v\n", err)
		return 2
	}
	rep, err := benchFleet(ctx, o, stderr)
	return report(output{stdout: stdout, stderr: stderr, json: o.json, prefix: "bench fleet"}, rep, err, writeFleetText)
}

// benchFleet starts the servers, runs every part and stops what it
// started. Progress goes to log.
func benchFleet(ctx context.Context, o *fleetOptions, log io.Writer) (*fleetReport, error) {
	env, err := startFleetEnv(ctx, o, log)
	if env != nil {
		defer env.stop()
	}
	if err != nil {
		return nil, err
	}
	rep := &fleetReport{Options: *o, Redis: env.redis.describe()}
	for _, p := range o.Protocols {
		fmt.Fprintf(log, "bench fleet: %s: %d Envoys, %d buckets, warm-up %v, measuring %v\n", p, o.Envoys, o.Buckets, o.Warmup, o.Duration)
		part, err := env.runPart(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		rep.Parts = append(rep.Parts, part)
	}
	return rep, nil
}
