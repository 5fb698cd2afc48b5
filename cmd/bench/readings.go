package main

// The readings every mode takes around a measured run: a process's CPU and
// memory from /proc, Redis's from INFO, and the latency percentiles.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// clockTicksPerSecond is the unit of utime and stime in /proc/<pid>/stat
// (sysconf(_SC_CLK_TCK)), 100 on every Linux architecture Go supports.
const clockTicksPerSecond = 100

// procCPU returns the CPU time (user + system) a process has used, from
// /proc/<pid>/stat; its resolution is 1/clockTicksPerSecond.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseProcStat(string(b))
}

// parseProcStat reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. The command name (field 2) is in parentheses and
// may hold spaces and parentheses, so fields are counted after the last ')'.
func parseProcStat(line string) (time.Duration, error) {
	i := strings.LastIndexByte(line, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc stat %q: no ')' after the command name", line)
	}
	f := strings.Fields(line[i+1:])
	// f[0] is field 3 (state), so field n is f[n-3].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc stat: %d fields after the command name, want at least 13", len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat: utime/stime %q: %w", s, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicksPerSecond, nil
}

// procRSS returns the resident set size of a process in bytes, from
// VmRSS in /proc/<pid>/status.
func procRSS(pid int) (int64, error) { return procStatusBytes(pid, "VmRSS") }

// procStatusBytes returns a size field of /proc/<pid>/status in bytes,
// such as VmRSS or VmHWM (the highest resident set size so far).
func procStatusBytes(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return parseStatusBytes(f, field)
}

// parseStatusBytes reads the size field ("<n> kB") of the text of
// /proc/<pid>/status, in bytes.
func parseStatusBytes(r io.Reader, field string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("/proc status: %s %q: want <n> kB", field, rest)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc status: %s %q: %w", field, rest, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("/proc status: no %s line", field)
}

// selfCPU returns the CPU time (user + system) this process has used: the
// load generator's cost.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisStats is what INFO says about a Redis server at one instant.
type redisStats struct {
	// CPU is used_cpu_user + used_cpu_sys: all of the server's threads.
	CPU time.Duration
	// Calls counts calls per command (lower case) since start or CONFIG
	// RESETSTAT, from INFO commandstats. Commands a script runs count as
	// calls of their own.
	Calls map[string]int64
}

// readRedisStats sends INFO cpu and INFO commandstats (one call each;
// delta removes them).
func readRedisStats(ctx context.Context, client *redis.Client) (redisStats, error) {
	cpu, err := client.Info(ctx, "cpu").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("redis INFO cpu: %w", err)
	}
	cmds, err := client.Info(ctx, "commandstats").Result()
	if err != nil {
		return redisStats{}, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	return parseRedisInfo(cpu + "\n" + cmds)
}

// parseRedisInfo reads the fields of redisStats from INFO text.
func parseRedisInfo(info string) (redisStats, error) {
	st := redisStats{Calls: map[string]int64{}}
	var seconds float64
	var cpuFields int
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_user" || name == "used_cpu_sys":
			s, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return redisStats{}, fmt.Errorf("redis INFO %s=%q: %w", name, value, err)
			}
			seconds += s
			cpuFields++
		case strings.HasPrefix(name, "cmdstat_"):
			calls, err := commandCalls(value)
			if err != nil {
				return redisStats{}, fmt.Errorf("redis INFO %s: %w", name, err)
			}
			st.Calls[strings.ToLower(strings.TrimPrefix(name, "cmdstat_"))] = calls
		}
	}
	if cpuFields != 2 {
		return redisStats{}, fmt.Errorf("redis INFO: used_cpu_user and used_cpu_sys missing")
	}
	st.CPU = time.Duration(math.Round(seconds * 1e9))
	return st, nil
}

// commandCalls reads calls= from a commandstats value such as
// "calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0".
func commandCalls(value string) (int64, error) {
	for field := range strings.SplitSeq(value, ",") {
		if v, ok := strings.CutPrefix(field, "calls="); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no calls= in %q", value)
}

// scriptCommands are the commands that run a script or function: the
// commands floodgate sends, each one round trip since it does not
// pipeline.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// redisDelta is Redis's work between two readings, per request.
type redisDelta struct {
	CPU   time.Duration
	Calls map[string]int64 // per command, without the tool's own INFO calls
}

// delta returns what happened between before and st, minus the INFO calls
// the readings themselves made.
func (st redisStats) delta(before redisStats) redisDelta {
	d := redisDelta{CPU: st.CPU - before.CPU, Calls: map[string]int64{}}
	for cmd, n := range st.Calls {
		if n -= before.Calls[cmd]; n > 0 && cmd != "info" {
			d.Calls[cmd] = n
		}
	}
	return d
}

// total is the number of commands, including those scripts ran.
func (d redisDelta) total() int64 {
	var n int64
	for _, c := range d.Calls {
		n += c
	}
	return n
}

// scripts is the number of script calls.
func (d redisDelta) scripts() int64 {
	var n int64
	for _, c := range scriptCommands {
		n += d.Calls[c]
	}
	return n
}

// latencies are exact percentiles of a run's samples.
type latencies struct {
	P50, P90, P99, P999, Max, Mean time.Duration
}

// percentiles sorts samples (nanoseconds) in place and returns their
// nearest-rank percentiles: the p-th is the smallest sample with at least
// p% of all samples at or below it.
func percentiles(samples []int64) latencies {
	if len(samples) == 0 {
		return latencies{}
	}
	slices.Sort(samples)
	n := len(samples)
	// rank takes p in per mille, in integers: 99.9/100 in floating point
	// is a hair above 0.999 and would round 999 of 1000 up to 1000.
	rank := func(perMille int) time.Duration {
		i := (perMille*n+999)/1000 - 1
		return time.Duration(samples[max(i, 0)])
	}
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	return latencies{
		P50: rank(500), P90: rank(900), P99: rank(990), P999: rank(999),
		Max:  time.Duration(samples[n-1]),
		Mean: time.Duration(sum / float64(n)),
	}
}
