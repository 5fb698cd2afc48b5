// Package statsd sends counters, timers and gauges to a statsd server as
// plain statsd or DogStatsD lines, as lyft/gostats does for the reference
// server: counts are kept in memory, so that counting costs an atomic add,
// and flushed as deltas every FlushInterval, in packets, and to a Sink in
// the process. Its users choose the stat names.
package statsd

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/floodgate/floodgate/pkg/option"
)

// Defaults of Options' zero fields: the reference server's STATSD_HOST,
// STATSD_PORT and STATS_FLUSH_INTERVAL; over UDP the payload of an
// Ethernet frame with IPv6 headers.
const (
	DefaultAddr          = "localhost:8125"
	DefaultFlushInterval = 10 * time.Second
	DefaultUDPPacketSize = 1432
	DefaultTCPPacketSize = 8192
	sendTimeout          = 5 * time.Second // bounds a dial or a write
)

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("statsd: client closed")

// Options configure a Client. The zero value sends plain statsd over UDP to
// DefaultAddr every DefaultFlushInterval.
type Options struct {
	// Addr is the statsd server, "host:port", resolved at each connection.
	Addr string
	// Network is "udp" or "tcp"; empty means "udp".
	Network string
	// FlushInterval is how often counts are sent.
	FlushInterval time.Duration
	// Tags are added to every stat: in plain statsd into the name
	// (".__key=value", as gostats), with DogStatsD as "|#key:value".
	// Punctuation in values becomes '_'; empty ones are dropped; of two
	// with one key the last wins. A key that would corrupt lines is refused.
	Tags []Tag
	// DogStatsD writes DogStatsD lines.
	DogStatsD bool
	// Mogrifiers rename and tag DogStatsD stats, as the reference server's
	// USE_DOG_STATSD_MOGRIFIERS: the first that matches applies.
	Mogrifiers []Mogrifier
	// MaxPacketSize bounds a packet (a write over TCP); a longer line goes
	// alone.
	MaxPacketSize int
	// Logger hears when sending starts failing and works again.
	Logger *slog.Logger
	// Sink, when set, receives every flush too, even when the server
	// cannot be reached. It takes plain statsd names, not DogStatsD.
	Sink Sink
	// NoServer sends to Sink alone.
	NoServer bool
}

// Sink receives each flush, as gostats's sinks do: a counter's increase
// (never 0), a gauge's value, a timer's observations in whole milliseconds
// with their count; names as plain statsd sends them. One flush at a time
// calls it.
type Sink interface {
	Counter(name string, increase uint64)
	Gauge(name string, value uint64)
	Timer(name string, millis, count uint64)
}

// Client keeps stats and sends them. A stat lives as long as the Client:
// bound the names you create. It is safe for concurrent use.
type Client struct {
	opts Options // defaults set, Tags normalized

	mu    sync.Mutex // guards byKey, stats and hooks
	byKey map[statKey]stat
	stats []stat // in creation order, so packets are stable
	hooks []func()

	flushMu sync.Mutex // one flush at a time; guards what follows
	conn    net.Conn
	w       writer
	closed  bool

	stop, done chan struct{} // stop ends run, which then closes done
	failing    bool          // the last background flush failed; run's own
	closeOnce  sync.Once
	closeErr   error
}

// stat is one name's state, written into the packets by a flush.
type stat interface {
	appendTo(w *writer)
}

type statKey struct {
	kind byte // 'c' counter, 't' timer, 'f' function
	name string
}

// New returns a Client for opts, which flushes in the background until
// Close. It does not connect: counts wait until the server is reachable.
func New(opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Network = cmp.Or(opts.Network, "udp")
	opts.Addr = cmp.Or(opts.Addr, DefaultAddr)
	opts.FlushInterval = cmp.Or(opts.FlushInterval, DefaultFlushInterval)
	if opts.MaxPacketSize == 0 {
		opts.MaxPacketSize = DefaultUDPPacketSize
		if opts.Network == "tcp" {
			opts.MaxPacketSize = DefaultTCPPacketSize
		}
	}
	opts.Logger = cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	opts.Tags = normalizeTags(opts.Tags)
	c := &Client{opts: opts, byKey: map[statKey]stat{}, stop: make(chan struct{}), done: make(chan struct{})}
	go c.run(opts.FlushInterval)
	return c, nil
}

