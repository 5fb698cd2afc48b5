package ui

import (
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate/floodgate/internal/rlsmetrics"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Snapshot is the page's JSON document: cumulative figures, from which the
// page computes rates between two snapshots, read from the /metrics series
// each field's comment names.
type Snapshot struct {
	Time time.Time `json:"time"`
	// IntervalMillis is how often the page should poll.
	IntervalMillis int64 `json:"interval_ms"`
	// HistoryStepMillis is how far apart History's samples are, and
	// HistoryLength how many are kept at most.
	HistoryStepMillis int64 `json:"history_step_ms"`
	HistoryLength     int   `json:"history_length"`
	// Values says whose request values the hot counters show:
	// "fingerprints" (none), "opted_in" or "all" (rlsmetrics.HotValues).
	Values string     `json:"values"`
	Rules  RuleStatus `json:"rules"`
	Store  Store      `json:"store"`
	// Decisions counts the answers by code: floodgate_decision_duration_seconds_count
	// by its code label ("ok", "over_limit", gRPC codes).
	Decisions map[string]float64 `json:"decisions"`
	// Domains are the rules in force, per domain, sorted.
	Domains []Domain `json:"domains"`
	// Refusing are the rules that refused hits in the last
	// refusingSteps history steps, most refused first.
	Refusing []Refusal `json:"refusing"`
	// History are the samples Run keeps, oldest first; only with
	// ?history=1.
	History []Sample `json:"history,omitempty"`
}

// RuleStatus is the state of the rule loads, as /rlconfig tells it.
type RuleStatus struct {
	Version  uint64    `json:"version"`
	LoadedAt time.Time `json:"loaded_at"`
	Reloads  uint64    `json:"reloads"`
	Failures uint64    `json:"failures"`
	// Origin and Source are /rlconfig's origin: and source: lines; empty
	// for rule files.
	Origin string `json:"origin,omitempty"`
	Source string `json:"source,omitempty"`
	// LastErrorAt and Errors describe the last refused reload: one
	// "file:line:col: field: message" per problem. Empty when the latest
	// attempt was good.
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	Errors      []string   `json:"errors,omitempty"`
	// Warnings are the loaded rules' warnings, "file:line:col: ...".
	Warnings []string `json:"warnings,omitempty"`
}

// Store is the limit store's health and the latency of its calls.
type Store struct {
	Name    string `json:"name"`
	Healthy bool   `json:"healthy"`
	Reached bool   `json:"reached"`
	Detail  string `json:"detail,omitempty"`
	// Calls, Seconds and Buckets are floodgate_store_duration_seconds'
	// count, sum and cumulative buckets ([upper bound, count]); Errors is
	// floodgate_store_errors_total.
	Calls   float64      `json:"calls"`
	Seconds float64      `json:"seconds"`
	Buckets [][2]float64 `json:"buckets"`
	Errors  float64      `json:"errors"`
}

// Domain is one domain's rules, in tree order.
type Domain struct {
	Name  string `json:"name"`
	Rules []Rule `json:"rules"`
}

// Rule is one rule of the tree, its limits and its figures.
type Rule struct {
	// Path is the rule's path, "demo.api_key.path_/x"; Name is what it
	// adds to its parent's ("path_/x"); Depth is its depth in the tree
	// (0 under the domain).
	Path  string `json:"path"`
	Name  string `json:"name"`
	Depth int    `json:"depth"`
	// Pos is where the rule is written, "file:line:col".
	Pos    string   `json:"pos"`
	Flags  []string `json:"flags,omitempty"`
	Limits []Limit  `json:"limits,omitempty"`
	// Totals are the rule's hit counters, summed over its value series
	// when it names them by values.
	Totals Totals `json:"totals"`
	// Hot are its most hit counters; HotSkipped counts the hits they did
	// not see (rlsmetrics.RuleHot.Skipped).
	Hot        []rlsmetrics.HotCounter `json:"hot,omitempty"`
	HotSkipped uint64                  `json:"hot_skipped,omitempty"`
}

// Limit is one limit of a rule.
type Limit struct {
	// Text says it in words: "10 per second (token_bucket, burst 20)".
	Text      string `json:"text"`
	Algorithm string `json:"algorithm,omitempty"`
	// Limit is requests_per_unit; Window the window in seconds.
	Limit   int64   `json:"limit"`
	Window  float64 `json:"window_seconds"`
	Unlimit bool    `json:"unlimited,omitempty"`
}

// Totals are one rule's floodgate_*_total hit counters.
type Totals struct {
	Hits       float64 `json:"hits"`        // floodgate_hits_total
	Within     float64 `json:"within"`      // floodgate_within_limit_total
	Over       float64 `json:"over"`        // floodgate_over_limit_total, shadow included
	Shadow     float64 `json:"shadow"`      // floodgate_shadow_mode_total
	Near       float64 `json:"near"`        // floodgate_near_limit_total
	NotCharged float64 `json:"not_charged"` // floodgate_not_charged_total
	// Charged is the usage reported after the fact and charged (tokens,
	// bytes: floodgate_usage_charged_total), within the limit or past it.
	Charged float64 `json:"charged"`
}

// hitFamilies are the hit counters' Totals fields, by name.
var hitFamilies = map[string]func(*Totals) *float64{
	"floodgate_hits_total":          func(t *Totals) *float64 { return &t.Hits },
	"floodgate_within_limit_total":  func(t *Totals) *float64 { return &t.Within },
	"floodgate_over_limit_total":    func(t *Totals) *float64 { return &t.Over },
	"floodgate_shadow_mode_total":   func(t *Totals) *float64 { return &t.Shadow },
	"floodgate_near_limit_total":    func(t *Totals) *float64 { return &t.Near },
	"floodgate_not_charged_total":   func(t *Totals) *float64 { return &t.NotCharged },
	"floodgate_usage_charged_total": func(t *Totals) *float64 { return &t.Charged },
}

func (h *Handler) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := h.Snapshot()
	if err != nil {
		http.Error(w, "ui: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if r.URL.Query().Get("history") == "1" {
		snap.History = h.hist.all()
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(snap)
}

// Snapshot takes the figures the page shows, History aside. A partial
// gathering error still returns what was gathered, with the error.
func (h *Handler) Snapshot() (*Snapshot, error) {
	snap, err := h.take(time.Now())
	// From every tracked hot counter, before the page's share is cut.
	snap.Refusing = refusing(snap, h.hist.all(), refusingSteps*h.opts.HistoryStep)
	for _, d := range snap.Domains {
		for i := range d.Rules {
			d.Rules[i].Hot = d.Rules[i].Hot[:min(len(d.Rules[i].Hot), hotCounters)]
		}
	}
	return snap, err
}

// take reads the figures at now, with every tracked hot counter.
func (h *Handler) take(now time.Time) (*Snapshot, error) {
	mfs, gatherErr := h.opts.Gatherer.Gather()
	snap := &Snapshot{Time: now, IntervalMillis: h.opts.Interval.Milliseconds(), Values: h.opts.Values.String(),
		HistoryStepMillis: h.opts.HistoryStep.Milliseconds(), HistoryLength: h.opts.HistoryLength,
		Decisions: map[string]float64{}}
	set := h.opts.Rules()
	snap.Rules = ruleStatus(h.opts.RuleStatus(), set)
	if h.opts.Store != nil {
		st := h.opts.Store()
		snap.Store = Store{Name: st.Name, Healthy: st.Healthy, Reached: st.Reached, Detail: st.Detail}
	}
	totals := snap.read(mfs)
	snap.Domains = tree(set.Rules(), h.figures(totals))
	return snap, gatherErr
}

// read fills in the decisions and the store's figures from mfs, and
// returns the hit counters by domain and rule label.
func (snap *Snapshot) read(mfs []*dto.MetricFamily) map[[2]string]*Totals {
	totals := map[[2]string]*Totals{}
	for _, mf := range mfs {
		name := mf.GetName()
		if field, ok := hitFamilies[name]; ok {
			for _, m := range mf.GetMetric() {
				k := [2]string{label(m, "domain"), label(m, "rule")}
				t := totals[k]
				if t == nil {
					t = &Totals{}
					totals[k] = t
				}
				*field(t) += m.GetCounter().GetValue()
			}
			continue
		}
		switch name {
		case "floodgate_decision_duration_seconds":
			for _, m := range mf.GetMetric() {
				snap.Decisions[label(m, "code")] += float64(m.GetHistogram().GetSampleCount())
			}
		case "floodgate_store_duration_seconds":
			for _, m := range mf.GetMetric() {
				hg := m.GetHistogram()
				snap.Store.Calls += float64(hg.GetSampleCount())
				snap.Store.Seconds += hg.GetSampleSum()
				for _, b := range hg.GetBucket() {
					snap.Store.Buckets = append(snap.Store.Buckets, [2]float64{b.GetUpperBound(), float64(b.GetCumulativeCount())})
				}
			}
		case "floodgate_store_errors_total":
			for _, m := range mf.GetMetric() {
				snap.Store.Errors += m.GetCounter().GetValue()
			}
		}
	}
	return totals
}

// figures returns a rule's totals, from the hit counters by domain and
// rule label, and its hot counters.
func (h *Handler) figures(totals map[[2]string]*Totals) func(*rules.Rule) (Totals, rlsmetrics.RuleHot) {
	var hot map[[2]string]rlsmetrics.RuleHot
	if h.opts.Metrics != nil {
		hot = map[[2]string]rlsmetrics.RuleHot{}
		for _, rh := range h.opts.Metrics.Hot(rlsmetrics.HotCapacity, h.opts.Values) {
			hot[[2]string{rh.Domain, rh.Rule}] = rh
		}
	}
	return func(r *rules.Rule) (Totals, rlsmetrics.RuleHot) {
		k := [2]string{r.Domain, r.Path}
		var t Totals
		// A rule's own series, and those of its values: a reload can
		// turn detailed_metric on or off, and both stay in /metrics.
		for _, l := range append([]string{r.Path}, hot[k].ValueLabels...) {
			if s := totals[[2]string{r.Domain, l}]; s != nil {
				for _, f := range hitFamilies {
					*f(&t) += *f(s)
				}
			}
		}
		return t, hot[k]
	}
}

// label returns the value of m's label name, or "".
func label(m *dto.Metric, name string) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// ruleStatus is the loads' state, a refused reload's problems one a line.
func ruleStatus(st rules.Status, set *rules.Set) RuleStatus {
	rs := RuleStatus{Version: st.Version, LoadedAt: st.LoadedAt, Reloads: st.Reloads, Failures: st.Failures,
		Origin: st.Origin, Source: st.Source}
	if st.LastError != nil {
		at := st.LastErrorAt
		rs.LastErrorAt = &at
		if le, ok := errors.AsType[*rules.LoadError](st.LastError); ok {
			for _, fe := range le.Errors {
				rs.Errors = append(rs.Errors, fe.Error())
			}
		} else {
			rs.Errors = strings.Split(st.LastError.Error(), "\n")
		}
	}
	for _, w := range set.Warnings() {
		rs.Warnings = append(rs.Warnings, w.Error())
	}
	return rs
}

// tree sorts the rules by domain and path so that each rule follows its
// parent (the longest other rule path that is a prefix of its own at a
// "."), and gives each its depth and name under that parent.
func tree(rs []*rules.Rule, figures func(*rules.Rule) (Totals, rlsmetrics.RuleHot)) []Domain {
	// "." sorts first so that "a.b" comes right after "a", before "a-c".
	sortKey := func(p string) string { return strings.ReplaceAll(p, ".", "\x00") }
	slices.SortFunc(rs, func(a, b *rules.Rule) int {
		return cmp.Or(cmp.Compare(a.Domain, b.Domain), cmp.Compare(sortKey(a.Path), sortKey(b.Path)))
	})
	var out []Domain
	var stack []string
	for _, r := range rs {
		if len(out) == 0 || out[len(out)-1].Name != r.Domain {
			out = append(out, Domain{Name: r.Domain})
			stack = append(stack[:0], r.Domain)
		}
		for len(stack) > 1 && !strings.HasPrefix(r.Path, stack[len(stack)-1]+".") {
			stack = stack[:len(stack)-1]
		}
		parent := stack[len(stack)-1]
		rule := Rule{Path: r.Path, Name: strings.TrimPrefix(r.Path, parent+"."), Depth: len(stack) - 1, Pos: r.Pos.String(),
			Flags: r.Flags()}
		for _, l := range r.Limits {
			lim := Limit{Text: l.Describe(), Unlimit: l.Unlimited}
			if !l.Unlimited {
				lim.Algorithm = l.Spec.Algorithm.String()
				lim.Limit = l.Spec.Limit
				lim.Window = math.Round(l.Spec.Window.Seconds()*1e6) / 1e6
			}
			rule.Limits = append(rule.Limits, lim)
		}
		var hot rlsmetrics.RuleHot
		rule.Totals, hot = figures(r)
		rule.Hot, rule.HotSkipped = hot.Hot, hot.Skipped
		d := &out[len(out)-1]
		d.Rules = append(d.Rules, rule)
		stack = append(stack, r.Path)
	}
	return out
}
