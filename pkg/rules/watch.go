package rules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Reload timing. Events come in bursts (an editor's write-rename, the
// several steps of a ConfigMap swap): the reload waits until no event has
// come for settleDelay, but never longer than maxDelay after the first event
// of a burst, so a valid change is in effect well within a second.
const (
	settleDelay = 100 * time.Millisecond
	maxDelay    = 400 * time.Millisecond
)

// Status describes a Watcher's loads, for a status endpoint.
type Status struct {
	// Version counts the good loads that changed the rules; the first load
	// is 1. It is the Version of the current Set.
	Version uint64
	// LoadedAt is when the current set was loaded.
	LoadedAt time.Time
	// LastError is the last refused reload (a *LoadError, or the error of
	// watching), nil when the latest attempt was good.
	LastError error
	// LastErrorAt is when LastError happened; zero when LastError is nil.
	LastErrorAt time.Time
	// Reloads counts reload attempts after the first load, good or not,
	// including those that found nothing changed; Failures counts the
	// refused ones. Run's look at the files when it starts watching counts
	// only when it finds them changed since NewWatcher (or broken), so a
	// fresh start shows no reload.
	Reloads, Failures uint64
}

// Watcher keeps the current Set of a rule file or directory, reloading it
// when the files change. Its methods are safe for concurrent use.
type Watcher struct {
	path    string
	opts    Options
	logger  *slog.Logger
	current atomic.Pointer[Set]
	running atomic.Bool

	// watching is set once Run watches the files and has looked at them.
	watching atomic.Bool

	mu      sync.Mutex
	status  Status
	refused int           // reloads refused since the last good one
	changed chan struct{} // closed when current is replaced
}

// NewWatcher loads path (as Load does) and returns a Watcher holding the
// result as version 1. The initial load's error is returned, with a nil
// Watcher. A nil logger discards logs. Call Run to follow changes.
func NewWatcher(path string, opts Options, logger *slog.Logger) (*Watcher, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s, err := Load(path, opts)
	if err != nil {
		return nil, err
	}
	s.version = 1
	w := &Watcher{path: path, opts: opts, logger: logger, changed: make(chan struct{})}
	w.status = Status{Version: 1, LoadedAt: s.loadedAt}
	w.current.Store(s)
	w.logLoaded(s)
	return w, nil
}

// ErrNoRules is the reload error for a rule path that no longer holds any
// rule file while the current set has rules. The Watcher keeps the current
// set; to remove every limit on purpose, deploy a file with the domain and
// no descriptors.
var ErrNoRules = errors.New("no rule files left; keeping the last good rules")

// Current returns the last good set. It is never nil. A request should call
// it once and use that set throughout, so that it sees either the old rules
// or the new ones, never a mix.
func (w *Watcher) Current() *Set { return w.current.Load() }

// Status returns the state of the loads.
func (w *Watcher) Status() Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.status
}

// Changed returns a channel that is closed when the current set is
// replaced by a newer one. Take it before Current to miss no change.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Run watches the files until ctx is done, reloading after changes settle
// (about 100 ms after the last event of a burst, at most 400 ms after its
// first). It follows in-place writes, write-rename swaps, deletions, new
// subdirectories and Kubernetes' swap of a ConfigMap's ..data link. A valid
// new set replaces the current one atomically; an invalid one is refused,
// logged and kept in Status while the current set stays. Run returns ctx's
// error, or an error when watching cannot start. It may be called once at a
// time.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("rules: Watcher.Run is already running")
	}
	defer w.running.Store(false)
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watching %s: %w", w.path, err)
	}
	defer fw.Close()
	sc, err := newScope(w.path)
	if err != nil {
		return fmt.Errorf("rules: watching %s: %w", w.path, err)
	}
	if err := sc.sync(fw, w.logger); err != nil {
		return fmt.Errorf("rules: watching %s: %w", w.path, err)
	}
	// Changes made between NewWatcher and now produced no events.
	w.reload(true)
	w.watching.Store(true)

	timer := time.NewTimer(time.Hour)
	timer.Stop()
	pending := false
	var first time.Time
	schedule := func() {
		now := time.Now()
		if !pending {
			pending, first = true, now
		}
		timer.Reset(min(settleDelay, max(0, first.Add(maxDelay).Sub(now))))
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-fw.Events:
			if !ok {
				return errors.New("rules: file watcher closed")
			}
			if sc.relevant(ev) {
				schedule()
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errors.New("rules: file watcher closed")
			}
			// An overflow loses events: reload to be sure.
			w.logger.Warn("rules: file watcher error; reloading", "path", w.path, "error", err)
			schedule()
		case <-timer.C:
			pending = false
			// Watch new directories before reading them, so that a write
			// after the read is seen as an event.
			if err := sc.sync(fw, w.logger); err != nil {
				w.logger.Warn("rules: cannot watch rule path", "path", w.path, "error", err)
			}
			w.reload(false)
		}
	}
}

