package statsd

import (
	"fmt"
	"maps"
	"math"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Counter counts events with one atomic add. Client.Counter makes one; a
// nil *Counter counts nothing. It is safe for concurrent use.
type Counter struct {
	v atomic.Uint64
	wire
	sent uint64 // v at the last flush; Client.flushMu guards it
}

// Add counts n events.
func (c *Counter) Add(n uint64) {
	if c != nil {
		c.v.Add(n)
	}
}

// Inc counts one event.
func (c *Counter) Inc() { c.Add(1) }

func (c *Counter) appendTo(w *writer) {
	v := c.v.Load()
	if d := v - c.sent; d != 0 {
		w.line(c.wire, d, "c", 0)
		c.sent = v
	}
}

// timerFastMillis is how many millisecond values a Timer counts without a
// lock; slower answers are rare enough for a map.
const timerFastMillis = 1024

// Timer records durations in whole milliseconds, as the reference server's
// response-time timer. Client.Timer makes one; a nil *Timer records
// nothing. It is safe for concurrent use. A flush writes a value seen n
// times as a line per bit of n, at that bit's sample rate: 5 observations
// of 2 ms are "name:2|ms" and "name:2|ms|@0.25".
type Timer struct {
	wire
	fast [timerFastMillis]atomic.Uint64

	mu   sync.Mutex
	slow map[uint64]uint64 // observations of timerFastMillis ms or more
}

// Observe records one duration; a negative one counts as 0 ms.
func (t *Timer) Observe(d time.Duration) {
	if t == nil {
		return
	}
	ms := uint64(max(d.Milliseconds(), 0))
	if ms < timerFastMillis {
		t.fast[ms].Add(1)
		return
	}
	t.mu.Lock()
	if t.slow == nil {
		t.slow = map[uint64]uint64{}
	}
	t.slow[ms]++
	t.mu.Unlock()
}

func (t *Timer) appendTo(w *writer) {
	for ms := range t.fast {
		if n := t.fast[ms].Swap(0); n != 0 {
			w.samples(t.wire, uint64(ms), n)
		}
	}
	t.mu.Lock()
	slow := t.slow
	t.slow = nil
	t.mu.Unlock()
	for _, ms := range slices.Sorted(maps.Keys(slow)) {
		w.samples(t.wire, ms, slow[ms])
	}
}

// funcStat is a counter or gauge read from a function at each flush.
type funcStat struct {
	wire
	read  func() uint64
	gauge bool   // sent as its value at every flush ("name:7|g")
	last  uint64 // counters: the total at the last flush
}

func (f *funcStat) appendTo(w *writer) {
	v := f.read()
	if f.gauge {
		w.line(f.wire, v, "g", 0)
		return
	}
	d := v - f.last
	if v < f.last {
		d = v // the source started again
	}
	if d != 0 {
		w.line(f.wire, d, "c", 0)
	}
	f.last = v
}

// RuntimeStats adds the Go runtime's stats under prefix, named and typed as
// lyft/gostats does ("ratelimit.go" for the reference server), read once
// per flush. Call it once.
func (c *Client) RuntimeStats(prefix string) {
	var ms runtime.MemStats
	c.beforeFlush(func() { runtime.ReadMemStats(&ms) })
	for _, s := range []struct {
		name  string
		gauge bool
		read  func() uint64
	}{
		{"alloc", true, func() uint64 { return ms.Alloc }},
		{"sys", true, func() uint64 { return ms.Sys }},
		{"heapAlloc", true, func() uint64 { return ms.HeapAlloc }},
		{"heapSys", true, func() uint64 { return ms.HeapSys }},
		{"heapIdle", true, func() uint64 { return ms.HeapIdle }},
		{"heapInuse", true, func() uint64 { return ms.HeapInuse }},
		{"heapReleased", true, func() uint64 { return ms.HeapReleased }},
		{"heapObjects", true, func() uint64 { return ms.HeapObjects }},
		{"nextGC", true, func() uint64 { return ms.NextGC }},
		{"lastGC", true, func() uint64 { return ms.LastGC }},
		{"gcCPUPercent", true, func() uint64 { return uint64(ms.GCCPUFraction * 100) }},
		{"numGoroutine", true, func() uint64 { return uint64(runtime.NumGoroutine()) }},
		{"totalAlloc", false, func() uint64 { return ms.TotalAlloc }},
		{"mallocs", false, func() uint64 { return ms.Mallocs }},
		{"frees", false, func() uint64 { return ms.Frees }},
		{"pauseTotalNs", false, func() uint64 { return ms.PauseTotalNs }},
		{"numGC", false, func() uint64 { return uint64(ms.NumGC) }},
	} {
		name := prefix + "." + s.name
		register(c, 'f', name, func(w wire) *funcStat { return &funcStat{wire: w, read: s.read, gauge: s.gauge} })
	}
}

// sampleRates[j] is the rate of a line standing for 2^j observations, in
// full ("0.25"): the Etsy daemon reads no exponents.
var sampleRates = func() [64]string {
	var r [64]string
	for j := 1; j < len(r); j++ {
		r[j] = strconv.FormatFloat(math.Ldexp(1, -j), 'f', -1, 64)
	}
	return r
}()

// writer batches lines into packets of at most Client.maxPacket bytes.
type writer struct {
	client  *Client
	buf     []byte // the packet being filled
	scratch []byte // the line being built
	err     error  // the first send error of this flush
}

// wire is how the lines of a stat start and end.
type wire struct {
	head string // the name, in plain statsd its tags, and ':'
	tail string // with DogStatsD its tags: "|#env:prod"
	name string // in plain statsd, head without ':', as a Sink takes it
}

// samples writes n observations of value ms, one line per bit of n.
func (w *writer) samples(s wire, ms, n uint64) {
	for j := 0; n != 0; j, n = j+1, n>>1 {
		if n&1 != 0 {
			w.line(s, ms, "ms", j)
		}
	}
}

// line writes a line of s, at sample rate 2^-rateExp, and hands it to the
// sink.
func (w *writer) line(s wire, value uint64, typ string, rateExp int) {
	if sink := w.client.opts.Sink; sink != nil {
		switch typ {
		case "c":
			sink.Counter(s.name, value)
		case "g":
			sink.Gauge(s.name, value)
		case "ms":
			sink.Timer(s.name, value, 1<<rateExp)
		}
	}
	if w.client.opts.NoServer {
		return
	}
	l := append(w.scratch[:0], s.head...)
	l = strconv.AppendUint(l, value, 10)
	l = append(l, '|')
	l = append(l, typ...)
	if rateExp > 0 {
		l = append(l, "|@"...)
		l = append(l, sampleRates[rateExp]...)
	}
	l = append(l, s.tail...)
	l = append(l, '\n')
	w.scratch = l
	if len(w.buf) > 0 && len(w.buf)+len(l) > w.client.opts.MaxPacketSize {
		w.send()
	}
	w.buf = append(w.buf, l...)
}

// send writes the packet. A failed write closes the connection, dialled
// again at the next flush.
func (w *writer) send() {
	c := w.client
	packet := w.buf
	w.buf = w.buf[:0]
	if len(packet) == 0 || c.conn == nil {
		return
	}
	err := c.conn.SetWriteDeadline(time.Now().Add(sendTimeout))
	if err == nil {
		_, err = c.conn.Write(packet)
	}
	if err == nil {
		return
	}
	if w.err == nil {
		w.err = fmt.Errorf("statsd: send to %s over %s: %w", c.opts.Addr, c.opts.Network, err)
	}
	c.conn.Close()
	c.conn = nil
}
