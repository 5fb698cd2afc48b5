package main

// Readings of every process of the fleet mode at one instant: each
// floodgate's CPU (/proc/<pid>/stat), RSS and RLQS metrics, each Redis
// node's CPU (/proc/<pid>/stat), commands (INFO commandstats), memory and
// keys, the tool's own CPU and the machine's.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// fleetMetrics are the floodgate metrics the report reads.
var fleetMetrics = []string{
	"floodgate_rlqs_streams", "floodgate_rlqs_buckets", "floodgate_rlqs_reports_total",
	"floodgate_rlqs_assignments_total", "floodgate_rlqs_refused_total", "floodgate_rlqs_store_errors_total",
	"floodgate_store_failure_answers_total", "go_goroutines",
}

// fleetReading is every process's reading at one instant.
type fleetReading struct {
	at         time.Time
	floodgates []serverReading
	redis      []nodeReading
	self       time.Duration
	machine    time.Duration
}

// serverReading is one floodgate's.
type serverReading struct {
	cpu     time.Duration
	rss     int64
	metrics map[string]float64
}

// nodeReading is one Redis node's.
type nodeReading struct {
	cpu        time.Duration
	calls      map[string]int64
	usedMemory int64
	keys       int64
	up         bool
}

// read takes the reading of every process. A Redis node that does not
// answer (a killed master) reads as down.
func (env *fleetEnv) read(ctx context.Context) (fleetReading, error) {
	r := fleetReading{at: time.Now(), self: selfCPU()}
	var err error
	if r.machine, err = machineCPU(); err != nil {
		return r, err
	}
	for i, f := range env.floodgates {
		sr := serverReading{}
		if sr.cpu, err = procCPU(f.srv.pid); err != nil {
			return r, fmt.Errorf("floodgate %d: %w", i+1, err)
		}
		if sr.rss, err = procRSS(f.srv.pid); err != nil {
			return r, fmt.Errorf("floodgate %d: %w", i+1, err)
		}
		if sr.metrics, err = readMetrics(ctx, f.srv.httpAddr, fleetMetrics); err != nil {
			return r, fmt.Errorf("floodgate %d: %w", i+1, err)
		}
		r.floodgates = append(r.floodgates, sr)
	}
	for i, n := range env.redis.nodes {
		r.redis = append(r.redis, readNode(ctx, env.redis.clients[i], n.Pid()))
	}
	return r, nil
}

// readNode reads one Redis node: down when it does not answer.
func readNode(ctx context.Context, c *redis.Client, pid int) nodeReading {
	nr := nodeReading{calls: map[string]int64{}}
	cpu, err := procCPU(pid)
	if err != nil {
		return nr
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := c.Info(ctx, "cpu", "commandstats", "memory", "keyspace").Result()
	if err != nil {
		return nr
	}
	st, err := parseRedisInfo(info)
	if err != nil {
		return nr
	}
	nr.cpu, nr.calls, nr.up = cpu, st.Calls, true
	for line := range strings.Lines(info) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case name == "used_memory":
			nr.usedMemory, _ = strconv.ParseInt(value, 10, 64)
		case strings.HasPrefix(name, "db"):
			nr.keys += keyspaceKeys(value)
		}
	}
	return nr
}

// keyspaceKeys reads keys= from an INFO keyspace value such as
// "keys=3,expires=3,avg_ttl=9".
func keyspaceKeys(value string) int64 {
	for f := range strings.SplitSeq(value, ",") {
		if v, ok := strings.CutPrefix(f, "keys="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// readMetrics reads the named metrics from floodgate's /metrics on
// httpAddr, each summed over its label values; a metric not exposed yet
// reads 0.
func readMetrics(ctx context.Context, httpAddr string, names []string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body, names)
}

// parseMetrics sums, per name, the samples of Prometheus text whose
// metric is exactly one of names.
func parseMetrics(r io.Reader, names []string) (map[string]float64, error) {
	out := make(map[string]float64, len(names))
	want := map[string]bool{}
	for _, n := range names {
		want[n], out[n] = true, 0
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		name, _, _ := strings.Cut(series, "{")
		if !ok || !want[name] {
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: %q: %w", line, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// liveHeap returns floodgate's live heap in bytes: it has the server
// collect its garbage (the debug listener's heap profile with gc=1), then
// reads go_memstats_heap_alloc_bytes. The profile of a large heap may
// take the debug listener longer to write than it allows (the answer is
// cut): the collection has run by then, which is all that is needed.
func liveHeap(ctx context.Context, srv server) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+srv.debugAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return 0, err
	}
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m, err := readMetrics(ctx, srv.httpAddr, []string{"go_memstats_heap_alloc_bytes"})
	return int64(m["go_memstats_heap_alloc_bytes"]), err
}

// liveHeaps returns the sum of every floodgate's live heap.
func (env *fleetEnv) liveHeaps(ctx context.Context) (int64, error) {
	var sum int64
	for _, f := range env.floodgates {
		h, err := liveHeap(ctx, f.srv)
		if err != nil {
			return 0, err
		}
		sum += h
	}
	return sum, nil
}

// metricSum sums one metric over every floodgate of a reading.
func (r fleetReading) metricSum(name string) float64 {
	var s float64
	for _, f := range r.floodgates {
		s += f.metrics[name]
	}
	return s
}
