// Package statsd sends counters, timers and gauges to a statsd server, as
// plain statsd or DogStatsD lines, the way lyft/gostats does for the
// reference server (envoyproxy/ratelimit): counts are kept in memory and
// flushed as deltas every FlushInterval, batched into packets, so that
// counting costs an atomic add and never a network call. A Sink receives
// the same flushes in the process, as gostats's sinks do (the reference's
// Prometheus exporter is one).
//
// It owns the wire format, the batching and the connection, and knows no
// stat names: package rlsmetrics names the request path's stats as the
// reference server does, and cmd/server adds the rest. Of floodgate it
// imports only option (its errors).
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

// DefaultAddr is Options.Addr when it is empty: the reference server's
// STATSD_HOST and STATSD_PORT defaults.
const DefaultAddr = "localhost:8125"

// DefaultFlushInterval is Options.FlushInterval when it is zero: the
// reference server's STATS_FLUSH_INTERVAL default.
const DefaultFlushInterval = 10 * time.Second

// DefaultUDPPacketSize is Options.MaxPacketSize over UDP when it is zero:
// the largest payload that fits an Ethernet frame with IPv6 headers, as
// DogStatsD clients use.
const DefaultUDPPacketSize = 1432

// DefaultTCPPacketSize is Options.MaxPacketSize over TCP when it is zero:
// TCP has no datagram limit, so this only bounds one write.
const DefaultTCPPacketSize = 8192

// sendTimeout bounds a dial and a write, so that a stuck server delays a
// flush, and Close, by seconds rather than forever.
const sendTimeout = 5 * time.Second

// ErrClosed is returned by Flush after Close.
var ErrClosed = errors.New("statsd: client closed")

// Options configure a Client. The zero value sends plain statsd over UDP to
// DefaultAddr every DefaultFlushInterval.
type Options struct {
	// Addr is the statsd server, "host:port"; empty means DefaultAddr. The
	// name is resolved when the client connects: at its first flush, and
	// again after a TCP connection fails.
	Addr string
	// Network is "udp" or "tcp"; empty means "udp". The reference server's
	// plain statsd (lyft/gostats) uses TCP unless STATSD_PROTOCOL says
	// otherwise; its DogStatsD uses UDP.
	Network string
	// FlushInterval is how often counts are sent; 0 means
	// DefaultFlushInterval. With ManualFlush counts are sent only on Flush and
	// Close.
	FlushInterval time.Duration
	// ManualFlush sends counts only on Flush and Close, never in the
	// background.
	ManualFlush bool
	// Tags are added to every stat: in plain statsd as lyft/gostats writes
	// them into the name (".__key=value", by key), with DogStatsD as
	// "|#key:value". Values have '.', ':' and '|' replaced by '_', as
	// gostats does; tags with an empty key or value are dropped, and of two
	// with one key the last wins. A key with ':', '|', ',', '=', '#' or a
	// control character is an error, since it would corrupt the lines.
	Tags []Tag
	// DogStatsD writes tags the DogStatsD way ("|#key:value") instead of
	// into the names.
	DogStatsD bool
	// Mogrifiers rename DogStatsD stats and tag them, as the reference
	// server's USE_DOG_STATSD_MOGRIFIERS do: the first whose pattern
	// matches a name applies. They need DogStatsD.
	Mogrifiers []Mogrifier
	// MaxPacketSize bounds the bytes of one packet (one write over TCP);
	// lines are never split, so a longer line goes alone. 0 means
	// DefaultUDPPacketSize or DefaultTCPPacketSize.
	MaxPacketSize int
	// Logger receives a warning when sending starts to fail and a note when
	// it works again; nil discards them.
	Logger *slog.Logger
	// Sink, when set, receives every flush in this process besides the
	// statsd server. A flush then reads the stats even when the server
	// cannot be reached, so that the server loses those counts (as over
	// UDP) while Sink gets them. It takes plain statsd names, so it is
	// refused with DogStatsD.
	Sink Sink
	// NoServer sends to no statsd server: every flush goes to Sink alone,
	// which it needs.
	NoServer bool
}

// Sink receives the stats of each flush in the process, as lyft/gostats
// hands them to its sinks: a counter's increase since the last flush
// (never 0), a gauge's value (at every flush), and a timer's
// observations, each value in whole milliseconds with the number of
// times it was observed. Names are those plain statsd sends, tags
// included (".__key=value"). Its methods are called by one flush at a
// time, never concurrently.
type Sink interface {
	Counter(name string, increase uint64)
	Gauge(name string, value uint64)
	Timer(name string, millis, count uint64)
}

