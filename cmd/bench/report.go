package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// result is the report of one scenario; its JSON form is the -json output.
type result struct {
	// Target is "grpc-floor" for the -grpc-floor server, empty for
	// floodgate or a -server-addr server.
	Target    string   `json:"target,omitempty"`
	Scenario  scenario `json:"scenario"`
	Algorithm string   `json:"algorithm,omitempty"` // of the generated rules; "" with -config
	// DurationSec is the measured time, from the first send to the last
	// answer (warm-up excluded).
	DurationSec float64 `json:"duration_s"`
	// Decisions counts answered requests (OK or OVER_LIMIT).
	Decisions       int64   `json:"decisions"`
	DecisionsPerSec float64 `json:"decisions_per_sec"`
	// OverLimitShare is the share of decisions answered OVER_LIMIT.
	OverLimitShare float64 `json:"over_limit_share"`
	// Errors counts failed calls; FirstError is one of them.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Latency covers every call, in µs, exact from all samples.
	Latency latencyMicros `json:"latency_us"`
	// Server is nil when the server's pid is unknown (-server-addr without
	// -server-pid).
	Server *serverResult `json:"server,omitempty"`
	// Redis is nil when the Redis address is unknown.
	Redis *redisResult `json:"redis,omitempty"`
	// LoadCPUMicrosPerDecision is this tool's own CPU (getrusage), which
	// shares the machine with the server and Redis.
	LoadCPUMicrosPerDecision float64 `json:"load_cpu_us_per_decision"`
	// Ceiling is nil when it was not measured (see Notes).
	Ceiling *ceiling `json:"ceiling,omitempty"`
	// CeilingShare is DecisionsPerSec / Ceiling.RequestsPerSec.
	CeilingShare float64 `json:"ceiling_share,omitempty"`
	// CPUProfile is the file holding the server's CPU profile of the run.
	CPUProfile string `json:"cpu_profile,omitempty"`
	// Notes are what the reader must know to trust the figures.
	Notes []string `json:"notes,omitempty"`
}

type latencyMicros struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p99_9"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

type serverResult struct {
	// CPUMicrosPerDecision is utime+stime from /proc/<pid>/stat over the
	// run, per decision (10 ms resolution over the whole run).
	CPUMicrosPerDecision float64 `json:"cpu_us_per_decision"`
	// RSS (VmRSS) at the start and end of the run and its highest sample
	// (every 250 ms), in MiB.
	RSSStartMiB float64 `json:"rss_start_mib"`
	RSSEndMiB   float64 `json:"rss_end_mib"`
	RSSMaxMiB   float64 `json:"rss_max_mib"`
}

