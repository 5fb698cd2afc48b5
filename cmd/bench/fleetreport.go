package main

// The fleet mode's report: per part, what each process spent per fleet
// request, and what the fleet admitted.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// fleetReport is the fleet mode's output; its JSON form is -json's.
type fleetReport struct {
	Options fleetOptions `json:"options"`
	Redis   string       `json:"redis"`
	Parts   []fleetPart  `json:"parts"`
}

// fleetPart is one protocol's figures over its measured run.
type fleetPart struct {
	Protocol    string  `json:"protocol"`
	DurationSec float64 `json:"duration_s"`
	// Requests are the fleet's requests decided in the run: through RLS
	// every call made (answered or failed), through RLQS every request
	// the Envoys decided.
	Requests       int64   `json:"requests"`
	RequestsPerSec float64 `json:"requests_per_sec"`
	Admitted       int64   `json:"admitted"`
	Denied         int64   `json:"denied"`
	// Failed are RLS calls that failed or passed the timeout: Envoy's
	// failure policy answered them.
	Failed int64 `json:"failed"`
	// CPU per fleet request, µs, and cores kept busy (CPU over the run's
	// wall time), by part; Machine is the whole machine's busy cores.
	FloodgateCPU float64 `json:"floodgate_cpu_us_per_request"`
	RedisCPU     float64 `json:"redis_cpu_us_per_request"`
	ToolCPU      float64 `json:"tool_cpu_us_per_request"`
	Cores        cores   `json:"cores"`
	// RedisCommands counts Redis's commands per fleet request (INFO
	// commandstats, every node), and RedisCalls by command.
	RedisCommands float64            `json:"redis_commands_per_request"`
	RedisCalls    map[string]float64 `json:"redis_calls_per_request"`
	// RedisPerBucket is what Redis's used memory grew by over the part,
	// per bucket of the demand.
	RedisPerBucket int64            `json:"redis_bytes_per_bucket"`
	Floodgates     []serverFigures  `json:"floodgates"`
	Nodes          []nodeFigures    `json:"redis_nodes"`
	Latency        *latencyMicros   `json:"latency_us,omitempty"`
	Quota          *quotaFigures    `json:"rlqs,omitempty"`
	Windows        windowFigures    `json:"windows"`
	Shift          *shiftFigures    `json:"shift,omitempty"`
	Failover       *failoverFigures `json:"failover,omitempty"`
	Notes          []string         `json:"notes,omitempty"`
}

// cores is each part's busy cores over a run.
type cores struct {
	Floodgate float64 `json:"floodgate"`
	Redis     float64 `json:"redis"`
	Tool      float64 `json:"tool"`
	Machine   float64 `json:"machine"`
}

// serverFigures is one floodgate's share.
type serverFigures struct {
	CPU    float64 `json:"cpu_us_per_request"`
	Cores  float64 `json:"cores"`
	RSSMiB float64 `json:"rss_mib"`
}

// nodeFigures is one Redis node's share; Up is false for a node that did
// not answer at the end (killed).
type nodeFigures struct {
	Addr        string  `json:"addr"`
	Cores       float64 `json:"cores"`
	CommandsSec float64 `json:"commands_per_sec"`
	UsedMiB     float64 `json:"used_memory_mib"`
	Keys        int64   `json:"keys"`
	Up          bool    `json:"up"`
}

// quotaFigures are RLQS's own: streams, buckets, reports and memory.
type quotaFigures struct {
	Streams         float64 `json:"streams"`
	BucketsHeld     float64 `json:"buckets_held"`
	ReportsPerSec   float64 `json:"reports_per_sec"`
	BucketReportsPS float64 `json:"bucket_reports_per_sec"`
	ImmediatePerSec float64 `json:"new_bucket_reports_per_sec"`
	ActionsPerSec   float64 `json:"assignments_per_sec"`
	AbandonsPerSec  float64 `json:"abandons_per_sec"`
	// CPU per bucket report, µs: what a bucket held costs per interval.
	FloodgateCPUPerBucketReport float64 `json:"floodgate_cpu_us_per_bucket_report"`
	RedisCPUPerBucketReport     float64 `json:"redis_cpu_us_per_bucket_report"`
	RedisCommandsPerBucketRep   float64 `json:"redis_commands_per_bucket_report"`
	// Live heap per stream (with its first bucket) and per further
	// bucket held, bytes (after a GC).
	HeapPerStream int64 `json:"heap_bytes_per_stream"`
	HeapPerBucket int64 `json:"heap_bytes_per_bucket"`
	// SentPerSec is the reports the simulated Envoys sent a second, to
	// set beside ReportsPerSec, what floodgate received.
	SentPerSec   float64 `json:"sent_reports_per_sec"`
	StreamErrors int64   `json:"stream_errors"`
	// StreamsEnded counts streams floodgate ended, with the last error.
	StreamsEnded int64   `json:"streams_ended"`
	LastEndError string  `json:"last_end_error,omitempty"`
	StoreErrors  float64 `json:"store_errors"`
	Refused      float64 `json:"refused"`
}