// Client keeps stats and sends them to a statsd server. Stats are created
// by name (Counter, Timer, CounterFunc, RuntimeStats) and live as long as
// the Client: bound the names you create. It is safe for concurrent use.
type Client struct {
	network, addr string
	maxPacket     int
	logger        *slog.Logger
	tags          []Tag // Options.Tags, normalized
	dog           bool
	mogrifiers    []Mogrifier
	sink          Sink
	noServer      bool

	mu    sync.Mutex // guards byKey, stats and hooks
	byKey map[statKey]stat
	stats []stat // in creation order, so packets are stable
	hooks []func()

	flushMu sync.Mutex // one flush at a time; guards what follows
	conn    net.Conn
	w       writer
	closed  bool

	stop, done chan struct{} // nil without background flushing
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

// New returns a Client for opts and, unless opts.ManualFlush, starts
// flushing in the background until Close. It does not
// connect: a server that is down delays nothing, and counts wait in memory
// until it is reachable (over TCP; a UDP packet nobody receives is lost).
func New(opts Options) (*Client, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	c := &Client{network: opts.Network, addr: opts.Addr, maxPacket: opts.MaxPacketSize, logger: opts.Logger, byKey: map[statKey]stat{}}
	if c.network == "" {
		c.network = "udp"
	}
	if c.addr == "" {
		c.addr = DefaultAddr
	}
	if c.maxPacket == 0 {
		c.maxPacket = DefaultUDPPacketSize
		if c.network == "tcp" {
			c.maxPacket = DefaultTCPPacketSize
		}
	}
	if c.logger == nil {
		c.logger = slog.New(slog.DiscardHandler)
	}
	c.tags = normalizeTags(opts.Tags)
	c.dog, c.mogrifiers = opts.DogStatsD, opts.Mogrifiers
	c.sink, c.noServer = opts.Sink, opts.NoServer
	interval := opts.FlushInterval
	if interval == 0 {
		interval = DefaultFlushInterval
	}
	if !opts.ManualFlush {
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.run(interval)
	}
	return c, nil
}

// Validate reports the first option New refuses as an *option.Error
// ("statsd.Options.Network \"unix\": want udp or tcp"), or nil. Zero
// values are valid: they mean the defaults.
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

// Counter returns the counter of name, creating it at the first call: each
// flush sends what it gained since the previous one ("name:3|c"), and
// nothing when it gained nothing. ':', '|' and line breaks in name become
// '_', as the reference server does for the ':' and '|' of its names.
func (c *Client) Counter(name string) *Counter {
	return register(c, 'c', name, func(w wire) *Counter { return &Counter{wire: w} })
}

// Timer returns the timer of name, creating it at the first call. Each
// flush sends the durations observed since the previous one, in whole
// milliseconds ("name:3|ms"); see Timer for how many lines that makes.
func (c *Client) Timer(name string) *Timer {
	return register(c, 't', name, func(w wire) *Timer { return &Timer{wire: w} })
}

// CounterFunc makes name a counter whose running total f returns: each
// flush calls f and sends the increase since the previous flush (all of it
// at the first), as a Counter would. A total lower than the last one sent
// means its source started again, and is sent whole. f must be cheap and
// safe to call from another goroutine. A second call for the same name
// does nothing.
func (c *Client) CounterFunc(name string, f func() uint64) {
	c.funcStat(name, f, false)
}

// funcStat makes name a counter whose total f returns or, if gauge, a gauge
// of f's value sent at every flush ("name:7|g"), as lyft/gostats sends its
// gauges.
func (c *Client) funcStat(name string, f func() uint64, gauge bool) {
	register(c, 'f', name, func(w wire) *funcStat { return &funcStat{wire: w, read: f, gauge: gauge} })
}

// register returns the stat of kind and name, made by create from its
// wire form if it is new.
func register[S stat](c *Client, kind byte, name string, create func(wire) S) S {
	key := statKey{kind, name}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.byKey[key]; ok {
		if typed, ok := s.(S); ok {
			return typed
		}
	}
	s := create(c.wire(name))
	c.byKey[key] = s
	c.stats = append(c.stats, s)
	return s
}

// beforeFlush runs f at the start of every flush, before the stats are
// read: for stats that are computed together (RuntimeStats).
func (c *Client) beforeFlush(f func()) {
	c.mu.Lock()
	c.hooks = append(c.hooks, f)
	c.mu.Unlock()
}

var nameReplacer = strings.NewReplacer(":", "_", "|", "_", "\n", "_", "\r", "_")

// wire returns how the lines of name start and end: in plain statsd the
// tags go into the name, with DogStatsD after the type, the extra tags
// before those of the mogrifier that renames it.
func (c *Client) wire(name string) wire {
	name = nameReplacer.Replace(name)
	if !c.dog {
		full := name + nameTags(c.tags)
		return wire{head: full + ":", name: full}
	}
	name, tags := mogrify(c.mogrifiers, name)
	return wire{head: nameReplacer.Replace(name) + ":", tail: dogTags(append(slices.Clip(c.tags), tags...))}
}

// Flush sends what the stats gathered since the last flush now. It returns
// an error if it could not connect, in which case the counts are kept for
// the next flush, or if a write failed, in which case the counts of the
// lines not sent are lost, as with any statsd client; ErrClosed after
// Close.
func (c *Client) Flush() error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	if c.closed {
		return ErrClosed
	}
	return c.flush()
}

// flush sends every stat's lines, and hands them to the sink; the
// caller holds flushMu. Without a sink, a server that cannot be reached
// keeps the counts for the next flush.
func (c *Client) flush() error {
	var dialErr error
	if c.conn == nil && !c.noServer {
		conn, err := net.DialTimeout(c.network, c.addr, sendTimeout)
		switch {
		case err == nil:
			c.conn = conn
		case c.sink == nil:
			return fmt.Errorf("statsd: connect to %s over %s: %w", c.addr, c.network, err)
		default:
			dialErr = fmt.Errorf("statsd: connect to %s over %s: %w", c.addr, c.network, err)
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

// run flushes every interval until Close, and logs when sending starts and
// stops failing (not at every flush: a server that is down for an hour
// would fill the log).
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
				c.logger.Warn("statsd: sending stats failed; retrying at every flush", "err", err)
			case err == nil && c.failing:
				c.logger.Info("statsd: sending stats again", "addr", c.addr)
			}
			c.failing = err != nil
		}
	}
}

// Close stops the background flushing, sends what the stats gathered since
// the last flush, so that a shutdown loses no counts, and closes the
// connection. It returns the error of that last flush, and is safe to call
// more than once.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.stop != nil {
			close(c.stop)
			<-c.done
		}
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
