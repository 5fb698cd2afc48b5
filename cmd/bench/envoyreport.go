package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// envoyReport is the result of the -envoy mode; its JSON form is the
// -json output.
type envoyReport struct {
	// Envoy is the version `envoy --version` reports.
	Envoy string `json:"envoy"`
	// Header is the request header carrying the client address besides
	// X-Forwarded-For (-envoy-header), if any.
	Header string `json:"header,omitempty"`
	// RatePerSec is the fixed arrival rate of every run (open loop), 0 in
	// closed loop.
	RatePerSec float64 `json:"rate_per_sec"`
	// Callers bounds the requests in flight (-concurrency); in closed loop
	// it is the number of requests in flight.
	Callers int `json:"callers"`
	// EnvoyConcurrency is each Envoy's worker thread count.
	EnvoyConcurrency int `json:"envoy_concurrency"`
	// ClientAddresses is how many X-Forwarded-For addresses the requests
	// take in turn, each its own token bucket in the demo rules.
	ClientAddresses int `json:"client_addresses"`
	// Rounds is how many times each case was measured, DurationSec how
	// long each time (warm-up excluded).
	Rounds      int                `json:"rounds"`
	DurationSec float64            `json:"duration_s"`
	Stores      []envoyStoreResult `json:"stores"`
}

// envoyStoreResult compares, for one setup (a server on a store behind
// one Envoy bootstrap) and one count of Envoys, requests through Envoy
// with the filter and without it.
type envoyStoreResult struct {
	// Name labels the setup (see envoySetup.name).
	Name   string `json:"name"`
	Server string `json:"server"`
	// Store is where the server keeps counters: redis or memory; "" for
	// the gRPC floor (-envoy-peers floor), which keeps none; redis for
	// floor-redis, which pings it.
	Store string `json:"store"`
	// Config is the Envoy bootstrap, Filter the filter compared:
	// envoy.filters.http.ratelimit (RLS: the server decides every request)
	// or envoy.filters.http.rate_limit_quota (RLQS: Envoy decides from
	// floodgate's assignments).
	Config string `json:"config"`
	Filter string `json:"filter"`
	// Envoys is how many Envoys, each its own process on the same server,
	// shared the callers.
	Envoys  int             `json:"envoys"`
	With    envoyCaseResult `json:"with_filter"`
	Without envoyCaseResult `json:"without_filter"`
	// Added is what the filter adds: each percentile of With minus the
	// same percentile of Without, over all rounds. It is a difference of
	// percentiles, not a percentile of differences, which no one can
	// measure: a request goes through one listener or the other.
	Added latencyMicros `json:"added_us"`
	// AddedPerRound is Added round by round, which shows how much the
	// machine's noise moves it.
	AddedPerRound []latencyMicros `json:"added_per_round_us"`
	// RateLimit is the ratelimit filter's counters over the with-filter
	// runs (ok, over_limit, error, failure_mode_allowed): ok should equal
	// With.Requests, or some requests were let through undecided.
	RateLimit map[string]int64 `json:"envoy_ratelimit"`
	// ServerLatency is floodgate's own time to answer ShouldRateLimit
	// over the with-filter runs, from its decision histogram; nil for the
	// reference server, the floor and with RLQS.
	ServerLatency *serverLatency `json:"server_latency_us,omitempty"`
	// Notes are what the reader must know to trust the figures.
	Notes []string `json:"notes,omitempty"`
}

// serverLatency summarizes floodgate's decision histogram, in µs. The
// percentiles are interpolated inside its buckets (0.1, 0.25, 0.5, 1,
// 2.5 ms …), so they are estimates; the mean is exact.
type serverLatency struct {
	Decisions int64   `json:"decisions"`
	Mean      float64 `json:"mean"`
	P50       float64 `json:"p50"`
	P90       float64 `json:"p90"`
	P99       float64 `json:"p99"`
}

