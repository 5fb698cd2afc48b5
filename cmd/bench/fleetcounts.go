package main

// What the simulated fleet admitted: per bucket and per window of the
// limit (windows start at multiples of their length since the epoch, as
// floodgate's fixed windows do on Redis's clock, which is this machine's),
// per second for the tracked bucket (bucket 0) by group of Envoys, and
// per second the requests the failure policy answered.

import (
	"slices"
	"sync"
	"time"
)

// fleetCounts gathers the fleet's answers; safe for concurrent use.
type fleetCounts struct {
	buckets int
	window  time.Duration

	mu      sync.Mutex
	windows map[int64]*windowCounts
	// tracked holds, per unix second, bucket 0's admitted and denied
	// requests by group (0: A, 1: B).
	tracked map[int64]*[2][2]int64
	// failed holds, per unix second, the requests answered by the failure
	// policy (RLS: a call that failed, which Envoy lets through), and
	// failedBuckets per bucket over the whole run.
	failed        map[int64]int64
	failedBuckets []int64
	// failures holds every failure-policy answer: when, and its bucket.
	failures []failure
}

// failure is one failure-policy answer.
type failure struct {
	at     int64 // unix ns
	bucket int
}

// windowCounts is one window's admitted and denied requests per bucket.
type windowCounts struct{ admitted, denied []int64 }

func newFleetCounts(buckets int, window time.Duration) *fleetCounts {
	return &fleetCounts{buckets: buckets, window: window, windows: map[int64]*windowCounts{},
		tracked: map[int64]*[2][2]int64{}, failed: map[int64]int64{}, failedBuckets: make([]int64, buckets)}
}

// windowOf is the number of the window holding t.
func (c *fleetCounts) windowOf(t time.Time) int64 { return t.UnixNano() / int64(c.window) }

// windowLocked returns window w's counts, created empty; c.mu is held.
func (c *fleetCounts) windowLocked(w int64) *windowCounts {
	wc := c.windows[w]
	if wc == nil {
		wc = &windowCounts{admitted: make([]int64, c.buckets), denied: make([]int64, c.buckets)}
		c.windows[w] = wc
	}
	return wc
}

// addWindow adds an Envoy's counts of window w, per bucket.
func (c *fleetCounts) addWindow(w int64, admitted, denied []int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wc := c.windowLocked(w)
	for b := range admitted {
		wc.admitted[b] += int64(admitted[b])
		wc.denied[b] += int64(denied[b])
	}
}

// add counts one answer for bucket b in window w.
func (c *fleetCounts) add(w int64, b int, admitted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	wc := c.windowLocked(w)
	if admitted {
		wc.admitted[b]++
	} else {
		wc.denied[b]++
	}
}

// addTracked adds the tracked bucket's admitted and denied requests of
// group g in the second holding t.
func (c *fleetCounts) addTracked(t time.Time, g int, admitted, denied int64) {
	if admitted == 0 && denied == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.tracked[t.Unix()]
	if s == nil {
		s = &[2][2]int64{}
		c.tracked[t.Unix()] = s
	}
	s[g][0] += admitted
	s[g][1] += denied
}

// addFailed counts a request of bucket b answered by the failure policy
// at t.
func (c *fleetCounts) addFailed(t time.Time, b int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed[t.Unix()]++
	c.failedBuckets[b]++
	c.failures = append(c.failures, failure{t.UnixNano(), b})
}

// failuresAfter returns the failure-policy answers at t or later of the
// buckets for which in is true: how many, how long after t the last came
// (ms), and how many came in each second after t.
func (c *fleetCounts) failuresAfter(t time.Time, in []bool) (n int64, lastMs float64, perSecond []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.failures {
		if f.at < t.UnixNano() || !in[f.bucket] {
			continue
		}
		n++
		lastMs = max(lastMs, float64(f.at-t.UnixNano())/1e6)
		s := int((f.at - t.UnixNano()) / int64(time.Second))
		for len(perSecond) <= s {
			perSecond = append(perSecond, 0)
		}
		perSecond[s]++
	}
	return n, lastMs, perSecond
}

// window returns a copy of window w's counts, nil when nothing was
// counted in it.
func (c *fleetCounts) windowCopy(w int64) *windowCounts {
	c.mu.Lock()
	defer c.mu.Unlock()
	wc := c.windows[w]
	if wc == nil {
		return nil
	}
	return &windowCounts{admitted: slices.Clone(wc.admitted), denied: slices.Clone(wc.denied)}
}

// trackedSeconds returns the tracked bucket's counts for the seconds from
// first to last.
func (c *fleetCounts) trackedSeconds(first, last int64) [][2][2]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([][2][2]int64, 0, max(last-first+1, 0))
	for s := first; s <= last; s++ {
		var v [2][2]int64
		if p := c.tracked[s]; p != nil {
			v = *p
		}
		out = append(out, v)
	}
	return out
}

// failedSeconds returns the unix seconds with failure-policy answers,
// ascending, and how many each had.
func (c *fleetCounts) failedSeconds() (secs []int64, n []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s := range c.failed {
		secs = append(secs, s)
	}
	slices.Sort(secs)
	for _, s := range secs {
		n = append(n, c.failed[s])
	}
	return secs, n
}
