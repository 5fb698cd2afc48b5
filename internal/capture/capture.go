package capture

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/floodgate/floodgate/pkg/option"
)

// Defaults of the Options fields left zero.
const (
	DefaultMaxBytes = 100 << 20
	DefaultSample   = 1.0 // every request
)

// TimeLayout is the layout of the times a Recorder writes: RFC 3339 in UTC
// with always six digits of microseconds, so that captured lines sort as
// text in time order (LC_ALL=C sort).
const TimeLayout = "2006-01-02T15:04:05.000000Z07:00"

// captureQueue is the number of lines waiting for the writer. A request
// finding it full is not captured and is counted: capturing never makes a
// request wait.
const captureQueue = 4096

// Validate reports the first option New refuses as an *option.Error
// ("capture.Options.Sample 2: want a share in (0, 1]"), or nil.
func (o Options) Validate() error {
	refused := func(field string, v any, want string) error {
		return &option.Error{Options: "capture.Options", Field: field, Value: v, Want: want}
	}
	switch {
	case o.Sample < 0 || o.Sample > 1 || math.IsNaN(o.Sample):
		return refused("Sample", o.Sample, "want a share in (0, 1]")
	case o.MaxBytes < 0:
		return refused("MaxBytes", o.MaxBytes, "must not be negative")
	}
	return nil
}

// Options configure a Recorder. Zero values take the defaults.
type Options struct {
	// Sample is the share of requests kept, in (0, 1]. A request is kept
	// or not by a hash of its domain and descriptors, so that a per-client
	// limit sees the whole of a kept client's traffic in a replay.
	Sample float64
	// MaxBytes bounds the file, counting what it held before. Once a line
	// would pass it, capturing stops with a warning, and the lines not
	// written are counted.
	MaxBytes int64
	// Now is the clock of the lines' times; nil means time.Now.
	Now func() time.Time
	// Logger gets a warning when the file reaches MaxBytes or a write
	// fails; nil discards it.
	Logger *slog.Logger
}

// Stats count a Recorder's lines.
type Stats struct {
	// Written lines are in the file (once Close returned).
	Written int64
	// Dropped lines found the queue full.
	Dropped int64
	// OverSize lines were not written because the file reached MaxBytes
	// (or after a write failed).
	OverSize int64
}

// Recorder is a pb.RateLimitServiceServer that records the requests it
// passes to another one, one JSON line each (the body of a /json request
// plus its "time"), and answers as that one does. A goroutine of its own writes the lines. It is safe for concurrent
// use.
type Recorder struct {
	pb.UnimplementedRateLimitServiceServer

	next      pb.RateLimitServiceServer
	threshold uint64 // keep a request whose hash is below; MaxUint64 keeps all
	seed      maphash.Seed
	now       func() time.Time
	lines     chan []byte
	stop      chan struct{} // closed by Close
	done      chan struct{} // closed by the writer when it is done
	closed    atomic.Bool   // set by Close
	closeErr  error

	written, dropped, overSize atomic.Int64
}

// New returns a Recorder passing requests to next and appending
// lines to the file at path, created if needed with mode 0600: the lines
// hold descriptor values, as sensitive as an access log. A file that
// exists keeps its mode, with a warning when others may read it.
func New(next pb.RateLimitServiceServer, path string, opts Options) (*Recorder, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.Sample = cmp.Or(opts.Sample, DefaultSample)
	opts.MaxBytes = cmp.Or(opts.MaxBytes, DefaultMaxBytes)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("capture: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("capture: %w", err)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		opts.Logger.Warn("capture: the file may be read by others than its owner, and it holds the requests' descriptor values (API keys, addresses, user ids)",
			"capture", path, "mode", fmt.Sprintf("%04o", perm))
	}
	c := &Recorder{
		next: next, seed: maphash.MakeSeed(), now: opts.Now,
		threshold: math.MaxUint64,
		lines:     make(chan []byte, captureQueue), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if opts.Sample < 1 {
		c.threshold = uint64(opts.Sample * (1 << 64))
	}
	go c.write(f, fi.Size(), opts.MaxBytes, path, opts.Logger)
	return c, nil
}

