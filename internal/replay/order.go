package replay

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/floodgate/floodgate/internal/capture"
)

// defaultReorder is Merge's reorder when it is 0: the requests read ahead
// in each input to put it back in time order. An access log is out of
// order by the requests still running when a later one ended (Envoy logs
// a request's start time when it ends): at a thousand requests a second,
// this covers requests of up to 16 s, for about 10 MB held.
const defaultReorder = 1 << 14

// ErrOutOfOrder is wrapped by the error of Traffic.Next when an input is
// out of time order by more than the reorder bound. Replaying such a
// request at its own time would move the virtual clock back, and at a
// later time would decide it on a window it was not in.
var ErrOutOfOrder = errors.New("out of time order")

// Input is one source of traffic: a file, say, and its Reader.
type Input struct {
	// Name names the input in errors and in the report.
	Name string
	// Reader reads its requests.
	Reader *Reader
}

// InputStats are the counts of one input.
type InputStats struct {
	Name string `json:"name"`
	// Requests is the number of requests read from it.
	Requests int `json:"requests"`
	// Skipped and Truncated are its Reader's counts.
	Skipped   int `json:"skipped"`
	Truncated int `json:"truncated"`
	// Reordered counts its requests older than one before them in the
	// input: put back in time order, since they were within the bound.
	Reordered int `json:"reordered"`
}

// Traffic is the requests of one or several inputs in time order: each
// input put back in order within a bound (requests read ahead in a heap),
// then the inputs merged by time, so that the captures of several replicas
// replay as the one stream the rules saw. Requests of the same time keep
// the order of the inputs, then of their lines.
type Traffic struct {
	inputs []*input
}

// Merge returns the Traffic of inputs, each read ahead by reorder requests
// (0 means 1<<14, defaultReorder; 1 reads no more than the next request, and so
// refuses any disorder).
func Merge(reorder int, inputs ...Input) *Traffic {
	if reorder <= 0 {
		reorder = defaultReorder
	}
	t := &Traffic{}
	for _, in := range inputs {
		t.inputs = append(t.inputs, &input{r: in.Reader, ahead: pendingHeap{bound: reorder}, stats: InputStats{Name: in.Name}})
	}
	return t
}

// Next returns the next request in time order, io.EOF after the last, or
// the first error of an input (its Reader's, or ErrOutOfOrder), prefixed
// with the input's name.
func (t *Traffic) Next() (Request, error) {
	// Each input read ahead by its bound, or to its end: only the one the
	// last request came from is short of it.
	for _, in := range t.inputs {
		if err := in.fill(); err != nil {
			return Request{}, err
		}
	}
	// A linear scan: there are few inputs, one per replica.
	var next *input
	for _, in := range t.inputs {
		if len(in.ahead.items) > 0 && (next == nil || in.ahead.items[0].before(next.ahead.items[0])) {
			next = in
		}
	}
	if next == nil {
		return Request{}, io.EOF
	}
	next.out = heap.Pop(&next.ahead).(pending).Request
	return next.out, nil
}

// Stats returns the counts of each input, in the order given to Merge.
func (t *Traffic) Stats() []InputStats {
	out := make([]InputStats, len(t.inputs))
	for i, in := range t.inputs {
		out[i] = in.stats
		out[i].Skipped, out[i].Truncated = in.r.skipped, in.r.truncated
	}
	return out
}

// input is one input and the requests read ahead of it.
type input struct {
	r      *Reader
	ahead  pendingHeap
	eof    bool
	newest time.Time // the latest time read
	out    Request   // the last request taken out to be replayed; Line 0 before
	stats  InputStats
}

// fill reads until the input holds its bound of requests or is done.
func (in *input) fill() error {
	for !in.eof && len(in.ahead.items) < in.ahead.bound {
		r, err := in.r.Next()
		if errors.Is(err, io.EOF) {
			in.eof = true
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", in.stats.Name, err)
		}
		if in.out.Line > 0 && r.Time.Before(in.out.Time) {
			return fmt.Errorf("%s: line %d (%s) is older than line %d (%s), which had to be replayed first: %w by more than %s",
				in.stats.Name, r.Line, r.Time.UTC().Format(capture.TimeLayout), in.out.Line, in.out.Time.UTC().Format(capture.TimeLayout), ErrOutOfOrder, plural(in.ahead.bound, "request"))
		}
		in.stats.Requests++
		if r.Time.Before(in.newest) {
			in.stats.Reordered++
		} else {
			in.newest = r.Time
		}
		heap.Push(&in.ahead, pending{r, in.stats.Requests})
	}
	return nil
}

// pending is a request read ahead, with its rank in its input.
type pending struct {
	Request
	seq int
}

func (p pending) before(q pending) bool {
	if !p.Time.Equal(q.Time) {
		return p.Time.Before(q.Time)
	}
	return p.seq < q.seq
}

// pendingHeap is a min-heap of requests by time, then rank; bound is the
// number it holds when its input has more.
type pendingHeap struct {
	items []pending
	bound int
}

func (h *pendingHeap) Len() int           { return len(h.items) }
func (h *pendingHeap) Less(i, j int) bool { return h.items[i].before(h.items[j]) }
func (h *pendingHeap) Swap(i, j int)      { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *pendingHeap) Push(x any)         { h.items = append(h.items, x.(pending)) }
func (h *pendingHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items[len(h.items)-1] = pending{}
	h.items = h.items[:len(h.items)-1]
	return last
}