// reload loads the files and swaps the result in when it is good and
// different from the current set. atStart is Run's first look, which is
// not counted as a reload when it finds the rules as NewWatcher loaded them.
func (w *Watcher) reload(atStart bool) {
	set, err := Load(w.path, w.opts)
	if err == nil && len(set.Domains()) == 0 && len(w.current.Load().Domains()) > 0 {
		// A directory that lost every rule file is a broken deployment (a
		// bad ConfigMap, a half-finished copy), not an order to stop
		// limiting: refuse it like a broken file.
		err = fmt.Errorf("%s: %w", w.path, ErrNoRules)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if atStart && err == nil && set.digest == w.current.Load().digest {
		return
	}
	w.status.Reloads++
	if err != nil {
		w.status.Failures++
		w.refused++
		w.status.LastError, w.status.LastErrorAt = err, time.Now()
		n := 1
		var le *LoadError
		if errors.As(err, &le) {
			n = len(le.Errors)
		}
		w.logger.Error("rules: reload refused, the current rules stay",
			"path", w.path, "version", w.status.Version, "errors", n, "error", err.Error())
		return
	}
	w.status.LastError, w.status.LastErrorAt = nil, time.Time{}
	unchanged := set.digest == w.current.Load().digest
	if w.refused > 0 {
		// Once, when the files are good again: the refusals logged at
		// error level are over, whether by a fix or a restored copy.
		version := w.status.Version
		if !unchanged {
			version++
		}
		w.logger.Info("rules: loaded again after refused reloads",
			"path", w.path, "refused", w.refused, "version", version, "changed", !unchanged)
		w.refused = 0
	}
	if unchanged {
		return
	}
	w.status.Version++
	set.version = w.status.Version
	w.status.LoadedAt = set.loadedAt
	w.current.Store(set)
	close(w.changed)
	w.changed = make(chan struct{})
	w.logLoaded(set)
}

func (w *Watcher) logLoaded(s *Set) {
	for _, wn := range s.warnings {
		attrs := []any{"at", wn.Pos.String()}
		if wn.Field != "" {
			attrs = append(attrs, "field", wn.Field)
		}
		w.logger.Warn("rules: "+wn.Msg, attrs...)
	}
	w.logger.Info("rules: loaded", "path", w.path, "version", s.version,
		"files", s.files, "domains", len(s.names), "rules", len(s.rules))
}

// scope decides which directories to watch and which events matter.
type scope struct {
	root   string // absolute rule path
	parent string // its directory, watched to see root itself replaced
	isDir  bool
}

func newScope(path string) (*scope, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, err
	}
	return &scope{root: abs, parent: filepath.Dir(abs), isDir: fi.IsDir()}, nil
}

// relevant reports whether an event may change the rules.
func (sc *scope) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Clean(ev.Name)
	if filepath.Dir(name) != sc.parent {
		return true
	}
	if sc.isDir {
		return name == sc.root // a sibling of the rule directory is not
	}
	// A single file: itself, or a ConfigMap's ..data swap beside it.
	return name == sc.root || strings.HasPrefix(filepath.Base(name), "..")
}

// dirs lists the directories to watch: the rule path's directory, the rule
// directory and its subdirectories (not those starting with "."), and the
// directories where symbolic links to rule files point.
func (sc *scope) dirs() []string {
	want := map[string]bool{sc.parent: true}
	add := func(file string) {
		if real, err := filepath.EvalSymlinks(file); err == nil {
			want[filepath.Dir(real)] = true
		}
	}
	if !sc.isDir {
		add(sc.root)
	} else {
		var walk func(dir string, depth int)
		walk = func(dir string, depth int) {
			want[dir] = true
			if depth >= maxDirDepth {
				return
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				return
			}
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), ".") {
					continue
				}
				full := filepath.Join(dir, e.Name())
				fi, err := os.Stat(full)
				switch {
				case err != nil:
				case fi.IsDir():
					walk(full, depth+1)
				case e.Type()&os.ModeSymlink != 0 && isRuleFile(e.Name()):
					add(full)
				}
			}
		}
		walk(sc.root, 0)
	}
	out := make([]string, 0, len(want))
	for d := range want {
		out = append(out, d)
	}
	return out
}

// sync makes fw watch exactly dirs(). It fails only when the rule path's
// own directory cannot be watched.
func (sc *scope) sync(fw *fsnotify.Watcher, logger *slog.Logger) error {
	want := map[string]bool{}
	for _, d := range sc.dirs() {
		want[d] = true
	}
	have := map[string]bool{}
	for _, d := range fw.WatchList() {
		have[d] = true
		if !want[d] {
			_ = fw.Remove(d) // gone or no longer needed; an error means already unwatched
		}
	}
	for d := range want {
		if have[d] {
			continue
		}
		if err := fw.Add(d); err != nil {
			if d == sc.parent {
				return err
			}
			logger.Debug("rules: cannot watch directory", "dir", d, "error", err)
		}
	}
	return nil
}
