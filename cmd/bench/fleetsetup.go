package main

// The fleet mode's servers: its Redis (single, a Cluster of 3 masters, or
// a master watched by 3 Sentinels; with replicas), its rules, and its
// floodgate processes.

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

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// fleetDomain prefixes the rule domain of each part: fleet-rls and
// fleet-rlqs, so that the parts count on counters of their own.
const fleetDomain = "fleet-"

// fleetRedis is the fleet's Redis deployment.
type fleetRedis struct {
	kind string
	// args are the -redis flags floodgate is started with.
	args []string
	// nodes are the data nodes, masters and replicas: their CPU, commands
	// and memory are Redis's share.
	nodes    []*redistest.Server
	clients  []*redis.Client // one per node, for INFO
	cluster  *redistest.Cluster
	sentinel *redistest.Sentinel
}

// fleetServer is one floodgate process of the fleet.
type fleetServer struct {
	proc *child
	srv  server
}

// fleetEnv is what every part runs against.
type fleetEnv struct {
	o          *fleetOptions
	log        io.Writer
	dir        string
	redis      *fleetRedis
	floodgates []fleetServer
	stops      stopList
}

// stop stops what the environment started, in reverse order.
func (env *fleetEnv) stop() { env.stops.run() }

// startFleetEnv starts Redis, writes the rules and starts the floodgates.
// On an error the environment returned holds what to stop.
func startFleetEnv(ctx context.Context, o *fleetOptions, log io.Writer) (*fleetEnv, error) {
	env := &fleetEnv{o: o, log: log}
	dir, err := os.MkdirTemp("", "floodgate-bench-fleet-")
	if err != nil {
		return nil, err
	}
	env.dir = dir
	env.stops.add(func() { os.RemoveAll(dir) })
	if env.redis, err = startFleetRedis(o, dir, log); err != nil {
		return env, err
	}
	env.stops.add(env.redis.stop)
	rules := filepath.Join(dir, "rules")
	if err := writeFleetRules(rules, o); err != nil {
		return env, err
	}
	bin := o.serverBin
	if bin == "" {
		if _, bin, err = setUp(ctx, &options{}, dir, false, true, log, &env.stops); err != nil {
			return env, err
		}
	}
	for i := range o.Floodgates {
		p, srv, err := startServer(ctx, bin, rules, "", append(env.serverArgs(), o.serverArgs...))
		if err != nil {
			return env, fmt.Errorf("floodgate %d: %w", i+1, err)
		}
		env.stops.add(func() { p.Stop(10 * time.Second) })
		env.floodgates = append(env.floodgates, fleetServer{proc: p, srv: srv})
		fmt.Fprintf(log, "bench fleet: floodgate pid %d, gRPC on %s, debug on %s\n", srv.pid, srv.grpcAddr, srv.debugAddr)
	}
	return env, nil
}

// serverArgs are the flags every floodgate gets beyond serverDefaults: its
// Redis, and RLQS bounds that hold the whole fleet.
func (env *fleetEnv) serverArgs() []string {
	o := env.o
	return append(slices.Clone(env.redis.args),
		"-rlqs-max-streams", strconv.Itoa(o.Envoys+16),
		"-rlqs-max-buckets", strconv.Itoa(o.Envoys*o.Buckets+16),
		"-rlqs-max-stream-buckets", strconv.Itoa(o.Buckets+16))
}

// writeFleetRules writes one rule file per part's domain: a fixed window
// of -limit per -window for each api_key value.
func writeFleetRules(dir string, o *fleetOptions) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, p := range []string{protoRLS, protoRLQS} {
		rule := fmt.Sprintf("domain: %s\ndescriptors:\n  - key: %s\n    rate_limit: {unit: second, unit_multiplier: %d, requests_per_unit: %d}\n",
			fleetDomain+p, fleetKey, int(o.Window/time.Second), o.Limit)
		if err := os.WriteFile(filepath.Join(dir, p+".yaml"), []byte(rule), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// startFleetRedis starts the deployment -redis names, with -replicas.
func startFleetRedis(o *fleetOptions, dir string, log io.Writer) (*fleetRedis, error) {
	r := &fleetRedis{kind: o.Redis}
	rdir := filepath.Join(dir, "redis")
	var err error
	switch o.Redis {
	case redisCluster:
		if r.cluster, err = redistest.RunCluster(rdir, 3, o.Replicas, "--cluster-require-full-coverage", yesNo(o.FullCoverage)); err != nil {
			return nil, err
		}
		r.nodes = r.cluster.Nodes
		r.args = []string{"-redis-type", "cluster", "-redis", strings.Join(r.cluster.Addrs, ",")}
	case redisSentinel:
		if r.sentinel, err = redistest.RunSentinel(rdir, o.Replicas, 3, 500*time.Millisecond); err != nil {
			return nil, err
		}
		r.nodes = r.sentinel.Data
		r.args = []string{"-redis-type", "sentinel", "-redis", r.sentinel.URL()}
	default:
		if err := os.Mkdir(rdir, 0o755); err != nil {
			return nil, err
		}
		s, err := redistest.Run(rdir)
		if err != nil {
			return nil, err
		}
		r.nodes = []*redistest.Server{s}
		r.args = []string{"-redis", s.Addr}
	}
	for _, n := range r.nodes {
		r.clients = append(r.clients, redis.NewClient(&redis.Options{Addr: n.Addr, PoolSize: 1, MaxRetries: -1}))
	}
	fmt.Fprintf(log, "bench fleet: redis %s, %d data nodes\n", o.Redis, len(r.nodes))
	return r, nil
}

// yesNo is a boolean as redis.conf writes it.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// stop stops every Redis process.
func (r *fleetRedis) stop() {
	for _, c := range r.clients {
		c.Close()
	}
	switch {
	case r.cluster != nil:
		r.cluster.Stop()
	case r.sentinel != nil:
		r.sentinel.Stop()
	default:
		for _, n := range r.nodes {
			n.Stop()
		}
	}
}

// describe names the deployment for the report.
func (r *fleetRedis) describe() string {
	switch r.kind {
	case redisCluster:
		return fmt.Sprintf("cluster of 3 masters, %d nodes", len(r.nodes))
	case redisSentinel:
		return fmt.Sprintf("sentinel: a master and %d replicas", len(r.nodes)-1)
	}
	return "single node"
}
