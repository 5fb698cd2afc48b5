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
// stops what it started (decisions.go). With -server-addr it drives a
// running server instead and starts nothing. The figures are Linux ones:
// server CPU and RSS come from /proc.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
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
	out := output{stdout: stdout, stderr: stderr, json: o.json, prefix: "bench"}
	switch {
	case o.writeRules != "":
		return out.exit(writeRuleFiles(o.writeRules, o.ruleSpec()))
	case o.reloads > 0:
		rep, err := benchReloads(ctx, o, stderr)
		return report(out, rep, err, writeReloadText)
	case len(o.peers) > 0:
		rep, err := benchPeers(ctx, o, stderr)
		return report(out, rep, err, writePeerTable)
	case o.envoy:
		rep, err := benchEnvoy(ctx, o, stderr)
		return report(out, rep, err, writeEnvoyText)
	}
	results, err := bench(ctx, o, stderr)
	switch {
	case err != nil:
		return out.exit(err)
	case o.matrix:
		return report(out, results, nil, writeTable)
	}
	return report(out, results[0], nil, writeText)
}

// output is where a mode's report goes: stdout, as JSON or as text, and
// its error to stderr after prefix.
type output struct {
	stdout, stderr io.Writer
	json           bool
	prefix         string
}

// exit prints err, if any, and returns the exit code.
func (out output) exit(err error) int {
	if err != nil {
		fmt.Fprintf(out.stderr, "%s: %v\n", out.prefix, err)
		return 1
	}
	return 0
}

// report prints the report of a mode, or its error, and returns the exit
// code.
func report[R any](out output, rep R, err error, text func(io.Writer, R)) int {
	if err == nil && out.json {
		err = writeJSON(out.stdout, rep)
	} else if err == nil {
		text(out.stdout, rep)
	}
	return out.exit(err)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