// Validate reports the first option New refuses as an *option.Error
// ("statsd.Options.Network \"unix\": want udp or tcp"), or nil. Zero
// values mean the defaults.
func (o Options) Validate() error {
	switch {
	case o.Network != "" && o.Network != "udp" && o.Network != "tcp":
		return refused("Network", o.Network, "want udp or tcp")
	case o.FlushInterval < 0:
		return refused("FlushInterval", o.FlushInterval, "must not be negative")
	case o.MaxPacketSize < 0:
		return refused("MaxPacketSize", o.MaxPacketSize, "must not be negative")
	case len(o.Mogrifiers) > 0 && !o.DogStatsD:
		return &option.Error{Options: "statsd.Options", Field: "Mogrifiers", Want: "rename DogStatsD stats; they need %s", With: []string{"DogStatsD"}}
	case o.NoServer && o.Sink == nil:
		return &option.Error{Options: "statsd.Options", Field: "NoServer", Want: "sends the stats nowhere without %s", With: []string{"Sink"}}
	case o.Sink != nil && o.DogStatsD:
		return &option.Error{Options: "statsd.Options", Field: "Sink", Want: "takes plain statsd names; it cannot be used with %s", With: []string{"DogStatsD"}}
	}
	if o.Addr != "" {
		if _, _, err := net.SplitHostPort(o.Addr); err != nil {
			return &option.Error{Options: "statsd.Options", Field: "Addr", Value: o.Addr, Err: err}
		}
	}
	if err := checkKeys("Tags", o.Tags); err != nil {
		return err
	}
	for _, m := range o.Mogrifiers {
		if err := checkKeys("Mogrifiers", m.Tags); err != nil {
			return err
		}
	}
	return nil
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "statsd.Options", Field: field, Value: v, Want: want}
}

// Counter returns the counter of name: each flush sends what it gained
// ("name:3|c"), if anything. ':', '|' and line breaks in names become '_'.
func (c *Client) Counter(name string) *Counter {
	return register(c, 'c', name, func(w wire) *Counter { return &Counter{wire: w} })
}

// Timer returns the timer of name: each flush sends the durations
// observed, in whole milliseconds ("name:3|ms").
func (c *Client) Timer(name string) *Timer {
	return register(c, 't', name, func(w wire) *Timer { return &Timer{wire: w} })
}

// CounterFunc makes name a counter of the running total f returns: each
// flush sends its increase, or all of it when it went down (its source
// restarted). f must be cheap and safe for concurrent use.
func (c *Client) CounterFunc(name string, f func() uint64) {
	register(c, 'f', name, func(w wire) *funcStat { return &funcStat{wire: w, read: f} })
}

// register returns the stat of kind and name, made by create from its
// wire form if it is new.
func register[S stat](c *Client, kind byte, name string, create func(wire) S) S {
	key := statKey{kind, name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.byKey[key]; ok {
		return s.(S) // kind is S's: one kind, one type
	}
	s := create(c.wire(name))
	c.byKey[key] = s
	c.stats = append(c.stats, s)
	return s
}

// beforeFlush runs f before every flush reads the stats.
func (c *Client) beforeFlush(f func()) {
	c.mu.Lock()
	c.hooks = append(c.hooks, f)
	c.mu.Unlock()
}

var nameReplacer = strings.NewReplacer(":", "_", "|", "_", "\n", "_", "\r", "_")

// wire returns how the lines of name start and end.
func (c *Client) wire(name string) wire {
	name = nameReplacer.Replace(name)
	if !c.opts.DogStatsD {
		full := name + nameTags(c.opts.Tags)
		return wire{head: full + ":", name: full}
	}
	name, tags := mogrify(c.opts.Mogrifiers, name)
	return wire{head: nameReplacer.Replace(name) + ":", tail: dogTags(append(slices.Clip(c.opts.Tags), tags...))}
}

// Flush sends what the stats gathered now. After a failed dial the counts
// wait for the next flush; a failed write loses its lines.
func (c *Client) Flush() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return c.flush()
}

// flush sends every stat's lines, under flushMu.
func (c *Client) flush() error {
	var dialErr error
	if c.conn == nil && !c.opts.NoServer {
		conn, err := net.DialTimeout(c.opts.Network, c.opts.Addr, sendTimeout)
		if err != nil {
			dialErr = fmt.Errorf("statsd: connect to %s over %s: %w", c.opts.Addr, c.opts.Network, err)
			if c.opts.Sink == nil {
				return dialErr // nowhere to send
			}
		} else {
			c.conn = conn
		}
	}
	c.mu.Lock()
	hooks, stats := c.hooks, c.stats
	c.mu.Unlock()
	for _, f := range hooks {
		f()
	}
	c.w.client, c.w.err = c, nil
	for _, s := range stats {
		s.appendTo(&c.w)
	}
	c.w.send()
	return cmp.Or(dialErr, c.w.err)
}

// run flushes every interval until Close, logging when sending starts and
// stops failing, not at every flush.
func (c *Client) run(interval time.Duration) {
	defer close(c.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			err := c.Flush()
			switch {
			case err != nil && !c.failing:
				c.opts.Logger.Warn("statsd: sending stats failed; retrying at every flush", "err", err)
			case err == nil && c.failing:
				c.opts.Logger.Info("statsd: sending stats again", "addr", c.opts.Addr)
			}
			c.failing = err != nil
		}
	}
}

// Close stops flushing in the background, flushes a last time and closes
// the connection, returning that flush's error. It may be called again.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
		c.flushMu.Lock()
		defer c.flushMu.Unlock()
		c.closeErr = c.flush()
		c.closed = true
		if c.conn != nil {
			if err := c.conn.Close(); err != nil && c.closeErr == nil {
				c.closeErr = fmt.Errorf("statsd: close: %w", err)
			}
			c.conn = nil
		}
	})
	return c.closeErr
}