// ShouldRateLimit records req when sampled and returns next's answer.
func (c *Recorder) ShouldRateLimit(ctx context.Context, req *pb.RateLimitRequest) (*pb.RateLimitResponse, error) {
	if !c.closed.Load() && c.kept(req) {
		line := encodeLine(c.now(), req)
		select {
		case c.lines <- line:
		default:
			c.dropped.Add(1)
		}
	}
	return c.next.ShouldRateLimit(ctx, req)
}

// kept reports whether req is in the sample.
func (c *Recorder) kept(req *pb.RateLimitRequest) bool {
	if c.threshold == math.MaxUint64 {
		return true
	}
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(req.GetDomain())
	for _, d := range req.GetDescriptors() {
		h.WriteByte(0)
		for _, e := range d.GetEntries() {
			h.WriteString(e.GetKey())
			h.WriteByte(1)
			h.WriteString(e.GetValue())
			h.WriteByte(2)
		}
	}
	return h.Sum64() < c.threshold
}

// write appends lines to f until Close, within max bytes in all.
func (c *Recorder) write(f *os.File, size, limit int64, path string, logger *slog.Logger) {
	defer close(c.done)
	w := bufio.NewWriterSize(f, 64<<10)
	full := false
	flush := func() {
		if err := w.Flush(); err != nil && !full {
			full = true
			logger.Warn("capture: writing failed; capturing stopped", "path", path, "err", err)
		}
	}
	put := func(line []byte) {
		if full || size+int64(len(line)) > limit {
			if !full {
				full = true
				logger.Warn("capture: the file reached its size bound; capturing stopped", "path", path, "max_bytes", limit)
			}
			c.overSize.Add(1)
			return
		}
		w.Write(line) // an error stays in w; flush reports it
		size += int64(len(line))
		c.written.Add(1)
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case line := <-c.lines:
			put(line)
		case <-c.stop:
			for len(c.lines) > 0 {
				put(<-c.lines)
			}
			flush()
			c.closeErr = f.Close()
			return
		case <-tick.C:
			// A line is on disk within a second, for whoever reads the
			// file while the server runs.
			flush()
		}
	}
}

// Close writes the lines in the queue and closes the file, returning its
// error. Requests after Close are passed on and not recorded.
func (c *Recorder) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		close(c.stop)
	}
	<-c.done
	return c.closeErr
}

// Stats returns the counts so far.
func (c *Recorder) Stats() Stats {
	return Stats{Written: c.written.Load(), Dropped: c.dropped.Load(), OverSize: c.overSize.Load()}
}

// line is one line as a Recorder writes it: the body of a /json request,
// in snake_case and without the empty fields, plus its time. floodgate
// replay reads it (and more shapes besides).
type line struct {
	Time        string       `json:"time"`
	Domain      string       `json:"domain"`
	Descriptors []descriptor `json:"descriptors"`
	HitsAddend  uint32       `json:"hits_addend,omitempty"`
}

type descriptor struct {
	Entries    []entry   `json:"entries"`
	Limit      *override `json:"limit,omitempty"`
	HitsAddend *uint64   `json:"hits_addend,omitempty"`
}

type entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

type override struct {
	RequestsPerUnit uint32 `json:"requests_per_unit"`
	Unit            string `json:"unit"`
}

// encodeLine renders one line, newline included.
func encodeLine(t time.Time, req *pb.RateLimitRequest) []byte {
	out := line{Time: t.UTC().Format(TimeLayout), Domain: req.GetDomain(), HitsAddend: req.GetHitsAddend()}
	out.Descriptors = make([]descriptor, len(req.GetDescriptors()))
	for i, d := range req.GetDescriptors() {
		do := &out.Descriptors[i]
		do.Entries = make([]entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			do.Entries[j] = entry{e.GetKey(), e.GetValue()}
		}
		if l := d.GetLimit(); l != nil {
			do.Limit = &override{RequestsPerUnit: l.GetRequestsPerUnit(), Unit: strings.ToUpper(l.GetUnit().String())}
		}
		if h := d.GetHitsAddend(); h != nil {
			do.HitsAddend = &h.Value
		}
	}
	// Strings and numbers always encode (invalid UTF-8 is replaced).
	b, _ := json.Marshal(out)
	return append(b, '\n')
}