type redisResult struct {
	// CPUMicrosPerDecision is the delta of INFO cpu (user + sys, every
	// thread) per decision.
	CPUMicrosPerDecision float64 `json:"cpu_us_per_decision"`
	// CommandsPerRequest counts every command per request (INFO
	// commandstats delta, without the tool's INFO calls), including the
	// commands scripts run.
	CommandsPerRequest float64 `json:"commands_per_request"`
	// RoundTripsPerRequest counts script calls per request: floodgate
	// sends nothing else and does not pipeline.
	RoundTripsPerRequest float64 `json:"round_trips_per_request"`
	// CallsPerRequest breaks CommandsPerRequest down by command.
	CallsPerRequest map[string]float64 `json:"calls_per_request"`
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func toLatencyMicros(l latencies) latencyMicros {
	return latencyMicros{P50: micros(l.P50), P90: micros(l.P90), P99: micros(l.P99), P999: micros(l.P999), Max: micros(l.Max), Mean: micros(l.Mean)}
}

const mib = 1 << 20

// writeText prints one result for a reader.
func writeText(w io.Writer, r result) {
	mode := "closed loop"
	if r.Scenario.Rate > 0 {
		mode = "open loop"
	}
	title := "floodgate bench"
	if r.Target == targetFloor {
		title = "grpc floor (answers without deciding)"
	}
	fmt.Fprintf(w, "%s: %s, %s, %.1fs measured\n", title, r.Scenario, mode, r.DurationSec)
	fmt.Fprintf(w, "  decisions        %d (%.0f/s), %.1f%% over limit, %d errors\n",
		r.Decisions, r.DecisionsPerSec, 100*r.OverLimitShare, r.Errors)
	l := r.Latency
	fmt.Fprintf(w, "  latency          p50 %s  p90 %s  p99 %s  p99.9 %s  max %s  mean %s\n",
		ms(l.P50), ms(l.P90), ms(l.P99), ms(l.P999), ms(l.Max), ms(l.Mean))
	if s := r.Server; s != nil {
		fmt.Fprintf(w, "  server           CPU %.1f µs/decision, RSS %.1f -> %.1f MiB (max %.1f)\n",
			s.CPUMicrosPerDecision, s.RSSStartMiB, s.RSSEndMiB, s.RSSMaxMiB)
	} else {
		fmt.Fprintf(w, "  server           CPU and RSS unknown (pass -server-pid)\n")
	}
	if rd := r.Redis; rd != nil {
		fmt.Fprintf(w, "  redis            CPU %.1f µs/decision, %.2f round trips/request, %.2f commands/request (%s)\n",
			rd.CPUMicrosPerDecision, rd.RoundTripsPerRequest, rd.CommandsPerRequest, callsText(rd.CallsPerRequest))
	} else if r.Target == targetFloor {
		fmt.Fprintf(w, "  redis            none (the floor decides nothing)\n")
	} else {
		fmt.Fprintf(w, "  redis            unknown (pass -redis-addr)\n")
	}
	fmt.Fprintf(w, "  load generator   CPU %.1f µs/decision\n", r.LoadCPUMicrosPerDecision)
	if c := r.Ceiling; c != nil {
		fmt.Fprintf(w, "  ceiling          %.0f script calls/s (%.0f before, %.0f after; Redis CPU %.1f µs/call); floodgate reached %.0f%% of it\n",
			c.RequestsPerSec, c.BeforePerSec, c.AfterPerSec, c.RedisCPUMicrosPerCall, 100*r.CeilingShare)
		fmt.Fprintf(w, "                   %s\n", c.Command)
	}
	if r.CPUProfile != "" {
		fmt.Fprintf(w, "  cpu profile      %s (go tool pprof %s)\n", r.CPUProfile, r.CPUProfile)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// callsText lists calls per request by command, most frequent first,
// leaving out those too rare to show in two decimals (such as the HELLO of
// a new connection).
func callsText(calls map[string]float64) string {
	cmds := slices.DeleteFunc(slices.Collect(maps.Keys(calls)), func(c string) bool { return calls[c] < 0.005 })
	slices.SortFunc(cmds, func(a, b string) int {
		if calls[a] != calls[b] {
			if calls[a] > calls[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(cmds))
	for i, c := range cmds {
		parts[i] = fmt.Sprintf("%s %.2f", c, calls[c])
	}
	return strings.Join(parts, ", ")
}

func ms(us float64) string { return fmt.Sprintf("%.3fms", us/1000) }

// writeTable prints results as one Markdown table, the form
// docs/benchmarks.md records, then every result's notes.
func writeTable(w io.Writer, rs []result) {
	fmt.Fprintln(w, "| limit | desc | conc | decisions/s | p50 ms | p90 ms | p99 ms | p99.9 ms | server µs/dec | Redis µs/dec | Redis RT/req | Redis cmds/req | loadgen µs/dec | ceiling calls/s | % of ceiling | RSS MiB | over limit | errors |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rs {
		srvCPU, rss := "-", "-"
		if s := r.Server; s != nil {
			srvCPU, rss = fmt.Sprintf("%.1f", s.CPUMicrosPerDecision), fmt.Sprintf("%.1f", s.RSSEndMiB)
		}
		redisCPU, trips, cmds := "-", "-", "-"
		if rd := r.Redis; rd != nil {
			redisCPU = fmt.Sprintf("%.1f", rd.CPUMicrosPerDecision)
			trips = fmt.Sprintf("%.2f", rd.RoundTripsPerRequest)
			cmds = fmt.Sprintf("%.2f", rd.CommandsPerRequest)
		}
		ceil, share := "-", "-"
		if c := r.Ceiling; c != nil {
			ceil, share = fmt.Sprintf("%.0f", c.RequestsPerSec), fmt.Sprintf("%.0f%%", 100*r.CeilingShare)
		}
		l := r.Latency
		fmt.Fprintf(w, "| %s | %d | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %s | %s | %s | %s | %.1f | %s | %s | %s | %.1f%% | %d |\n",
			r.Scenario.Limit, r.Scenario.Descriptors, r.Scenario.Concurrency, r.DecisionsPerSec,
			l.P50/1000, l.P90/1000, l.P99/1000, l.P999/1000,
			srvCPU, redisCPU, trips, cmds, r.LoadCPUMicrosPerDecision, ceil, share, rss,
			100*r.OverLimitShare, r.Errors)
	}
	for _, r := range rs {
		for _, n := range r.Notes {
			fmt.Fprintf(w, "\nnote (%s): %s", r.Scenario, n)
		}
	}
	fmt.Fprintln(w)
}
