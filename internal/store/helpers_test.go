package store

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/internal/testlog"
)

// fakeClock is a clock that moves only when the test says. Each After
// call arms a timer; a test moves the clock by one beat and waits until
// the watch has armed its next one, which it does once it has handled the
// beat: so a test knows when the watch is done without sleeping.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []fakeTimer
	armed   int           // After calls so far
	changed chan struct{} // closed at each After call
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

// newFakeClock starts at the real time, so that the failures the limiters
// date with the real clock are a few fake seconds old.
func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now(), changed: make(chan struct{})}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
	} else {
		c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	}
	c.armed++
	close(c.changed)
	c.changed = make(chan struct{})
	return ch
}

// advance moves the clock by d and fires the timers due. It returns
// After's count of calls so far and the number of timers fired.
func (c *fakeClock) advance(d time.Duration) (armed, fired int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.timers[:0]
	for _, tm := range c.timers {
		if tm.at.After(c.now) {
			kept = append(kept, tm)
			continue
		}
		tm.ch <- c.now
		fired++
	}
	c.timers = kept
	return c.armed, fired
}

// waitArmed waits until After has been called n times in all.
func (c *fakeClock) waitArmed(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		armed, changed := c.armed, c.changed
		c.mu.Unlock()
		if armed >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the watch armed %d timers, want %d: it is stuck", armed, n)
		}
	}
}

// beat moves the clock by one beat of the watches (sickProbeInterval) and
// returns once each has handled it (probed if it was due, logged) and
// armed its next timer.
func (c *fakeClock) beat(t *testing.T) {
	t.Helper()
	armed, fired := c.advance(sickProbeInterval)
	c.waitArmed(t, armed+fired)
}

// beats moves the clock by n beats, one at a time.
func (c *fakeClock) beats(t *testing.T, n int) {
	t.Helper()
	for range n {
		c.beat(t)
	}
}

// openOn opens a store on clk, its log lines in the returned buffer; it
// is closed when the test ends.
func openOn(t *testing.T, clk clock, opts Options) (*Store, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := open(ctx, opts, clk)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// countLines counts the lines of logs holding s.
func countLines(logs, s string) int {
	n := 0
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			n++
		}
	}
	return n
}

// deadAddr is a loopback address that refuses connections until the test
// ends: the local port of a connection the test holds open, which no
// server can listen on meanwhile. (A port found free and closed could be
// taken by a server that another test process starts.)
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return c.LocalAddr().String()
}

// metrics registers the store's metrics on a new registry and returns
// each series' value by name and labels ("name{k=v,...}"), with each
// family's help by name.
func metrics(t *testing.T, s *Store) (values map[string]float64, help map[string]string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	values, help = map[string]float64{}, map[string]string{}
	for _, mf := range mfs {
		help[mf.GetName()] = mf.GetHelp()
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			name := mf.GetName()
			if labels != nil {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			values[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return values, help
}
