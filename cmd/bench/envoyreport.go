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
	// Filter is the filter compared, with it and without:
	// envoy.filters.http.ratelimit (RLS: floodgate decides every request)
	// or envoy.filters.http.rate_limit_quota (RLQS: Envoy decides from
	// floodgate's assignments).
	Filter string `json:"filter"`
	// Header is the request header carrying the client address besides
	// X-Forwarded-For (-envoy-header), if any.
	Header string `json:"header,omitempty"`
	// RatePerSec is the fixed arrival rate of every run (open loop).
	RatePerSec float64 `json:"rate_per_sec"`
	// Callers bounds the requests in flight (-concurrency).
	Callers int `json:"callers"`
	// EnvoyConcurrency is Envoy's worker thread count.
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

// envoyStoreResult compares, for one store, requests through Envoy with
// the ratelimit filter and without it.
type envoyStoreResult struct {
	Store   string          `json:"store"`
	With    envoyCaseResult `json:"with_filter"`
	Without envoyCaseResult `json:"without_filter"`
	// Added is what floodgate adds: each percentile of With minus the same
	// percentile of Without, over all rounds. It is a difference of
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
	// FloodgateCPUMicrosPerRequest is floodgate's CPU (/proc) over the
	// with-filter runs per request.
	FloodgateCPUMicrosPerRequest float64 `json:"floodgate_cpu_us_per_request"`
	// Notes are what the reader must know to trust the figures.
	Notes []string `json:"notes,omitempty"`
}

// envoyCaseResult is one case (a store, with or without the filter) over
// all rounds.
type envoyCaseResult struct {
	// Requests counts the requests sent; OK those answered 200, TooMany
	// those answered 429, Errors the rest (FirstError is one of them).
	Requests   int64  `json:"requests"`
	OK         int64  `json:"ok"`
	TooMany    int64  `json:"too_many"`
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// PerSec is Requests over the summed run time.
	PerSec float64 `json:"requests_per_sec"`
	// Latency covers every request, from the moment it left to the end of
	// its body, in µs.
	Latency latencyMicros `json:"latency_us"`
	// SendLag is how late requests left after their scheduled time, in µs:
	// the load generator's timer wake-ups, up to about 1 ms, and more when
	// every caller was waiting for an answer.
	SendLag latencyMicros `json:"send_lag_us"`
	// EnvoyCPUMicrosPerRequest is Envoy's CPU (/proc, every thread) per
	// request.
	EnvoyCPUMicrosPerRequest float64 `json:"envoy_cpu_us_per_request"`
}

// minus returns l's figures minus b's.
func (l latencyMicros) minus(b latencyMicros) latencyMicros {
	return latencyMicros{
		P50: l.P50 - b.P50, P90: l.P90 - b.P90, P99: l.P99 - b.P99, P999: l.P999 - b.P999,
		Max: l.Max - b.Max, Mean: l.Mean - b.Mean,
	}
}

// result pools the case's rounds.
func (c caseRuns) result() envoyCaseResult {
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
		samples = append(samples, run.Samples...)
		lags = append(lags, run.SendLags...)
	}
	r.Requests = int64(len(samples))
	if r.Requests == 0 {
		return r
	}
	r.PerSec = float64(r.Requests) / elapsed.Seconds()
	r.Latency = toLatencyMicros(percentiles(samples))
	r.SendLag = toLatencyMicros(percentiles(lags))
	r.EnvoyCPUMicrosPerRequest = micros(c.envoyCPU) / float64(r.Requests)
	return r
}

// result compares the store's cases and says what would make the
// comparison wrong.
func (s *envoyStack) result() envoyStoreResult {
	r := envoyStoreResult{Store: s.store, RateLimit: s.rateLimit}
	// Per round first: percentiles sorts the samples it is given, and the
	// pooled figures copy them.
	for i := range min(len(s.with.runs), len(s.without.runs)) {
		w := toLatencyMicros(percentiles(s.with.runs[i].Samples))
		wo := toLatencyMicros(percentiles(s.without.runs[i].Samples))
		r.AddedPerRound = append(r.AddedPerRound, w.minus(wo))
	}
	r.With, r.Without = s.with.result(), s.without.result()
	r.Added = r.With.Latency.minus(r.Without.Latency)
	if r.With.Requests > 0 {
		r.FloodgateCPUMicrosPerRequest = micros(s.floodgateCPU) / float64(r.With.Requests)
	}
	r.Notes = envoyNotes(r, s.envoy.filter)
	return r
}

// envoyNotes lists what makes a store's figures doubtful: answers other
// than 200, and requests the ratelimit filter let through without
// floodgate's decision (Envoy fails open on an error or a timeout, so they
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
		notes = append(notes, fmt.Sprintf("floodgate decided %d of the %d requests through the filter (Envoy's ratelimit counters: %s): the others were let through without a decision",
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

// writeEnvoyText prints the -envoy report as the Markdown table
// docs/benchmarks.md records, then each round's added p50 and p99, the
// filter's counters and the notes.
func writeEnvoyText(w io.Writer, rep *envoyReport) {
	header := ""
	if rep.Header != "" {
		header = " (also as " + rep.Header + ")"
	}
	fmt.Fprintf(w, "floodgate bench -envoy: Envoy %s, %d worker(s), filter %s; GET / at %g/s (open loop, at most %d in flight) from %d client addresses%s; %d round(s) of %gs per case, with and without the filter alternating\n\n",
		envoyRelease(rep.Envoy), rep.EnvoyConcurrency, rep.Filter, rep.RatePerSec, rep.Callers, rep.ClientAddresses, header, rep.Rounds, rep.DurationSec)
	fmt.Fprintln(w, "| store | ratelimit filter | requests | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | non-200 | send lag p99 ms | Envoy CPU µs/req | floodgate CPU µs/req |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range rep.Stores {
		for _, c := range []struct {
			name, floodgateCPU string
			res                envoyCaseResult
		}{
			{"without", "-", s.Without},
			{"with", fmt.Sprintf("%.1f", s.FloodgateCPUMicrosPerRequest), s.With},
		} {
			l := c.res.Latency
			fmt.Fprintf(w, "| %s | %s | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %d | %.3f | %.1f | %s |\n",
				s.Store, c.name, c.res.Requests, l.P50/1000, l.P90/1000, l.P99/1000, l.P999/1000, l.Max/1000,
				c.res.TooMany+c.res.Errors, c.res.SendLag.P99/1000, c.res.EnvoyCPUMicrosPerRequest, c.floodgateCPU)
		}
		a := s.Added
		fmt.Fprintf(w, "| %s | **added** | | **%+.3f** | %+.3f | **%+.3f** | %+.3f | %+.3f | | | %+.1f | |\n",
			s.Store, a.P50/1000, a.P90/1000, a.P99/1000, a.P999/1000, a.Max/1000,
			s.With.EnvoyCPUMicrosPerRequest-s.Without.EnvoyCPUMicrosPerRequest)
	}
	fmt.Fprintln(w)
	for _, s := range rep.Stores {
		rounds := make([]string, len(s.AddedPerRound))
		for i, a := range s.AddedPerRound {
			rounds[i] = fmt.Sprintf("%+.3f / %+.3f", a.P50/1000, a.P99/1000)
		}
		fmt.Fprintf(w, "%s: added p50 / p99 ms by round: %s; Envoy's ratelimit counters: %s\n",
			s.Store, strings.Join(rounds, ", "), countersText(s.RateLimit))
	}
	for _, s := range rep.Stores {
		for _, n := range s.Notes {
			fmt.Fprintf(w, "note (%s): %s\n", s.Store, n)
		}
	}
}
