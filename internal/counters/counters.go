// Package counters lets an operator look at the counters of a descriptor
// and reset them over HTTP: GET /counters lists every limit that applies to
// a domain and descriptor with its used, remaining and reset, and POST
// /counters/reset deletes those counters in the store, so that a blocked
// client is let through again at once. A counter is read with a hit of
// cost 0, which every store answers without consuming. The binary mounts
// the handler on the debug listener only, since a reset lifts a limit;
// Command, `floodgate counters`, is its client.
package counters

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Resetter deletes one counter of the store: after Reset, the next hit on
// key finds no state (a fixed window empty, a bucket full). spec is the
// limit the counter is kept for, which some stores need to find its keys.
type Resetter interface {
	Reset(ctx context.Context, key string, spec limit.Spec) error
}

// Options configure a Handler. Rules, Limiter and Resetter are required.
type Options struct {
	Rules    func() *rules.Set // the rules in force, as rules.Watcher.Current
	Limiter  limit.Limiter     // read with hits of cost 0
	Resetter Resetter          // the same store as Limiter
	// Logger gets a line for every reset, naming who asked; nil discards
	// them.
	Logger *slog.Logger
	// Registerer, when not nil, gets floodgate_counter_resets_total.
	Registerer prometheus.Registerer
}

// Handler serves GET /counters and POST /counters/reset. It is safe for
// concurrent use.
type Handler struct {
	opts   Options
	resets *prometheus.CounterVec
}

// New returns the endpoints' Handler, with its metric registered.
func New(opts Options) (*Handler, error) {
	if opts.Rules == nil || opts.Limiter == nil || opts.Resetter == nil {
		return nil, &option.Error{Options: "counters.Options", Field: "Rules", Also: []string{"Limiter", "Resetter"}, Want: "are required"}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{opts: opts, resets: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "floodgate", Name: "counter_resets_total",
		Help: "Counters reset by an operator (POST /counters/reset on the debug listener, floodgate counters reset), one per counter, by domain and rule.",
	}, []string{"domain", "rule"})}
	if opts.Registerer != nil {
		if err := opts.Registerer.Register(h.resets); err != nil {
			return nil, fmt.Errorf("counters: metrics: %w", err)
		}
	}
	return h, nil
}

// Answer is the JSON body of /counters and /counters/reset: what applies
// to the descriptor, and the state of its counters.
type Answer struct {
	Domain     string  `json:"domain"`
	Descriptor []Entry `json:"descriptor"` // in order
	// Rule is the path of the rule the descriptor matches ("" for none),
	// and Reason says in words what applies, or why nothing does.
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// Reset reports that this request reset the counters.
	Reset bool `json:"reset"`
	// Limits are the rule's limits, in its order.
	Limits []Counter `json:"limits"`
}

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Counter is one limit that applies to the descriptor and the state of its
// counter, as a hit of cost 0 sees it at the instant of the request. For
// example, 10 per minute in a fixed window that has counted 3 hits this
// minute, with 42 s left: Capacity 10, Used 3, Remaining 7, ResetSeconds 42.
type Counter struct {
	// Rule is the rule's path ("demo.api_key"), Name the limit's name (may
	// be empty) and Limit the limit in words ("10 per minute
	// (fixed_window)").
	Rule      string `json:"rule"`
	Name      string `json:"name,omitempty"`
	Limit     string `json:"limit"`
	Algorithm string `json:"algorithm"` // the rule file's name for it
	// RequestsPerUnit per Unit (times UnitMultiplier) is the limit;
	// WindowSeconds the window's length, or a bucket's refill period.
	RequestsPerUnit uint32  `json:"requests_per_unit"`
	Unit            string  `json:"unit"`
	UnitMultiplier  uint32  `json:"unit_multiplier"`
	WindowSeconds   float64 `json:"window_seconds"`
	Capacity        int64   `json:"capacity"` // limit.Spec.Capacity
	// Mode is "enforce", "shadow" (counted, never denies) or "quota".
	Mode string `json:"mode"`
	// Counted is false for an unlimited limit and for one that another
	// limit of the rule replaces: Note says why, and the state is zero.
	Counted bool   `json:"counted"`
	Note    string `json:"note,omitempty"`
	// Used is Capacity − Remaining (docs/operations.md says what it counts
	// for each algorithm), plus Over, the debt of usage charged after the
	// fact (limit.Decision.Debt). ResetSeconds is Decision.ResetAfter.
	Used         int64   `json:"used"`
	Remaining    int64   `json:"remaining"`
	Over         int64   `json:"over,omitempty"`
	ResetSeconds float64 `json:"reset_seconds"`
	// UsedBefore is Used just before a reset, when it could be read.
	UsedBefore *int64 `json:"used_before,omitempty"`
	// Key is the counter's key (limit.Hit.Key), without the store's
	// prefix; "" when not Counted.
	Key string `json:"counter"`
}
