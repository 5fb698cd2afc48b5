package redislimit_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// future is a base instant for tests that pass an explicit now: keys expire
// at instants of that timeline, so a future base keeps them alive (and
// checkable) while the test runs.
var future = time.Date(2031, time.March, 9, 4, 0, 0, 0, time.UTC)

// node is a private redis-server and a client counting the commands it
// sends.
type node struct {
	srv      *redistest.Server
	client   *redis.Client
	commands *atomic.Int64
}

func startNode(t testing.TB) *node {
	t.Helper()
	srv := redistest.Start(t)
	n := new(atomic.Int64)
	return &node{srv: srv, client: newCountingClient(t, srv.Addr, n), commands: n}
}

// newCountingClient returns a client of addr that adds every command it
// sends to n, to measure round trips.
func newCountingClient(t testing.TB, addr string, n *atomic.Int64) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	c.AddHook(countHook{n})
	t.Cleanup(func() { c.Close() })
	return c
}

type countHook struct{ n *atomic.Int64 }

func (countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// clock is a settable fake clock.
type clock struct{ t atomic.Int64 } // µs since the epoch

func newClock(t time.Time) *clock {
	c := new(clock)
	c.set(t)
	return c
}
func (c *clock) set(t time.Time)     { c.t.Store(t.UnixMicro()) }
func (c *clock) add(d time.Duration) { c.t.Add(d.Microseconds()) }
func (c *clock) now() time.Time      { return time.UnixMicro(c.t.Load()) }
func (c *clock) micros() int64       { return c.t.Load() }

// newLimiter returns a Limiter over client; with a clock, the script takes
// its now from it instead of Redis TIME.
func newLimiter(t testing.TB, client redis.UniversalClient, clk *clock, prefix string) *redislimit.Limiter {
	t.Helper()
	l, err := redislimit.New(client, redislimit.Options{KeyPrefix: prefix, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if clk != nil {
		l.SetNow(clk.now)
	}
	return l
}

// verdict evaluates hits, fails the test on error, and returns the
// decisions and whether the call was blocked.
func verdict(t testing.TB, e limit.Limiter, hits ...limit.Hit) ([]limit.Decision, bool) {
	t.Helper()
	d := make([]limit.Decision, len(hits))
	blocked, err := e.Evaluate(context.Background(), hits, d)
	if err != nil {
		t.Fatalf("Evaluate(%v): %v", hits, err)
	}
	return d, blocked
}

// decide evaluates hits and fails the test on error.
func decide(t testing.TB, e limit.Limiter, hits ...limit.Hit) []limit.Decision {
	t.Helper()
	d := make([]limit.Decision, len(hits))
	if _, err := e.Evaluate(context.Background(), hits, d); err != nil {
		t.Fatalf("Evaluate(%v): %v", hits, err)
	}
	return d
}

// commandCalls returns how many times srv ran cmd (e.g. "evalsha"), from
// INFO commandstats.
func commandCalls(t testing.TB, srv *redistest.Server, cmd string) string {
	t.Helper()
	return strconv.FormatFloat(commandStat(t, srv, cmd, "calls"), 'f', -1, 64)
}

// commandStat returns a field of cmd's line in INFO commandstats, such as
// calls or usec_per_call; 0 when the command never ran.
func commandStat(t testing.TB, srv *redistest.Server, cmd, field string) float64 {
	t.Helper()
	out, err := srv.Do("INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if k, v, _ := strings.Cut(kv, "="); k == field {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					t.Fatalf("INFO commandstats %s %s=%q: %v", cmd, field, v, err)
				}
				return f
			}
		}
	}
	return 0
}
