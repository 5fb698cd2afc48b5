package statsd_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/statsdtest"
	"github.com/floodgate/floodgate/pkg/option"
)

// newClient returns a client of srv that flushes only when told to.
func newClient(t *testing.T, srv *statsdtest.Server, opts statsd.Options) *statsd.Client {
	t.Helper()
	opts.Addr = srv.Addr()
	if opts.FlushInterval == 0 {
		opts.FlushInterval = time.Hour
	}
	c, err := statsd.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func flush(t *testing.T, c *statsd.Client) {
	t.Helper()
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestLines checks the wire format of every kind of stat, plain and
// DogStatsD, with and without tags, over two flushes: counters send what
// they gained, timers what they observed, gauges their value.
func TestLines(t *testing.T) {
	tags := []statsd.Tag{{Key: "zone", Value: "eu-1.a"}, {Key: "env", Value: "prod"}, {Key: "empty", Value: ""}}
	untagged := []string{
		"hits:3|c",
		"a_b_c:1|c",
		"rt:0|ms",
		"rt:2|ms",
		"rt:2|ms|@0.25",
		"rt:1500|ms",
		"loads:4|c",
	}
	untaggedAgain := []string{"hits:2|c", "loads:1|c"}
	for _, tc := range []struct {
		name         string
		opts         statsd.Options
		first, again []string
	}{
		{"plain", statsd.Options{}, untagged, untaggedAgain},
		{"plain with tags in the names, sorted, values cleaned", statsd.Options{Tags: tags}, []string{
			"hits.__env=prod.__zone=eu-1_a:3|c",
			"a_b_c.__env=prod.__zone=eu-1_a:1|c",
			"rt.__env=prod.__zone=eu-1_a:0|ms",
			"rt.__env=prod.__zone=eu-1_a:2|ms",
			"rt.__env=prod.__zone=eu-1_a:2|ms|@0.25",
			"rt.__env=prod.__zone=eu-1_a:1500|ms",
			"loads.__env=prod.__zone=eu-1_a:4|c",
		}, []string{
			"hits.__env=prod.__zone=eu-1_a:2|c",
			"loads.__env=prod.__zone=eu-1_a:1|c",
		}},
		{"DogStatsD without tags: as plain", statsd.Options{DogStatsD: true}, untagged, untaggedAgain},
		{"DogStatsD tags", statsd.Options{DogStatsD: true, Tags: tags}, []string{
			"hits:3|c|#env:prod,zone:eu-1_a",
			"a_b_c:1|c|#env:prod,zone:eu-1_a",
			"rt:0|ms|#env:prod,zone:eu-1_a",
			"rt:2|ms|#env:prod,zone:eu-1_a",
			"rt:2|ms|@0.25|#env:prod,zone:eu-1_a",
			"rt:1500|ms|#env:prod,zone:eu-1_a",
			"loads:4|c|#env:prod,zone:eu-1_a",
		}, []string{
			"hits:2|c|#env:prod,zone:eu-1_a",
			"loads:1|c|#env:prod,zone:eu-1_a",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := statsdtest.Listen(t)
			c := newClient(t, srv, tc.opts)
			hits := c.Counter("hits")
			c.Counter("never") // nothing counted, nothing sent
			hits.Add(2)
			c.Counter("hits").Inc() // the same counter
			c.Counter("a:b|c").Inc()
			rt := c.Timer("rt")
			rt.Observe(300 * time.Microsecond)
			for range 5 {
				rt.Observe(2*time.Millisecond + 900*time.Microsecond) // truncated to 2
			}
			rt.Observe(1500 * time.Millisecond)
			total := uint64(4)
			c.CounterFunc("loads", func() uint64 { return total })
			flush(t, c)
			if got := srv.Lines(t); !slices.Equal(got, tc.first) {
				t.Errorf("first flush:\n got %q\nwant %q", got, tc.first)
			}
			hits.Add(2)
			total = 5
			flush(t, c)
			if got := srv.Lines(t); !slices.Equal(got, tc.again) {
				t.Errorf("second flush:\n got %q\nwant %q", got, tc.again)
			}
			flush(t, c)
			if got := srv.Lines(t); len(got) != 0 {
				t.Errorf("a flush with nothing new sent %q", got)
			}
		})
	}
}

// TestTimerCounts: however many observations a flush carries, the sample
// rates of its lines add up to exactly that many, as statsd_exporter
// counts them (int(1/rate) events per line).
func TestTimerCounts(t *testing.T) {
	srv := statsdtest.Listen(t)
	c := newClient(t, srv, statsd.Options{})
	rt := c.Timer("rt")
	for _, n := range []int{1, 2, 3, 7, 1000, 123_457} {
		for range n {
			rt.Observe(time.Millisecond)
		}
		flush(t, c)
		lines := srv.Lines(t)
		if got := timerCount(t, lines); got != n {
			t.Errorf("%d observations: lines count %d: %q", n, got, lines)
		}
		if max := bitsLen(n); len(lines) > max {
			t.Errorf("%d observations: %d lines, want at most %d", n, len(lines), max)
		}
	}
}

func bitsLen(n int) int {
	b := 0
	for ; n > 0; n >>= 1 {
		b++
	}
	return b
}

// timerCount counts the observations timer lines stand for.
func timerCount(t *testing.T, lines []string) int {
	t.Helper()
	n := 0
	for _, l := range lines {
		_, rate, sampled := strings.Cut(l, "|@")
		if !sampled {
			n++
			continue
		}
		var r float64
		if _, err := fmt.Sscan(rate, &r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		n += int(1 / r)
	}
	return n
}

// TestPackets: lines are batched into packets no larger than
// MaxPacketSize, never split, and a line longer than that goes alone.
func TestPackets(t *testing.T) {
	const size = 200
	srv := statsdtest.Listen(t)
	c := newClient(t, srv, statsd.Options{MaxPacketSize: size})
	var want []string
	for i := range 40 {
		name := fmt.Sprintf("ratelimit.service.rate_limit.domain.key_%d.total_hits", i)
		c.Counter(name).Add(uint64(i + 1))
		want = append(want, fmt.Sprintf("%s:%d|c", name, i+1))
	}
	long := strings.Repeat("x", size)
	c.Counter(long).Inc()
	want = append(want, long+":1|c")
	flush(t, c)
	packets := srv.Packets(t)
	for _, p := range packets {
		if len(p) > size && strings.Count(p, "\n") > 1 {
			t.Errorf("packet of %d bytes holds several lines: %q", len(p), p)
		}
	}
	if got := statsdtest.SplitLines(packets); !slices.Equal(got, want) {
		t.Errorf("lines:\n got %q\nwant %q", got, want)
	}
	if min := 40 * 58 / size; len(packets) < min || len(packets) > 40/2 {
		t.Errorf("%d packets for 41 lines of about 58 bytes; want %d to 20", len(packets), min)
	}
}

// TestCloseFlushes: counts since the last flush are sent at Close, so a
// shutdown loses none; the client refuses to flush afterwards.
func TestCloseFlushes(t *testing.T) {
	srv := statsdtest.Listen(t)
	c, err := statsd.New(statsd.Options{Addr: srv.Addr(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c.Counter("hits").Add(7)
	c.Timer("rt").Observe(3 * time.Millisecond)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := srv.Lines(t), []string{"hits:7|c", "rt:3|ms"}; !slices.Equal(got, want) {
		t.Errorf("at Close: got %q, want %q", got, want)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := c.Flush(); !errors.Is(err, statsd.ErrClosed) {
		t.Errorf("Flush after Close = %v, want ErrClosed", err)
	}
}

// TestBackgroundFlush: without Flush, counts arrive every FlushInterval.
func TestBackgroundFlush(t *testing.T) {
	srv := statsdtest.Listen(t)
	c := newClient(t, srv, statsd.Options{FlushInterval: 20 * time.Millisecond})
	c.Counter("hits").Add(3)
	deadline := time.Now().Add(5 * time.Second)
	var got []string
	for len(got) == 0 && time.Now().Before(deadline) {
		got = srv.Lines(t)
	}
	if want := []string{"hits:3|c"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestTCP: over TCP, as lyft/gostats sends by default, lines arrive on one
// connection; while nothing listens, a flush fails and keeps the counts,
// which the first flush that connects sends.
func TestTCP(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, err := statsd.New(statsd.Options{Addr: addr, Network: "tcp", FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Counter("hits").Add(2)
	if err := c.Flush(); err == nil {
		t.Fatal("flush with nothing listening succeeded")
	}
	c.Counter("hits").Add(1)

	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s, free a moment ago: %v", addr, err)
	}
	defer ln.Close()
	lines := make(chan string, 10)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		sc := bufio.NewScanner(conn)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	flush(t, c)
	c.Timer("rt").Observe(0)
	flush(t, c)
	for _, want := range []string{"hits:3|c", "rt:0|ms"} {
		select {
		case got := <-lines:
			if got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no line; want %q", want)
		}
	}
}

// recordingSink is a statsd.Sink that writes each call as a statsd line
// would read: "name:3|c", "name:7|g", "name:2|ms×5".
type recordingSink struct{ calls []string }

func (r *recordingSink) Counter(name string, n uint64) {
	r.calls = append(r.calls, fmt.Sprintf("%s:%d|c", name, n))
}

func (r *recordingSink) Gauge(name string, v uint64) {
	r.calls = append(r.calls, fmt.Sprintf("%s:%d|g", name, v))
}

func (r *recordingSink) Timer(name string, ms, count uint64) {
	r.calls = append(r.calls, fmt.Sprintf("%s:%d|ms×%d", name, ms, count))
}

// take returns the calls so far and forgets them.
func (r *recordingSink) take() []string {
	out := r.calls
	r.calls = nil
	return out
}

// TestSink: a sink gets every flush as the server does, counters as
// their increase (none when they did not move), gauges at every flush,
// a timer's observations as counts by millisecond, names with their
// tags; with NoServer it alone gets them.
func TestSink(t *testing.T) {
	sink := &recordingSink{}
	c, err := statsd.New(statsd.Options{Sink: sink, NoServer: true, FlushInterval: time.Hour, Tags: []statsd.Tag{{Key: "env", Value: "prod"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Counter("hits").Add(3)
	c.Counter("idle")
	c.CounterFunc("loads", func() uint64 { return 4 })
	c.RuntimeStats("go") // gauges among them
	rt := c.Timer("rt")
	for range 5 {
		rt.Observe(2 * time.Millisecond)
	}
	rt.Observe(1500 * time.Millisecond)
	flush(t, c)
	want := []string{"hits.__env=prod:3|c", "loads.__env=prod:4|c", "go.numGoroutine.__env=prod|g",
		"rt.__env=prod:2|ms×1", "rt.__env=prod:2|ms×4", "rt.__env=prod:1500|ms×1"}
	if got := withoutRuntime(sink.take()); !slices.Equal(got, want) {
		t.Errorf("first flush: %q, want %q", got, want)
	}
	c.Counter("hits").Inc()
	flush(t, c)
	if got, want := withoutRuntime(sink.take()), []string{"hits.__env=prod:1|c", "go.numGoroutine.__env=prod|g"}; !slices.Equal(got, want) {
		t.Errorf("second flush: %q, want %q", got, want)
	}
}

// withoutRuntime drops the runtime's stats from calls but its gauge
// numGoroutine, whose value it drops: gauges are sent at every flush,
// whatever they read.
func withoutRuntime(calls []string) []string {
	var out []string
	for _, c := range calls {
		switch {
		case strings.HasPrefix(c, "go.numGoroutine."):
			name, _, _ := strings.Cut(c, ":")
			out = append(out, name+"|g")
		case !strings.HasPrefix(c, "go."):
			out = append(out, c)
		}
	}
	return out
}

// TestSinkBesideAServerDown: with a sink, a flush that cannot reach the
// TCP server still reaches the sink, and reports the server's error; the
// server loses those counts, as it would over UDP.
func TestSinkBesideAServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	sink := &recordingSink{}
	c, err := statsd.New(statsd.Options{Addr: addr, Network: "tcp", Sink: sink, FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Counter("hits").Add(2)
	if err := c.Flush(); err == nil || !strings.Contains(err.Error(), "connect to "+addr) {
		t.Errorf("flush with nothing listening: %v, want the connect error", err)
	}
	if got, want := sink.take(), []string{"hits:2|c"}; !slices.Equal(got, want) {
		t.Errorf("the sink got %q, want %q", got, want)
	}
}

// TestRuntimeStats: the Go runtime's gauges go out at every flush, its
// counters when they grew, under the reference server's names.
func TestRuntimeStats(t *testing.T) {
	srv := statsdtest.Listen(t)
	c := newClient(t, srv, statsd.Options{})
	c.RuntimeStats("ratelimit.go")
	flush(t, c)
	names := statNames(srv.Lines(t))
	for _, want := range []string{"ratelimit.go.alloc|g", "ratelimit.go.numGoroutine|g", "ratelimit.go.totalAlloc|c", "ratelimit.go.mallocs|c"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s in %q", want, names)
		}
	}
	_ = make([]byte, 1<<20) // allocate, so that totalAlloc grows
	flush(t, c)
	names = statNames(srv.Lines(t))
	for _, want := range []string{"ratelimit.go.heapAlloc|g", "ratelimit.go.totalAlloc|c"} {
		if !slices.Contains(names, want) {
			t.Errorf("second flush: no %s in %q", want, names)
		}
	}
}

// statNames returns each line's name and type: "name|c".
func statNames(lines []string) []string {
	var out []string
	for _, l := range lines {
		name, rest, _ := strings.Cut(l, ":")
		_, typ, _ := strings.Cut(rest, "|")
		out = append(out, name+"|"+typ)
	}
	return out
}

func TestParseTags(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []statsd.Tag
		err  string
	}{
		{"", nil, ""},
		{" \t", nil, ""},
		{"env:prod", []statsd.Tag{{Key: "env", Value: "prod"}}, ""},
		{"env:prod,zone:eu-1", []statsd.Tag{{Key: "env", Value: "prod"}, {Key: "zone", Value: "eu-1"}}, ""},
		{"env:", []statsd.Tag{{Key: "env", Value: ""}}, ""},
		{"env", nil, `tag "env": want key:value`},
		{"env:prod,", nil, `tag "": want key:value`},
		{"url:http://x", nil, `tag "url:http://x": want key:value`},
	} {
		got, err := statsd.ParseTags(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTags(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTags(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  statsd.Options
		field string // of the *option.Error
		err   string
	}{
		{"unknown network", statsd.Options{Network: "unix"}, "Network", `statsd.Options.Network "unix": want udp or tcp`},
		{"address without a port", statsd.Options{Addr: "statsd"}, "Addr", `statsd.Options.Addr "statsd": address statsd: missing port`},
		{"negative packet size", statsd.Options{MaxPacketSize: -1}, "MaxPacketSize", "statsd.Options.MaxPacketSize -1: must not be negative"},
		{"tag key with a colon", statsd.Options{Tags: []statsd.Tag{{Key: "a:b", Value: "c"}}}, "Tags", `statsd.Options.Tags "a:b": ":" in a tag key would corrupt`},
		{"tag key with a newline", statsd.Options{Tags: []statsd.Tag{{Key: "a\nb", Value: "c"}}}, "Tags", `would corrupt`},
		{"no server and no sink", statsd.Options{NoServer: true}, "NoServer", "statsd.Options.NoServer sends the stats nowhere without statsd.Options.Sink"},
		{"a sink with DogStatsD", statsd.Options{Sink: &recordingSink{}, DogStatsD: true}, "Sink", "statsd.Options.Sink takes plain statsd names"},
	} {
		c, err := statsd.New(tc.opts)
		if err == nil {
			c.Close()
			t.Errorf("%s: no error", tc.name)
			continue
		}
		var oe *option.Error
		if !errors.As(err, &oe) || oe.Field != tc.field || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %q, want an option.Error of %s containing %q", tc.name, err, tc.field, tc.err)
		}
	}
}

// TestConcurrentCounting runs counters and timers from many goroutines
// against flushes, for the race detector, and checks nothing is lost.
func TestConcurrentCounting(t *testing.T) {
	srv := statsdtest.Listen(t)
	c := newClient(t, srv, statsd.Options{})
	const workers, each = 8, 2000
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			hits := c.Counter("hits")
			for i := range each {
				hits.Inc()
				c.Timer("rt").Observe(time.Duration(w*i%3) * time.Millisecond)
			}
		}()
	}
	var lines []string
	for finished := 0; finished < workers; {
		select {
		case <-done:
			finished++
		default:
			flush(t, c)
		}
	}
	flush(t, c)
	lines = append(lines, srv.Lines(t)...)
	var hits, timed []string
	for _, l := range lines {
		if strings.HasPrefix(l, "hits:") {
			hits = append(hits, l)
		} else {
			timed = append(timed, l)
		}
	}
	total := 0
	for _, l := range hits {
		var n int
		if _, err := fmt.Sscan(strings.TrimSuffix(strings.TrimPrefix(l, "hits:"), "|c"), &n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != workers*each {
		t.Errorf("hits sent %d, want %d", total, workers*each)
	}
	if got := timerCount(t, timed); got != workers*each {
		t.Errorf("timer observations sent %d, want %d", got, workers*each)
	}
}

// BenchmarkCount measures what a request pays per stat, from all cores at
// once: a counter's increment and a timer's observation.
func BenchmarkCount(b *testing.B) {
	c, err := statsd.New(statsd.Options{Addr: statsdtest.Listen(b).Addr(), FlushInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	hits, rt := c.Counter("hits"), c.Timer("rt")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hits.Inc()
			rt.Observe(300 * time.Microsecond)
		}
	})
}