// envoyCaseResult is one case (a setup, with or without the filter) over
// all rounds.
type envoyCaseResult struct {
	// Requests counts the requests sent; OK those answered 200, TooMany
	// those answered 429, Errors the rest (FirstError is one of them).
	Requests   int64  `json:"requests"`
	OK         int64  `json:"ok"`
	TooMany    int64  `json:"too_many"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// PerSec is Requests over the summed run time: in closed loop, the
	// most the setup passed.
	PerSec float64 `json:"requests_per_sec"`
	// PerSecByRound is each round's requests over its run time, which
	// shows how much the machine's load moved PerSec.
	PerSecByRound []float64 `json:"requests_per_sec_by_round"`
	// Latency covers every request, from the moment it left to the end of
	// its body, in µs.
	Latency latencyMicros `json:"latency_us"`
	// SendLag is how late requests left after their scheduled time, in µs:
	// the load generator's timer wake-ups, and more when every caller was
	// waiting for an answer. Zero in closed loop.
	SendLag latencyMicros `json:"send_lag_us"`
	// SendLagP99ByRound is SendLag's p99 round by round, in µs: a round
	// whose load generator was held up (above about 2 ms) says nothing of
	// the servers' latency, while the others of the run may.
	SendLagP99ByRound []float64 `json:"send_lag_p99_by_round_us"`
	// EnvoyCPUMicrosPerRequest is the Envoys' CPU (/proc, every thread)
	// per request; ServerCPUMicrosPerRequest the rate-limit server's;
	// RedisCPUMicrosPerRequest Redis's (INFO cpu, user + sys), nil without
	// Redis. The server and Redis work without the filter too (health
	// checks, RLQS reports of earlier runs' buckets).
	EnvoyCPUMicrosPerRequest  float64  `json:"envoy_cpu_us_per_request"`
	ServerCPUMicrosPerRequest float64  `json:"server_cpu_us_per_request"`
	RedisCPUMicrosPerRequest  *float64 `json:"redis_cpu_us_per_request,omitempty"`
	// Cores is each part's CPU over the run time: how many of the
	// machine's cores it kept busy.
	Cores cpuShares `json:"cores"`
}

// cpuShares is CPU time over run time, in cores, by part. Bench is the
// tool's process: the load generator and the backend. Machine is every
// core's busy time (/proc/stat), so Machine minus the rest is what other
// processes of the machine took.
type cpuShares struct {
	Envoy   float64 `json:"envoy"`
	Server  float64 `json:"server"`
	Redis   float64 `json:"redis"`
	Bench   float64 `json:"bench"`
	Machine float64 `json:"machine"`
}

// minus returns l's figures minus b's.
func (l latencyMicros) minus(b latencyMicros) latencyMicros {
	return latencyMicros{
		P50: l.P50 - b.P50, P90: l.P90 - b.P90, P99: l.P99 - b.P99, P999: l.P999 - b.P999,
		Max: l.Max - b.Max, Mean: l.Mean - b.Mean,
	}
}

// result pools the case's rounds; withRedis says whether its Redis CPU
// was read.
func (c caseRuns) result(withRedis bool) envoyCaseResult {
	var r envoyCaseResult
	var elapsed time.Duration
	var samples, lags []int64
	for _, run := range c.runs {
		r.OK += run.OK
		r.TooMany += run.OverLimit
		r.Errors += run.Errors
		if r.FirstError == "" && run.FirstError != nil {
			r.FirstError = run.FirstError.Error()
		}
		elapsed += run.Elapsed
		if run.Elapsed > 0 {
			r.PerSecByRound = append(r.PerSecByRound, float64(len(run.Samples))/run.Elapsed.Seconds())
		}
		// A copy: percentiles sorts in place, and the run keeps its lags
		// in send order.
		r.SendLagP99ByRound = append(r.SendLagP99ByRound, toLatencyMicros(percentiles(slices.Clone(run.SendLags))).P99)
		samples = append(samples, run.Samples...)
		lags = append(lags, run.SendLags...)
	}
	r.Requests = int64(len(samples))
	if r.Requests == 0 {
		return r
	}
	perReq := func(d time.Duration) float64 { return micros(d) / float64(r.Requests) }
	share := func(d time.Duration) float64 { return d.Seconds() / elapsed.Seconds() }
	r.PerSec = float64(r.Requests) / elapsed.Seconds()
	r.Latency = toLatencyMicros(percentiles(samples))
	r.SendLag = toLatencyMicros(percentiles(lags))
	r.EnvoyCPUMicrosPerRequest = perReq(c.cpu.envoy)
	r.ServerCPUMicrosPerRequest = perReq(c.cpu.server)
	if withRedis {
		v := perReq(c.cpu.redis)
		r.RedisCPUMicrosPerRequest = &v
	}
	r.Cores = cpuShares{Envoy: share(c.cpu.envoy), Server: share(c.cpu.server), Redis: share(c.cpu.redis),
		Bench: share(c.cpu.bench), Machine: share(c.cpu.machine)}
	return r
}

// envoyReportOf gathers the setups' runs into the report.
func envoyReportOf(o *options, version string, load *httpLoad, setups []*envoySetup) *envoyReport {
	rep := &envoyReport{
		Envoy:            version,
		Header:           o.envoyHeader,
		RatePerSec:       load.rate,
		Callers:          load.concurrency,
		EnvoyConcurrency: o.envoyConcurrency,
		ClientAddresses:  len(load.clients),
		Rounds:           o.rounds,
		DurationSec:      o.duration.Seconds(),
	}
	for _, s := range setups {
		for _, c := range s.counts {
			r := c.result(s)
			r.Name = s.name(len(o.envoyPeers) > 0, len(o.envoyConfigs) > 1)
			rep.Stores = append(rep.Stores, r)
		}
	}
	return rep
}

// result compares the count's cases and says what would make the
// comparison wrong.
func (c *envoyCount) result(s *envoySetup) envoyStoreResult {
	r := envoyStoreResult{Server: s.server.Name, Store: s.store, Config: s.config, Filter: s.filter, Envoys: c.n, RateLimit: c.rateLimit}
	// Per round first: percentiles sorts the samples it is given, and the
	// pooled figures copy them.
	for i := range min(len(c.with.runs), len(c.without.runs)) {
		w := toLatencyMicros(percentiles(c.with.runs[i].Samples))
		wo := toLatencyMicros(percentiles(c.without.runs[i].Samples))
		r.AddedPerRound = append(r.AddedPerRound, w.minus(wo))
	}
	withRedis := s.store == storeRedis
	r.With, r.Without = c.with.result(withRedis), c.without.result(withRedis)
	r.Added = r.With.Latency.minus(r.Without.Latency)
	if h := c.latency; h.count > 0 {
		us := func(sec float64) float64 { return sec * 1e6 }
		r.ServerLatency = &serverLatency{Decisions: int64(h.count), Mean: us(h.mean()),
			P50: us(h.quantile(0.5)), P90: us(h.quantile(0.9)), P99: us(h.quantile(0.99))}
	}
	r.Notes = envoyNotes(r, s.filter)
	return r
}

// envoyNotes lists what makes a setup's figures doubtful: answers other
// than 200, and requests the ratelimit filter let through without the
// server's decision (Envoy fails open on an error or a timeout, so they
// still answer 200, faster or slower than a decision). The quota filter
// (RLQS) decides every request itself and has no counters to check.
func envoyNotes(r envoyStoreResult, filter string) []string {
	var notes []string
	for _, c := range []struct {
		name string
		res  envoyCaseResult
	}{{"with the filter", r.With}, {"without the filter", r.Without}} {
		if c.res.TooMany > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d of %d requests answered 429: the client addresses reached their limit (raise -keys or lower -rate)", c.name, c.res.TooMany, c.res.Requests))
		}
		if c.res.Errors > 0 {
			notes = append(notes, fmt.Sprintf("%s: %d of %d requests failed, e.g. %s", c.name, c.res.Errors, c.res.Requests, c.res.FirstError))
		}
	}
	decided := r.RateLimit["ok"] + r.RateLimit["over_limit"]
	if filter == rateLimitFilter && decided != r.With.Requests {
		notes = append(notes, fmt.Sprintf("the server decided %d of the %d requests through the filter (Envoy's ratelimit counters: %s): the others were let through without a decision",
			decided, r.With.Requests, countersText(r.RateLimit)))
	}
	return notes
}

// envoyRelease shortens what `envoy --version` says to the release, e.g.
// 1.40.0 from 9e55…/1.40.0/Clean/RELEASE/BoringSSL.
func envoyRelease(version string) string {
	if parts := strings.Split(version, "/"); len(parts) > 2 {
		return parts[1]
	}
	return version
}

// countersText prints counters as "name n, ..." in name order.
func countersText(c map[string]int64) string {
	names := slices.Sorted(maps.Keys(c))
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, c[n])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// writeEnvoyText prints the -envoy report as the Markdown tables
// docs/benchmarks.md records: latency and CPU per request, then each
// part's share of the cores, then each round's added p50 and p99, the
// filter's counters, the server's own latency and the notes.
func writeEnvoyText(w io.Writer, rep *envoyReport) {
	header := ""
	if rep.Header != "" {
		header = " (also as " + rep.Header + ")"
	}
	load := fmt.Sprintf("at %g/s (open loop, at most %d in flight)", rep.RatePerSec, rep.Callers)
	if rep.RatePerSec == 0 {
		load = fmt.Sprintf("closed loop, %d callers", rep.Callers)
	}
	fmt.Fprintf(w, "floodgate bench -envoy: Envoy %s, %d worker(s) each; GET / %s from %d client addresses%s; %d round(s) of %gs per case, with and without the filter alternating\n\n",
		envoyRelease(rep.Envoy), rep.EnvoyConcurrency, load, rep.ClientAddresses, header, rep.Rounds, rep.DurationSec)
	fmt.Fprintln(w, "| setup | Envoys | filter | requests | req/s | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | non-200 | send lag p99 ms | Envoy CPU µs/req | server CPU µs/req | Redis CPU µs/req |")
	fmt.Fprintln(w, "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range rep.Stores {
		for _, c := range s.cases() {
			l := c.res.Latency
			fmt.Fprintf(w, "| %s | %d | %s | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %d | %.3f | %.1f | %.1f | %s |\n",
				s.Name, s.Envoys, c.name, c.res.Requests, c.res.PerSec, l.P50/1000, l.P90/1000, l.P99/1000, l.P999/1000, l.Max/1000,
				c.res.TooMany+c.res.Errors, c.res.SendLag.P99/1000, c.res.EnvoyCPUMicrosPerRequest, c.res.ServerCPUMicrosPerRequest,
				optional(c.res.RedisCPUMicrosPerRequest))
		}
		a := s.Added
		fmt.Fprintf(w, "| %s | %d | **added** | | | **%+.3f** | %+.3f | **%+.3f** | %+.3f | %+.3f | | | %+.1f | | |\n",
			s.Name, s.Envoys, a.P50/1000, a.P90/1000, a.P99/1000, a.P999/1000, a.Max/1000,
			s.With.EnvoyCPUMicrosPerRequest-s.Without.EnvoyCPUMicrosPerRequest)
	}
	fmt.Fprintln(w)
	writeCoresTable(w, rep)
	for _, s := range rep.Stores {
		rounds := make([]string, len(s.AddedPerRound))
		for i, a := range s.AddedPerRound {
			rounds[i] = fmt.Sprintf("%+.3f / %+.3f", a.P50/1000, a.P99/1000)
			if i < len(s.With.SendLagP99ByRound) && i < len(s.Without.SendLagP99ByRound) {
				rounds[i] += fmt.Sprintf(" (send lag p99 %.1f / %.1f)", s.With.SendLagP99ByRound[i]/1000, s.Without.SendLagP99ByRound[i]/1000)
			}
		}
		fmt.Fprintf(w, "%s, %d Envoy(s): added p50 / p99 ms by round: %s; Envoy's ratelimit counters: %s\n",
			s.Name, s.Envoys, strings.Join(rounds, ", "), countersText(s.RateLimit))
		if l := s.ServerLatency; l != nil {
			fmt.Fprintf(w, "%s, %d Envoy(s): floodgate's own time per decision (%s, %d decisions): mean %.0f µs, p50 ≈ %.0f, p90 ≈ %.0f, p99 ≈ %.0f µs (interpolated in its buckets)\n",
				s.Name, s.Envoys, decisionMetric, l.Decisions, l.Mean, l.P50, l.P90, l.P99)
		}
	}
	for _, s := range rep.Stores {
		for _, n := range s.Notes {
			fmt.Fprintf(w, "note (%s, %d Envoy(s)): %s\n", s.Name, s.Envoys, n)
		}
	}
}

// namedCase is one case of a setup's rows: its label and its result.
type namedCase struct {
	name string
	res  envoyCaseResult
}

// cases returns the setup's two cases in the order the tables print
// them: without the filter, then with it.
func (s envoyStoreResult) cases() [2]namedCase {
	return [2]namedCase{{"without", s.Without}, {"with " + filterLabel(s.Filter), s.With}}
}

// writeCoresTable prints how many cores each part kept busy per case, and
// what the rest of the machine took: on a shared machine, what bounds a
// closed loop.
func writeCoresTable(w io.Writer, rep *envoyReport) {
	fmt.Fprintln(w, "| setup | Envoys | filter | req/s (by round) | Envoy cores | server cores | Redis cores | bench (load + backend) cores | machine busy cores | others cores |")
	fmt.Fprintln(w, "|---|--:|---|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range rep.Stores {
		for _, c := range s.cases() {
			k := c.res.Cores
			fmt.Fprintf(w, "| %s | %d | %s | %.0f (%s) | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
				s.Name, s.Envoys, c.name, c.res.PerSec, roundsText(c.res.PerSecByRound), k.Envoy, k.Server, k.Redis, k.Bench, k.Machine,
				k.Machine-k.Envoy-k.Server-k.Redis-k.Bench)
		}
	}
	fmt.Fprintln(w)
}

// optional prints v with one decimal, or "-" when nil.
func optional(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *v)
}

// roundsText prints per-round rates as "1200, 1150, 1230".
func roundsText(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, ", ")
}
