package counters

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// view is one descriptor as the rules resolve it: the answer being built
// and a hit of cost 0 for each counted limit.
type view struct {
	answer Answer
	hits   []limit.Hit
	at     []int // at[i] is the index in answer.Limits of hits[i]'s limit
}

// lookup resolves domain and entries against the rules in force, as a
// request of that one descriptor would be, without a limit override.
func (h *Handler) lookup(domain string, entries []rules.Entry) (*view, error) {
	v := &view{answer: Answer{Domain: domain, Descriptor: make([]Entry, len(entries)), Limits: []Counter{}}}
	for i, e := range entries {
		v.answer.Descriptor[i] = Entry{Key: e.Key, Value: e.Value}
	}
	set := h.opts.Rules()
	if set == nil {
		v.answer.Reason = "no rules are loaded yet, so nothing is limited"
		return v, nil
	}
	var res rules.Resolution
	if err := set.Resolve(&res, domain, []rules.Descriptor{{Entries: entries}}); err != nil {
		return nil, err
	}
	_, v.answer.Reason = set.Explain(domain, entries)
	rd := &res.Descriptors[0]
	if rd.Rule == nil {
		return v, nil
	}
	v.answer.Rule = rd.Rule.Path
	for i := range rd.Limits {
		rl := &rd.Limits[i]
		c := counterOf(rd, rl)
		if rl.Counted() {
			// Advisory: a look never blocks, whatever the rule's mode.
			v.hits = append(v.hits, limit.Hit{Key: rl.Key, Spec: rl.Limit.Spec, Mode: limit.Advisory})
			v.at = append(v.at, len(v.answer.Limits))
		}
		v.answer.Limits = append(v.answer.Limits, c)
	}
	return v, nil
}

// counterOf describes rl, one of rd's limits, before its state is read.
func counterOf(rd *rules.Resolved, rl *rules.ResolvedLimit) Counter {
	l := rl.Limit
	c := Counter{Rule: rd.Rule.Path, Name: l.Name, Limit: l.Describe(), Mode: modeName(rd.Mode), Counted: rl.Counted(), Key: rl.Key}
	switch {
	case l.Unlimited:
		c.Note = "unlimited: never counted"
		return c
	case rl.Replaced:
		c.Note = "replaced by another limit of the rule (replaces): not counted"
	}
	c.Algorithm = l.Spec.Algorithm.String()
	c.RequestsPerUnit, c.Unit, c.UnitMultiplier = l.RequestsPerUnit, l.Unit.String(), l.UnitMultiplier
	c.WindowSeconds = l.Spec.Window.Seconds()
	c.Capacity = l.Spec.Capacity()
	return c
}

// peek reads the state of v's counters into its answer.
func (h *Handler) peek(ctx context.Context, v *view) error {
	if len(v.hits) == 0 {
		return nil
	}
	ds := make([]limit.Decision, len(v.hits))
	if _, err := h.opts.Limiter.Evaluate(ctx, v.hits, ds); err != nil {
		return fmt.Errorf("reading the counters: %w", err)
	}
	for i, d := range ds {
		c := &v.answer.Limits[v.at[i]]
		c.Remaining, c.Over = d.Remaining, d.Debt
		c.Used = max(0, c.Capacity-d.Remaining) + d.Debt
		c.ResetSeconds = float64(d.ResetAfter.Milliseconds()) / 1000 // to the millisecond
	}
	return nil
}

// reset answers ResetPath: it reads the counters (for the log and
// UsedBefore), deletes each, and answers with their state after.
func (h *Handler) reset(w http.ResponseWriter, r *http.Request) {
	v, ok := h.requested(w, r)
	if !ok {
		return
	}
	if len(v.hits) == 0 {
		writeJSON(w, http.StatusOK, v.answer) // nothing to reset: Reason says why
		return
	}
	ctx := r.Context()
	// A store that cannot be read may still take the reset the operator
	// needs, so this failure is only logged.
	peekErr := h.peek(ctx, v)
	var before []int64
	if peekErr == nil {
		for _, i := range v.at {
			before = append(before, v.answer.Limits[i].Used)
		}
	}
	done, err := h.resetAll(ctx, v)
	h.logReset(r, v, before, done, errors.Join(err, peekErr))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	v.answer.Reset = true
	if err := h.peek(ctx, v); err != nil {
		writeError(w, http.StatusServiceUnavailable, "the counters were reset, but "+err.Error())
		return
	}
	for j, i := range v.at {
		if before != nil {
			v.answer.Limits[i].UsedBefore = &before[j]
		}
	}
	writeJSON(w, http.StatusOK, v.answer)
}

// resetAll deletes v's counters, counting each in the metric, and returns
// how many it deleted before an error.
func (h *Handler) resetAll(ctx context.Context, v *view) (int, error) {
	for i, hit := range v.hits {
		if err := h.opts.Resetter.Reset(ctx, hit.Key, hit.Spec); err != nil {
			return i, fmt.Errorf("resetting counter %d of %d (%s): %w", i+1, len(v.hits), v.answer.Limits[v.at[i]].Limit, err)
		}
		h.resets.WithLabelValues(v.answer.Domain, v.answer.Rule).Inc()
	}
	return len(v.hits), nil
}

// logReset logs a reset at warning level, since it lifts a limit on
// purpose, naming who asked; a failure at error level.
func (h *Handler) logReset(r *http.Request, v *view, before []int64, done int, err error) {
	attrs := []any{"peer", r.RemoteAddr, "user_agent", r.UserAgent(),
		"domain", v.answer.Domain, "descriptor", descriptorText(v.answer.Descriptor, ","), "rule", v.answer.Rule,
		"counters", done}
	if before != nil {
		attrs = append(attrs, "used_before", before)
	}
	if done < len(v.hits) {
		h.opts.Logger.Error("counters reset failed", append(attrs, "of", len(v.hits), "err", err)...)
		return
	}
	if err != nil {
		attrs = append(attrs, "read_err", err)
	}
	h.opts.Logger.Warn("counters reset", attrs...)
}

// descriptorText writes entries as "k=v", joined by sep.
func descriptorText(entries []Entry, sep string) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.Key + "=" + e.Value
	}
	return strings.Join(parts, sep)
}
