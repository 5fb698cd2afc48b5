package rlsmetrics

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"maps"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/floodgate/floodgate/pkg/rules"
)

// HotCapacity is how many counters each rule's sketch tracks: a new one
// replaces the least hit (Metwally et al.'s space-saving), so a counter
// with more than 1/HotCapacity of the rule's hits is always tracked.
const HotCapacity = 32

// HotKeyBytes bounds the values a hot counter keeps; a longer label is
// cut at a character boundary and ends with "…".
const HotKeyBytes = 256

// HotValues says whose request values Metrics.Hot shows. The zero value
// shows none.
type HotValues uint8

const (
	// HotFingerprints shows no value: every key is the rule's path and a
	// keyed fingerprint.
	HotFingerprints HotValues = iota
	// HotOptedIn shows the values of rules with detailed_metric or
	// value_to_metric, which /metrics shows anyway.
	HotOptedIn
	// HotAll shows the values of every rule, kept with
	// Options.KeepHotValues.
	HotAll
)

var hotValuesNames = [...]string{"fingerprints", "opted_in", "all"}

// String names v as the page's snapshot does.
func (v HotValues) String() string {
	if int(v) < len(hotValuesNames) {
		return hotValuesNames[v]
	}
	return fmt.Sprintf("HotValues(%d)", uint8(v))
}

// HotCounter is one of a rule's most hit counters.
type HotCounter struct {
	// Key is the values in the detailed_metric form
	// "domain.key_value.key_value" when shown, else the rule's path and a
	// fingerprint keyed per process, "demo.remote_address #3fa9c2e1".
	Key string `json:"key"`
	// Hidden reports whether Key hides the values.
	Hidden bool `json:"hidden"`
	// Hits bounds from above the hits since the counter is tracked, and
	// Hits-Error from below.
	Hits  uint64 `json:"hits"`
	Error uint64 `json:"error"`
	// Over is how many of those hits were over a limit.
	Over uint64 `json:"over"`
}

// RuleHot is what Metrics knows of one rule label's counters.
type RuleHot struct {
	// Domain and Rule are the labels of the rule's series.
	Domain, Rule string
	// ValueLabels are the labels the rule counts under when named by
	// values, "<rule>._other_" included; their sum is the rule's.
	ValueLabels []string
	// Hot are the most hit counters, most hit first.
	Hot []HotCounter
	// Skipped counts the hits the sketch missed while another request
	// held it: the request path never waits for it.
	Skipped uint64
}

// Hot returns, for every rule label that counted hits, its value labels
// and n most hit counters, showing the values that values lets through,
// sorted by domain and rule.
func (m *Metrics) Hot(n int, values HotValues) []RuleHot {
	m.mu.Lock()
	all := slices.Collect(maps.Values(m.byLabel))
	m.mu.Unlock()
	out := make([]RuleHot, 0, len(all))
	for _, s := range all {
		rh := RuleHot{Domain: s.domain, Rule: s.path, Hot: s.hot.top(n, s.path, values), Skipped: s.hot.skipped.Load()}
		s.mu.Lock()
		for l, v := range s.values {
			if v.prom[hitsTotal] != nil {
				rh.ValueLabels = append(rh.ValueLabels, l)
			}
		}
		if s.other != nil && s.other.prom[hitsTotal] != nil {
			rh.ValueLabels = append(rh.ValueLabels, s.path+otherValues)
		}
		s.mu.Unlock()
		slices.Sort(rh.ValueLabels)
		out = append(out, rh)
	}
	slices.SortFunc(out, func(a, b RuleHot) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(a.Rule, b.Rule))
	})
	return out
}

// hotSeed keys the fingerprints of hot counters, per process.
var hotSeed = maphash.MakeSeed()

// hotSketch is the space-saving sketch of one rule's counters, known by a
// keyed hash of their entries. The zero value is ready.
type hotSketch struct {
	skipped atomic.Uint64 // RuleHot.Skipped

	mu       sync.Mutex
	labelled bool // some slot holds a label
	optedIn  bool // some slot is optedIn
	// hashes[i] is slots[i].hash, apart so that a search scans 256
	// contiguous bytes.
	hashes []uint64
	slots  []hotSlot
}

type hotSlot struct {
	hash               uint64
	label              string // detailed label, cut at HotKeyBytes; "" unless kept
	optedIn            bool   // label was kept because the rule names metrics by values
	hits, errors, over uint64
}

// add counts n hits of the counter of entries; it keeps label when keep
// is set and the counter is new. optedIn says the rule names metrics by
// values.
func (h *hotSketch) add(entries []rules.Entry, keep, optedIn bool, label []byte, n uint64, over bool) {
	if !h.mu.TryLock() {
		h.skipped.Add(n)
		return
	}
	defer h.mu.Unlock()
	if (!keep && h.labelled) || (!optedIn && h.optedIn) {
		// A reload turned the rule's values off: forget them.
		for i := range h.slots {
			h.slots[i].optedIn = false
			if !keep {
				h.slots[i].label = ""
			}
		}
		h.labelled = h.labelled && keep
		h.optedIn = false
	}
	sum := uint64(len(entries))
	for _, e := range entries {
		// Parts mixed in order, so that ("ab", "c") and ("a", "bc") differ.
		sum = (bits.RotateLeft64(sum, 23) ^ maphash.String(hotSeed, e.Key)) * 0x9e3779b97f4a7c15
		sum = (bits.RotateLeft64(sum, 23) ^ maphash.String(hotSeed, e.Value)) * 0x9e3779b97f4a7c15
	}
	i := slices.Index(h.hashes, sum)
	if i < 0 {
		if len(h.slots) < HotCapacity {
			h.slots = append(h.slots, hotSlot{})
			h.hashes = append(h.hashes, 0)
			i = len(h.slots) - 1
		} else {
			// The newcomer inherits the least hit's count as its error.
			i = 0
			for j := range h.slots {
				if h.slots[j].hits < h.slots[i].hits {
					i = j
				}
			}
			min := h.slots[i].hits
			h.slots[i] = hotSlot{hits: min, errors: min}
		}
		h.slots[i].hash, h.hashes[i] = sum, sum
		if keep {
			h.slots[i].label = cutLabel(label)
			h.slots[i].optedIn = optedIn
			h.labelled = true
			h.optedIn = h.optedIn || optedIn
		}
	}
	s := &h.slots[i]
	s.hits += n
	if over {
		s.over += n
	}
}

// cutLabel cuts label to HotKeyBytes (see there).
func cutLabel(label []byte) string {
	if len(label) <= HotKeyBytes {
		return string(label)
	}
	const ellipsis = "…"
	cut := HotKeyBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(label[cut]) {
		cut--
	}
	return string(label[:cut]) + ellipsis
}

// top returns the n most hit counters, named as HotCounter.Key says.
func (h *hotSketch) top(n int, path string, values HotValues) []HotCounter {
	h.mu.Lock()
	slots := slices.Clone(h.slots)
	h.mu.Unlock()
	slices.SortFunc(slots, func(a, b hotSlot) int {
		return cmp.Or(cmp.Compare(b.hits, a.hits), cmp.Compare(a.hash, b.hash))
	})
	n = min(max(n, 0), len(slots))
	out := make([]HotCounter, n)
	for i, s := range slots[:n] {
		c := HotCounter{Key: s.label, Hits: s.hits, Error: s.errors, Over: s.over}
		shown := values == HotAll || (values == HotOptedIn && s.optedIn)
		if s.label == "" || !shown {
			c.Key = fmt.Sprintf("%s #%08x", path, s.hash>>32)
			c.Hidden = true
		}
		out[i] = c
	}
	return out
}
