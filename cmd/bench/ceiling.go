package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/harness"
)

// The ceiling is the rate at which this machine's Redis runs floodgate's
// own script call when nothing else stands between them: redis-benchmark
// replays the script call floodgate sent (FCALL, or EVALSHA; same code,
// same arguments, the scenario's number of keys and distinct values) with
// the scenario's concurrency, one command per round trip. No Redis-Lua
// limiter can decide faster on the same box, so decisions/s divided by the
// ceiling is a figure that holds on a noisy machine.

// scriptCall is one script command as floodgate sent it: the command name
// in lower case, then its arguments.
type scriptCall []string

// keys returns the call's number of keys, or -1 if it has none.
func (c scriptCall) keys() int {
	if len(c) < 3 {
		return -1
	}
	n, err := strconv.Atoi(c[2])
	if err != nil {
		return -1
	}
	return n
}

// oneRequest reports whether the call decides a single request: the first
// request's hit count (the second argument of its header, after the keys;
// see pkg/redislimit's evaluate.lua) covers every key.
func (c scriptCall) oneRequest() bool {
	k := c.keys()
	at := 3 + k + 1
	if k < 0 || at >= len(c) {
		return false
	}
	n, err := strconv.Atoi(c[at])
	return err == nil && n == k
}

// captureScriptCall watches addr with MONITOR until floodgate sends a
// script call (FCALL, EVALSHA or EVAL) or ctx ends. Commands that scripts
// run are skipped. MONITOR costs Redis some CPU, so the tool uses it
// during the warm-up only.
func captureScriptCall(ctx context.Context, addr string) (scriptCall, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("MONITOR: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Now()) })
	defer stop()
	if _, err := conn.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		return nil, fmt.Errorf("MONITOR: %w", err)
	}
	r := bufio.NewReader(conn)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil, errors.New("MONITOR: saw no script call during the warm-up: do the requests reach Redis?")
			}
			return nil, fmt.Errorf("MONITOR: %w", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if strings.HasPrefix(line, "-") {
			return nil, fmt.Errorf("MONITOR: %s", line[1:])
		}
		call, err := parseMonitorLine(line)
		if err != nil {
			return nil, err
		}
		// A batch of several requests would replay as several decisions
		// per command: wait for a call that carries one request.
		if len(call) >= 3 && (call[0] == "fcall" || call[0] == "evalsha" || call[0] == "eval") && call.oneRequest() {
			return call, nil
		}
	}
}

// parseMonitorLine reads a MONITOR line such as
//
//	+1700000000.123456 [0 127.0.0.1:53422] "evalsha" "ab12..." "1" "k"
//
// and returns the command in lower case and its arguments, unquoted. It
// returns nil for the "+OK" reply, and for commands run by a script
// ("[0 lua]").
func parseMonitorLine(line string) (scriptCall, error) {
	open := strings.IndexByte(line, '[')
	end := strings.IndexByte(line, ']')
	if open < 0 || end < open {
		return nil, nil
	}
	if strings.HasSuffix(line[open:end], " lua") {
		return nil, nil
	}
	var call scriptCall
	s := line[end+1:]
	for {
		s = strings.TrimLeft(s, " ")
		if s == "" {
			break
		}
		if s[0] != '"' {
			return nil, fmt.Errorf("MONITOR line %q: argument not quoted", line)
		}
		arg, rest, err := unquoteRepr(s[1:])
		if err != nil {
			return nil, fmt.Errorf("MONITOR line %q: %w", line, err)
		}
		call, s = append(call, arg), rest
	}
	if len(call) > 0 {
		call[0] = strings.ToLower(call[0])
	}
	return call, nil
}

