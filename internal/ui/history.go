package ui

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/floodgate/floodgate/internal/rlsmetrics"
)

// Sample is the counters at one time, as the history keeps them: the
// page draws its charts from the rates between consecutive samples.
type Sample struct {
	Time time.Time `json:"time"`
	// OK and Over are Snapshot.Decisions' "ok" and "over_limit".
	OK   float64 `json:"ok"`
	Over float64 `json:"over_limit"`
	// StoreCalls and StoreSeconds are Snapshot.Store's Calls and Seconds.
	StoreCalls   float64 `json:"store_calls"`
	StoreSeconds float64 `json:"store_seconds"`
	// Rules are, per rule path, its Totals' hits, within, over and
	// shadow, in that order; a rule with none yet is left out (read
	// zeros), so that idle rules cost the history nothing.
	Rules map[string][4]float64 `json:"rules"`
}

// history is the last keep samples, oldest first.
type history struct {
	keep    int
	mu      sync.Mutex
	samples []Sample
}

func (h *history) add(s Sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.samples) >= h.keep {
		h.samples = slices.Delete(h.samples, 0, len(h.samples)-h.keep+1)
	}
	h.samples = append(h.samples, s)
}

// all returns a copy of the samples. Their maps are shared: they are never
// written once added.
func (h *history) all() []Sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.samples)
}

func (h *Handler) sample(now time.Time) {
	snap, _ := h.take(now) // a partial gathering still samples what it read
	h.hist.add(sampleOf(snap))
}

// sampleOf is what the history keeps of snap.
func sampleOf(snap *Snapshot) Sample {
	s := Sample{Time: snap.Time, OK: snap.Decisions["ok"], Over: snap.Decisions["over_limit"],
		StoreCalls: snap.Store.Calls, StoreSeconds: snap.Store.Seconds, Rules: map[string][4]float64{}}
	for _, d := range snap.Domains {
		for _, r := range d.Rules {
			t := r.Totals
			if v := [4]float64{t.Hits, t.Within, t.Over, t.Shadow}; v != [4]float64{} {
				s.Rules[r.Path] = v
			}
		}
	}
	return s
}

// Refusal is one rule that refused hits lately.
type Refusal struct {
	Domain string `json:"domain"`
	Path   string `json:"path"`
	// Refused is how many hits the rule refused (over a limit and not in
	// shadow mode) in the last Seconds, out of Hits. Seconds is 0 when
	// no sample is kept yet: the counts are then since the start.
	Refused float64 `json:"refused"`
	Hits    float64 `json:"hits"`
	Seconds float64 `json:"seconds"`
	// Top are the rule's hot counters with hits over a limit, most over
	// first, at most topRefused.
	Top []rlsmetrics.HotCounter `json:"top,omitempty"`
}

// topRefused is how many counters a Refusal names.
const topRefused = 3

// refusing lists the rules of snap that refused hits since base, the
// oldest sample no older than window (the newest when all are), most
// refused first.
func refusing(snap *Snapshot, samples []Sample, window time.Duration) []Refusal {
	var base *Sample
	for i := range samples {
		if snap.Time.Sub(samples[i].Time) <= window || i == len(samples)-1 {
			base = &samples[i]
			break
		}
	}
	var out []Refusal
	for _, d := range snap.Domains {
		for _, r := range d.Rules {
			t := r.Totals
			rf := Refusal{Domain: d.Name, Path: r.Path, Refused: t.Over - t.Shadow, Hits: t.Hits}
			if base != nil {
				b := base.Rules[r.Path]
				rf.Refused -= b[2] - b[3]
				rf.Hits -= b[0]
				rf.Seconds = snap.Time.Sub(base.Time).Seconds()
			}
			if rf.Refused <= 0 {
				continue
			}
			for _, c := range r.Hot {
				if c.Over > 0 {
					rf.Top = append(rf.Top, c)
				}
			}
			slices.SortStableFunc(rf.Top, func(a, b rlsmetrics.HotCounter) int { return cmp.Compare(b.Over, a.Over) })
			rf.Top = rf.Top[:min(len(rf.Top), topRefused)]
			out = append(out, rf)
		}
	}
	slices.SortStableFunc(out, func(a, b Refusal) int {
		return cmp.Or(cmp.Compare(b.Refused, a.Refused), cmp.Compare(a.Path, b.Path))
	})
	return out
}