// partOf computes a part's figures from its run and the readings around
// its measured run.
func (env *fleetEnv) partOf(fr *fleetRun, start, end fleetReading) fleetPart {
	wall := end.at.Sub(start.at)
	p := fleetPart{Protocol: fr.proto, DurationSec: wall.Seconds()}
	p.Requests, p.Admitted, p.Denied, p.Failed = fr.totals(start.at, end.at)
	p.RequestsPerSec = float64(p.Requests) / wall.Seconds()
	per := func(d time.Duration) float64 { return micros(d) / float64(max(p.Requests, 1)) }
	fg, rd := cpuOf(start, end)
	p.FloodgateCPU, p.RedisCPU, p.ToolCPU = per(fg), per(rd), per(end.self-start.self)
	p.Cores = cores{Floodgate: fg.Seconds() / wall.Seconds(), Redis: rd.Seconds() / wall.Seconds(),
		Tool: (end.self - start.self).Seconds() / wall.Seconds(), Machine: (end.machine - start.machine).Seconds() / wall.Seconds()}
	calls := callsOf(start, end)
	p.RedisCalls = map[string]float64{}
	for c, n := range calls {
		p.RedisCommands += float64(n) / float64(max(p.Requests, 1))
		p.RedisCalls[c] = float64(n) / float64(max(p.Requests, 1))
	}
	p.Floodgates, p.Nodes = env.perProcess(start, end, p.Requests)
	p.RedisPerBucket = redisPerBucket(fr.redisBase, end, env.o.Buckets)
	if fr.rls != nil {
		l := toLatencyMicros(fr.rls.latency())
		p.Latency = &l
	}
	if fr.quota != nil {
		p.Quota = env.quotaOf(fr, start, end, p)
	}
	p.Windows = windowsOf(fr, start.at, end.at, env.o)
	p.Shift = shiftOf(fr, end.at, env.o.Limit)
	p.Failover = fr.failover.figures(fr, env.o, start.at, end.at)
	p.Notes = partNotes(p)
	if p.Failed > 0 || p.Quota != nil && p.Quota.StoreErrors > 0 {
		for i, f := range env.floodgates {
			if tail := lastLines(f.proc.logTail(), 3); tail != "" {
				p.Notes = append(p.Notes, fmt.Sprintf("floodgate %d logged: %s", i+1, tail))
			}
		}
	}
	return p
}

// lastLines returns the last n lines of s, joined by " | ".
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], " | ")
}

// totals returns the requests decided between from and to and how they
// were answered, from the fleet's windows and failures.
func (fr *fleetRun) totals(from, to time.Time) (requests, admitted, denied, failed int64) {
	c := fr.counts
	for w := c.windowOf(from); w <= c.windowOf(to); w++ {
		wc := c.windowCopy(w)
		if wc == nil {
			continue
		}
		share := windowOverlap(c.window, w, from, to)
		for b := range wc.admitted {
			admitted += int64(share * float64(wc.admitted[b]))
			denied += int64(share * float64(wc.denied[b]))
		}
	}
	secs, n := c.failedSeconds()
	for i, s := range secs {
		if s >= from.Unix() && s < to.Unix() {
			failed += n[i]
		}
	}
	return admitted + denied + failed, admitted, denied, failed
}

// windowOverlap is the part of window w inside [from, to).
func windowOverlap(window time.Duration, w int64, from, to time.Time) float64 {
	ws := time.Unix(0, w*int64(window))
	we := ws.Add(window)
	lo, hi := max(ws.UnixNano(), from.UnixNano()), min(we.UnixNano(), to.UnixNano())
	if hi <= lo {
		return 0
	}
	return float64(hi-lo) / float64(window)
}

// cpuOf returns the CPU the floodgates and the Redis nodes used between
// two readings; a node down at the end counts what it used until its
// last reading.
func cpuOf(start, end fleetReading) (floodgate, redis time.Duration) {
	for i := range end.floodgates {
		floodgate += end.floodgates[i].cpu - start.floodgates[i].cpu
	}
	for i := range end.redis {
		if end.redis[i].up && start.redis[i].up {
			redis += end.redis[i].cpu - start.redis[i].cpu
		}
	}
	return floodgate, redis
}

// callsOf returns Redis's commands between two readings by command, over
// the nodes up at both, without the tool's INFO.
func callsOf(start, end fleetReading) map[string]int64 {
	out := map[string]int64{}
	for i := range end.redis {
		if !end.redis[i].up || !start.redis[i].up {
			continue
		}
		for c, n := range end.redis[i].calls {
			if n -= start.redis[i].calls[c]; n > 0 && c != "info" {
				out[c] += n
			}
		}
	}
	return out
}