// unquoteRepr reads one argument quoted the way Redis quotes them
// (sdscatrepr: \\ \" \n \r \t \a \b and \xHH) up to its closing quote, and
// returns it with the text after the quote.
func unquoteRepr(s string) (string, string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			return b.String(), s[i+1:], nil
		case '\\':
			if i+1 >= len(s) {
				return "", "", errors.New("unterminated escape")
			}
			i++
			switch e := s[i]; e {
			case '\\', '"':
				b.WriteByte(e)
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 >= len(s) {
					return "", "", errors.New("short \\x escape")
				}
				v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
				if err != nil {
					return "", "", fmt.Errorf("bad \\x escape %q", s[i-1:i+3])
				}
				b.WriteByte(byte(v))
				i += 2
			default:
				return "", "", fmt.Errorf("unknown escape \\%c", e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", errors.New("unterminated quote")
}

// benchmarkArgs turns a captured call into redis-benchmark's command: the
// script by SHA, and each key replaced by one in a namespace of its own
// with keys distinct values (__rand_int__ under -r), so the ceiling neither
// touches floodgate's counters nor differs from the scenario in key count.
func benchmarkArgs(call scriptCall, sha string) ([]string, error) {
	if len(call) < 3 {
		return nil, fmt.Errorf("script call %q: too short", call)
	}
	numKeys := call.keys()
	if numKeys < 0 || 3+numKeys > len(call) {
		return nil, fmt.Errorf("script call: bad key count %q", call[2])
	}
	command := "evalsha"
	if call[0] == "fcall" {
		command = "fcall" // sha is the function's name
	}
	args := []string{command, sha, call[2]}
	for i := range numKeys {
		args = append(args, fmt.Sprintf("floodgate-bench-ceiling:%d:__rand_int__", i+1))
	}
	return append(args, call[3+numKeys:]...), nil
}

// ceiling is the result of the redis-benchmark runs bracketing a
// scenario's measurement.
type ceiling struct {
	// RequestsPerSec is the mean rate of script calls of the run before
	// the measurement and the run after it, so that a machine getting
	// busier or quieter during the scenario biases the ratio less.
	RequestsPerSec float64 `json:"requests_per_sec"`
	// BeforePerSec and AfterPerSec are the two runs' rates; far apart,
	// they say the machine's load changed during the scenario.
	BeforePerSec float64 `json:"before_per_sec"`
	AfterPerSec  float64 `json:"after_per_sec"`
	// RedisCPUMicrosPerCall is Redis's CPU per script call over both runs.
	RedisCPUMicrosPerCall float64 `json:"redis_cpu_us_per_call"`
	// Command is the redis-benchmark command line.
	Command string `json:"command"`
}

// ceilingRunner replays one scenario's script call with redis-benchmark.
type ceilingRunner struct {
	client *redis.Client
	bin    string
	args   []string // redis-benchmark's arguments, -n included
}

// newCeilingRunner prepares replaying call against addr with concurrency
// connections and keys distinct values per key, one command per round
// trip, sized by a short probe so that a run lasts about d.
func newCeilingRunner(ctx context.Context, client *redis.Client, addr string, call scriptCall, concurrency, keys int, d time.Duration) (*ceilingRunner, error) {
	bin, err := harness.Find("redis-benchmark")
	if err != nil {
		return nil, err
	}
	sha, err := scriptSHA(ctx, client, call)
	if err != nil {
		return nil, err
	}
	cmd, err := benchmarkArgs(call, sha)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("redis address %q: %w", addr, err)
	}
	c := &ceilingRunner{client: client, bin: bin}
	args := func(n int) []string {
		return append([]string{"-h", host, "-p", port, "-c", strconv.Itoa(concurrency), "-n", strconv.Itoa(n),
			"-r", strconv.Itoa(keys), "-P", "1", "--csv"}, cmd...)
	}
	minN := max(1000, 20*concurrency)
	c.args = args(minN)
	probe, err := c.benchmark(ctx)
	if err != nil {
		return nil, err
	}
	c.args = args(max(minN, int(probe*d.Seconds())))
	return c, nil
}

// command is the redis-benchmark command line, for reports.
func (c *ceilingRunner) command() string { return c.bin + " " + shellJoin(c.args) }

// benchmark runs redis-benchmark once and returns its rate.
func (c *ceilingRunner) benchmark(ctx context.Context) (float64, error) {
	out, err := exec.CommandContext(ctx, c.bin, c.args...).Output()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", c.command(), err)
	}
	return parseBenchmarkCSV(string(out))
}

// run measures once: the rate, and Redis's CPU and script calls during it.
func (c *ceilingRunner) run(ctx context.Context) (float64, redisDelta, error) {
	before, err := readRedisStats(ctx, c.client)
	if err != nil {
		return 0, redisDelta{}, err
	}
	rps, err := c.benchmark(ctx)
	if err != nil {
		return 0, redisDelta{}, err
	}
	after, err := readRedisStats(ctx, c.client)
	if err != nil {
		return 0, redisDelta{}, err
	}
	return rps, after.delta(before), nil
}

// combine makes the ceiling of the runs before and after a measurement.
func (c *ceilingRunner) combine(before float64, dBefore redisDelta, after float64, dAfter redisDelta) *ceiling {
	res := &ceiling{RequestsPerSec: (before + after) / 2, BeforePerSec: before, AfterPerSec: after, Command: c.command()}
	if calls := dBefore.scripts() + dAfter.scripts(); calls > 0 {
		res.RedisCPUMicrosPerCall = micros(dBefore.CPU+dAfter.CPU) / float64(calls)
	}
	return res
}

// scriptSHA returns the SHA to replay: the captured one, which floodgate
// loaded, or, for an EVAL, the SHA of its script loaded now; for an FCALL,
// the function's name.
func scriptSHA(ctx context.Context, client *redis.Client, call scriptCall) (string, error) {
	if call[0] == "fcall" {
		return call[1], nil // the function's name; FUNCTION LOAD made it stay
	}
	if call[0] == "eval" {
		sha, err := client.ScriptLoad(ctx, call[1]).Result()
		if err != nil {
			return "", fmt.Errorf("SCRIPT LOAD: %w", err)
		}
		return sha, nil
	}
	exists, err := client.ScriptExists(ctx, call[1]).Result()
	if err != nil {
		return "", fmt.Errorf("SCRIPT EXISTS: %w", err)
	}
	if len(exists) != 1 || !exists[0] {
		return "", fmt.Errorf("script %s is no longer loaded in Redis", call[1])
	}
	return call[1], nil
}

// parseBenchmarkCSV returns the rps column of redis-benchmark --csv output:
// a header line, then one line per test.
func parseBenchmarkCSV(out string) (float64, error) {
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(rows) != 2 || len(rows[0]) < 2 || rows[0][1] != "rps" || len(rows[1]) < 2 {
		return 0, fmt.Errorf("redis-benchmark output %q: want a header with rps and one result", out)
	}
	rps, err := strconv.ParseFloat(rows[1][1], 64)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark rps %q: %w", rows[1][1], err)
	}
	return rps, nil
}

// shellJoin quotes args for a shell, for commands printed in reports.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == ':' || r == '/' || r == ',' ||
				'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
