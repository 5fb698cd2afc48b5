package rules

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// history is what a Watcher and a Feed share: the set in force, the state
// of the loads and their logs, so that both count, swap and log alike.
type history struct {
	logger  *slog.Logger
	attrs   []any // name the source in every log line ("path", ...)
	current atomic.Pointer[Set]

	mu      sync.Mutex
	status  Status
	refused int           // offers refused since the last good one
	changed chan struct{} // closed when current is replaced
}

// init makes first the current set, as version (0 for a placeholder).
func (h *history) init(first *Set, version uint64, logger *slog.Logger, attrs ...any) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h.logger, h.attrs = logger, attrs
	h.changed = make(chan struct{})
	first.version = version
	h.status = Status{Version: version}
	if version > 0 {
		h.status.LoadedAt = first.loadedAt
	}
	h.current.Store(first)
}

// Current returns the last good set, never nil. A request should use one
// Current throughout, so that it never sees a mix of old and new rules.
func (h *history) Current() *Set { return h.current.Load() }

// Status returns the state of the loads.
func (h *history) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.status
}

// Changed returns a channel closed when the current set is replaced. Take
// it before Current to miss no change.
func (h *history) Changed() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// offer counts a load attempt and puts set in force when err is nil and
// set is new; with err it keeps the current set and records err. quiet
// does not count an attempt that found nothing changed. origin is the
// source's name of what it offered, "" for none.
func (h *history) offer(set *Set, err error, quiet bool, origin string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	attrs := h.attrs[:len(h.attrs):len(h.attrs)] // appends below copy
	if origin != "" {
		attrs = append(attrs, "origin", origin)
	}
	if quiet && err == nil && set.digest == h.current.Load().digest {
		return
	}
	if err != nil || h.status.Version > 0 {
		// A Feed's first good push is its first load, not a reload.
		h.status.Reloads++
	}
	if err != nil {
		h.status.Failures++
		h.refused++
		h.status.LastError, h.status.LastErrorAt = err, time.Now()
		n := 1
		var le *LoadError
		if errors.As(err, &le) {
			n = len(le.Errors)
		}
		h.logger.Error("rules: reload refused, the current rules stay",
			append(attrs, "version", h.status.Version, "errors", n, "error", err.Error())...)
		return
	}
	h.status.LastError, h.status.LastErrorAt = nil, time.Time{}
	unchanged := set.digest == h.current.Load().digest && h.status.Version > 0
	if h.refused > 0 {
		// Say once that the refusals logged as errors are over.
		version := h.status.Version
		if !unchanged {
			version++
		}
		h.logger.Info("rules: loaded again after refused reloads",
			append(attrs, "refused", h.refused, "version", version, "changed", !unchanged)...)
		h.refused = 0
	}
	if origin != "" {
		h.status.Origin = origin
	}
	if unchanged {
		return
	}
	h.status.Version++
	set.version = h.status.Version
	h.status.LoadedAt = set.loadedAt
	h.current.Store(set)
	close(h.changed)
	h.changed = make(chan struct{})
	h.logLoaded(set, attrs)
}

func (h *history) logLoaded(s *Set, attrs []any) {
	for _, wn := range s.warnings {
		a := []any{"at", wn.Pos.String()}
		if wn.Field != "" {
			a = append(a, "field", wn.Field)
		}
		h.logger.Warn("rules: "+wn.Msg, a...)
	}
	h.logger.Info("rules: loaded", append(attrs, "version", s.version,
		"files", s.files, "domains", len(s.domains), "rules", len(s.rules))...)
}
