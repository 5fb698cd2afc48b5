package main

import (
	"fmt"
	"io"
)

// writeFleetText prints the fleet report for a reader.
func writeFleetText(w io.Writer, rep *fleetReport) {
	o := rep.Options
	fmt.Fprintf(w, "floodgate fleet: %d Envoys, %d buckets (zipf %g), limit %d per %v, %d floodgate(s), redis %s\n",
		o.Envoys, o.Buckets, o.Zipf, o.Limit, o.Window, o.Floodgates, rep.Redis)
	for _, p := range rep.Parts {
		writePartText(w, p)
	}
}

// writePartText prints one part.
func writePartText(w io.Writer, p fleetPart) {
	all := float64(max(p.Requests, 1))
	fmt.Fprintf(w, "%s: %.0f requests/s over %.1fs: %.1f %% admitted, %.1f %% denied, %d failure-policy answers\n",
		p.Protocol, p.RequestsPerSec, p.DurationSec, 100*float64(p.Admitted)/all, 100*float64(p.Denied)/all, p.Failed)
	fmt.Fprintf(w, "  CPU µs/request   floodgate %.2f  redis %.2f  tool %.2f   cores: floodgate %.2f, redis %.2f, tool %.2f, machine %.2f\n",
		p.FloodgateCPU, p.RedisCPU, p.ToolCPU, p.Cores.Floodgate, p.Cores.Redis, p.Cores.Tool, p.Cores.Machine)
	fmt.Fprintf(w, "  redis            %.3f commands/request (%s); %d bytes per bucket\n", p.RedisCommands, topCalls(p.RedisCalls, 4), p.RedisPerBucket)
	if l := p.Latency; l != nil {
		fmt.Fprintf(w, "  latency          p50 %s  p99 %s  p99.9 %s  max %s\n", ms(l.P50), ms(l.P99), ms(l.P999), ms(l.Max))
	}
	for i, f := range p.Floodgates {
		fmt.Fprintf(w, "  floodgate %-6d CPU %.2f µs/request, %.2f cores, RSS %.1f MiB\n", i+1, f.CPU, f.Cores, f.RSSMiB)
	}
	for _, n := range p.Nodes {
		state := ""
		if !n.Up {
			state = " (down at the end)"
		}
		fmt.Fprintf(w, "  redis %-21s %.2f cores, %.0f commands/s, %.1f MiB, %d keys%s\n", n.Addr, n.Cores, n.CommandsSec, n.UsedMiB, n.Keys, state)
	}
	if q := p.Quota; q != nil {
		writeQuotaText(w, q)
	}
	wf := p.Windows
	fmt.Fprintf(w, "  windows          %d whole; %d buckets over the limit admitted %.3f of it (%.3f-%.3f), worst %+d; %d under it: %.2f %% refused\n",
		wf.Windows, wf.OverBuckets, wf.Admitted.Median, wf.Admitted.Min, wf.Admitted.Max, wf.WorstExcess, wf.UnderBuckets, 100*wf.UnderRefused)
	if s := p.Shift; s != nil {
		fmt.Fprintf(w, "  shift            group A's share of the hottest bucket %.2f -> %.2f (demand %.2f, over its limit: %v), followed in %.1f s\n",
			s.Before, s.After, s.Target, s.Over, s.FollowSec)
	}
	if f := p.Failover; f != nil {
		writeFailoverText(w, f)
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

// writeQuotaText prints RLQS's own figures.
func writeQuotaText(w io.Writer, q *quotaFigures) {
	fmt.Fprintf(w, "  rlqs             %.0f streams, %.0f buckets held; %.1f reports/s, %.0f bucket reports/s, %.1f new buckets/s, %.0f assignments/s, %.1f abandons/s\n",
		q.Streams, q.BucketsHeld, q.ReportsPerSec, q.BucketReportsPS, q.ImmediatePerSec, q.ActionsPerSec, q.AbandonsPerSec)
	fmt.Fprintf(w, "                   per bucket report: floodgate %.2f µs, redis %.2f µs, %.2f commands; heap %d B per bucket, %d B per stream; %d stream errors, %.0f store errors, %.0f refused\n",
		q.FloodgateCPUPerBucketReport, q.RedisCPUPerBucketReport, q.RedisCommandsPerBucketRep, q.HeapPerBucket, q.HeapPerStream, q.StreamErrors, q.StoreErrors, q.Refused)
}

// writeFailoverText prints what a master's kill cost.
func writeFailoverText(w io.Writer, f *failoverFigures) {
	fmt.Fprintf(w, "  failover         master %s (%d buckets) killed %.2f s into its window, replica serving %.0f ms later\n",
		f.Master, f.Buckets, f.IntoWindowSec, f.PromotedMs)
	fmt.Fprintf(w, "                   its buckets: %d failure-policy answers, the last %.0f ms after the kill, per second %v; other masters' buckets: %d\n",
		f.FailedRequests, f.LastFailureMs, f.PerSecond, f.FailedElsewhere)
	fmt.Fprintf(w, "                   kill window: %d admitted beyond the limit (worst bucket %+d); its later windows worst %+d, shortfall %d; other masters' worst %+d, shortfall %d\n",
		f.KillWindowExcess, f.KillWindowWorst, f.LaterExcess, f.LaterShortfall, f.ElsewhereExcess, f.ElsewhereShortfall)
	fmt.Fprintf(w, "                   windows after the last failure-policy answer: worst deviation from the limit %d\n", f.Recovered)
	fmt.Fprintf(w, "                   admitted over the limit per window, from the kill's [offset, its master's ‰, the others' ‰]: %v\n", f.ByWindow)
	if f.Err != "" {
		fmt.Fprintf(w, "                   error: %s\n", f.Err)
	}
}