// perProcess returns each floodgate's and each Redis node's figures.
func (env *fleetEnv) perProcess(start, end fleetReading, requests int64) ([]serverFigures, []nodeFigures) {
	wall := end.at.Sub(start.at).Seconds()
	var fs []serverFigures
	for i := range end.floodgates {
		cpu := end.floodgates[i].cpu - start.floodgates[i].cpu
		fs = append(fs, serverFigures{CPU: micros(cpu) / float64(max(requests, 1)), Cores: cpu.Seconds() / wall, RSSMiB: float64(end.floodgates[i].rss) / mib})
	}
	var ns []nodeFigures
	for i, n := range env.redis.nodes {
		e, s := end.redis[i], start.redis[i]
		nf := nodeFigures{Addr: n.Addr, Up: e.up, UsedMiB: float64(e.usedMemory) / mib, Keys: e.keys}
		if e.up && s.up {
			nf.Cores = (e.cpu - s.cpu).Seconds() / wall
			var cmds int64
			for c, k := range e.calls {
				if c != "info" {
					cmds += k - s.calls[c]
				}
			}
			nf.CommandsSec = float64(cmds) / wall
		}
		ns = append(ns, nf)
	}
	return fs, ns
}

// quotaOf returns the RLQS figures of a run.
func (env *fleetEnv) quotaOf(fr *fleetRun, start, end fleetReading, p fleetPart) *quotaFigures {
	wall := end.at.Sub(start.at).Seconds()
	delta := func(name string) float64 { return end.metricSum(name) - start.metricSum(name) }
	q := &quotaFigures{Streams: end.metricSum("floodgate_rlqs_streams"), BucketsHeld: fr.held,
		ReportsPerSec: delta("floodgate_rlqs_reports_total") / wall, ActionsPerSec: delta("floodgate_rlqs_assignments_total") / wall,
		StreamErrors: fr.quota.stats.streamErrors.Load(), StoreErrors: delta("floodgate_rlqs_store_errors_total"),
		Refused: end.metricSum("floodgate_rlqs_refused_total")}
	// Every bucket held is reported once per interval; new ones once more.
	q.BucketReportsPS = fr.held / quotaReportEvery.Seconds()
	q.ImmediatePerSec = float64(fr.immediate[1]-fr.immediate[0]) / wall
	q.AbandonsPerSec = float64(fr.abandons[1]-fr.abandons[0]) / wall
	q.SentPerSec = float64(fr.sent[1]-fr.sent[0]) / wall
	q.StreamsEnded = fr.quota.stats.recvErrors.Load()
	if e, ok := fr.quota.lastRecvErr.Load().(string); ok {
		q.LastEndError = e
	}
	if n := q.BucketReportsPS * wall; n > 0 {
		q.FloodgateCPUPerBucketReport = p.FloodgateCPU * float64(p.Requests) / n
		q.RedisCPUPerBucketReport = p.RedisCPU * float64(p.Requests) / n
		q.RedisCommandsPerBucketRep = p.RedisCommands * float64(p.Requests) / n
	}
	streams := float64(len(fr.qs))
	if extra := fr.held - streams; extra > 0 {
		q.HeapPerBucket = int64(float64(fr.heapEnd-fr.heapOpen) / extra)
	}
	// Each stream opened with one bucket, counted with it.
	q.HeapPerStream = int64(float64(fr.heapOpen-fr.heapBase) / streams)
	return q
}

// redisPerBucket is Redis's memory per bucket of the demand: what the
// used memory of the nodes up at the end grew by from before the part.
func redisPerBucket(base []int64, end fleetReading, buckets int) int64 {
	var grew int64
	for i, n := range end.redis {
		if n.up && i < len(base) {
			grew += n.usedMemory - base[i]
		}
	}
	return grew / int64(max(buckets, 1))
}

// partNotes are what a reader must know to trust the part's figures.
func partNotes(p fleetPart) []string {
	var notes []string
	if p.Cores.Machine > 1.9 {
		notes = append(notes, "the machine's 2 cores were busy: the fleet's rate is the machine's, not floodgate's")
	}
	if p.Failed > 0 && p.Failover == nil {
		notes = append(notes, "some RLS calls failed or timed out: floodgate or Redis ran out of something (see the cores)")
	}
	if p.Quota != nil && p.Quota.Refused > 0 {
		notes = append(notes, "floodgate refused streams or buckets (floodgate_rlqs_refused_total): a bound ran out")
	}
	return notes
}

// topCalls lists the most frequent commands per request, for the text.
func topCalls(calls map[string]float64, n int) string {
	cmds := slices.SortedFunc(maps.Keys(calls), func(a, b string) int {
		switch {
		case calls[a] > calls[b]:
			return -1
		case calls[a] < calls[b]:
			return 1
		}
		return strings.Compare(a, b)
	})
	return callsText(maps.Collect(func(yield func(string, float64) bool) {
		for _, c := range cmds[:min(n, len(cmds))] {
			if !yield(c, calls[c]) {
				return
			}
		}
	}))
}
