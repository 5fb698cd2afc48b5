// Package counters lets an operator look at the counters of a descriptor
// and reset them, over HTTP: GET /counters lists every limit that applies
// to a domain and descriptor with its used, remaining and reset, and POST
// /counters/reset deletes those counters in the store, so that the client
// they belong to is let through again at once. It is what an on-call
// needs to unblock a customer without finding the key in Redis by hand.
//
// It owns the endpoints (their query, their JSON answer, Answer), the
// reading of a counter without changing it (a hit of cost 0, which every
// store answers for every algorithm without consuming), the log line of
// each reset naming who asked, and the metric that counts resets. It asks
// pkg/rules which limits apply and their counter keys (rules.Set.Resolve),
// a limit.Limiter for the state, and a Resetter to delete; it imports
// nothing of the listeners. Package server mounts the handler on the debug
// listener only (loopback by default) and refuses /counters on the public
// HTTP listener: a reset lifts a limit, which is not for whoever reaches
// the HTTP port. cmd/server's `floodgate counters` command is its client.
package counters

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Rules is what the endpoints need of the rules: the set in force.
// rules.Watcher satisfies it.
type Rules interface {
	Current() *rules.Set
}

// Resetter deletes one counter of the store: after Reset, the next hit on
// key finds no state (a fixed window empty, a bucket full, a log without
// entries). limit.Memory, redislimit.Limiter and Split,
// memcachelimit.Limiter, denycache.Cache and the binary's store.Store
// implement it; spec is the limit the counter is kept for, which some
// stores need to find its keys (Memcached's window, a per-second Redis).
type Resetter interface {
	Reset(ctx context.Context, key string, spec limit.Spec) error
}

// Options configure a Handler. Rules, Limiter and Resetter are required.
type Options struct {
	// Rules gives the rules in force, which say which limits apply.
	Rules Rules
	// Limiter is the store's limiter, asked with hits of cost 0 for the
	// state of the counters (which changes nothing).
	Limiter limit.Limiter
	// Resetter deletes counters: the same store as Limiter.
	Resetter Resetter
	// Logger gets a line for every reset, naming who asked; nil discards
	// them.
	Logger *slog.Logger
	// Registerer, when not nil, gets floodgate_counter_resets_total.
	Registerer prometheus.Registerer
}

// Handler serves GET /counters and POST /counters/reset (see the package
// documentation and Answer). It is safe for concurrent use.
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
	// Domain and Descriptor are the request's, entries in order.
	Domain     string  `json:"domain"`
	Descriptor []Entry `json:"descriptor"`
	// Rule is the path of the rule the descriptor matches ("" for none).
	Rule string `json:"rule"`
	// Reason says in words what applies, or why nothing does ("entry 1
	// (api_key) matches no rule, so nothing is limited").
	Reason string `json:"reason"`
	// Reset reports that the counters were reset by this request (only
	// /counters/reset, when there were counters to reset).
	Reset bool `json:"reset"`
	// Limits are the rule's limits, in its order; empty when the
	// descriptor matches no rule or a rule without limits.
	Limits []Counter `json:"limits"`
}

// Entry is one key/value pair of a descriptor.
type Entry struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Counter is one limit that applies to the descriptor and the state of
// its counter, as a hit of cost 0 sees it at the instant of the request.
//
// Used is Capacity − Remaining, so that Used + Remaining is what the limit
// admits when its counter is new; what it counts depends on the
// algorithm: the hits of the current window (fixed_window), the estimate
// of the last window's hits rounded up (sliding_window), the hits logged
// in the last window (sliding_log), the tokens missing from a full bucket
// (token_bucket, gcra), or the meter's level rounded up (leaky_bucket).
// For example, 10 per minute in a fixed window that has counted 3 hits
// this minute, with 42 s left: Capacity 10, Used 3, Remaining 7,
// ResetSeconds 42.
type Counter struct {
	// Rule is the rule's path ("demo.api_key"), Name the limit's name (may
	// be empty) and Limit the limit in words ("10 per minute
	// (fixed_window)").
	Rule  string `json:"rule"`
	Name  string `json:"name,omitempty"`
	Limit string `json:"limit"`
	// Algorithm is the rule file's name for it ("token_bucket").
	Algorithm string `json:"algorithm"`
	// RequestsPerUnit per Unit (times UnitMultiplier) is the limit;
	// WindowSeconds the window's length, or the refill period of a
	// bucket.
	RequestsPerUnit uint32  `json:"requests_per_unit"`
	Unit            string  `json:"unit"`
	UnitMultiplier  uint32  `json:"unit_multiplier"`
	WindowSeconds   float64 `json:"window_seconds"`
	// Capacity is the most hits the counter admits at once: the burst of
	// a bucket, the limit otherwise (limit.Spec.Capacity).
	Capacity int64 `json:"capacity"`
	// Mode is "enforce", "shadow" (counted, never denies) or "quota".
	Mode string `json:"mode"`
	// Counted reports that the limit has a counter: false for an
	// unlimited limit and for one another limit of the rule replaces,
	// whose Used, Remaining and ResetSeconds are then 0 and Note says why.
	Counted bool   `json:"counted"`
	Note    string `json:"note,omitempty"`
	// Used, Remaining and ResetSeconds are the counter's state: see
	// Counter. ResetSeconds is the time until the counter is whole again
	// (limit.Decision.ResetAfter). Used counts past Capacity by Over,
	// what usage charged after the fact took beyond the limit (its debt,
	// limit.Decision.Debt): it is refused until that is paid back.
	Used         int64   `json:"used"`
	Remaining    int64   `json:"remaining"`
	Over         int64   `json:"over,omitempty"`
	ResetSeconds float64 `json:"reset_seconds"`
	// UsedBefore is Used just before a reset, on /counters/reset's answer;
	// absent elsewhere, or when the store could not be read before it.
	UsedBefore *int64 `json:"used_before,omitempty"`
	// Key is the counter's key (limit.Hit.Key), which the store keeps
	// under its own prefix and hash tag; "" when not Counted.
	Key string `json:"counter"`
}

// seconds is d in seconds, to the millisecond, for the JSON answer.
func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }
