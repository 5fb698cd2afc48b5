package rules

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	// recheckEvery is how often Run resolves the rule path again to catch
	// a change no event told of. It costs a stat of each rule file.
	recheckEvery = 2 * time.Second
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
	// Origin is the source's own name for the rules in force, such as the
	// version_info of the xDS response they came in (Feed); "" for rule
	// files, whose Version says it all.
	Origin string
	// Source is the state of the connection of a remote source (a Feed's,
	// as its client reports it with SetSource), such as whether the xDS
	// server is reached and the last error; "" for rule files.
	Source string
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
	history
	path    string
	opts    Options
	running atomic.Bool
	recheck time.Duration // recheckEvery; shorter in tests

	// watching is set once Run watches the files and has looked at them.
	watching atomic.Bool
	// seen, when not nil, is told in order of each event Run takes from
	// the file watcher and whether it may change the rules, and of each
	// periodic look (as the zero Event) and whether it found the tree
	// changed. Tests set it before Run, to learn what a change caused.
	seen func(ev fsnotify.Event, relevant bool)
}

// NewWatcher loads path (as Load does) and returns a Watcher holding the
// result as version 1. The initial load's error is returned, with a nil
// Watcher. A nil logger discards logs. Call Run to follow changes.
func NewWatcher(path string, opts Options, logger *slog.Logger) (*Watcher, error) {
	s, err := Load(path, opts)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, opts: opts, recheck: recheckEvery}
	w.init(s, 1, logger, "path", path)
	w.logLoaded(s, w.attrs)
	return w, nil
}

// errNoRules is the reload error for a rule path that no longer holds any
// rule file while the current set has rules. The Watcher keeps the current
// set; to remove every limit on purpose, deploy a file with the domain and
// no descriptors.
var errNoRules = errors.New("no rule files left; keeping the last good rules")

// Run watches the files until ctx is done, reloading after changes settle
// (about 100 ms after the last event of a burst, at most 400 ms after its
// first). It follows in-place writes, write-rename swaps, deletions, new
// subdirectories, and symbolic links at any depth: the rule path or any
// directory above it being a link that is swapped (a release's "current"
// link, Kubernetes' ..data), files and directories in the tree that are
// links. After a swap it watches the new target only, so edits there are
// seen and edits of the old target are not. Every few seconds it also
// resolves the path again and reloads when the resolved tree changed
// without an event. A valid new set replaces the current one atomically; an
// invalid or missing one is refused, logged and kept in Status while the
// current set stays. Run returns ctx's error, or an error when watching
// cannot start. It may be called once at a time.
func (w *Watcher) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("rules: Watcher.Run is already running")
	}
	defer w.running.Store(false)
	defer w.watching.Store(false)
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("rules: watching %s: %w", w.path, err)
	}
	defer fw.Close()
	ws := &watchSet{fw: fw, watched: map[string]os.FileInfo{}}
	sc := newScope(w.path, w.opts.IgnoreDotFiles)
	if ws.sync(sc, w.logger) == 0 {
		return fmt.Errorf("rules: watching %s: no directory of it can be watched", w.path)
	}
	// Changes made between NewWatcher and now produced no events.
	w.reload(true)
	w.watching.Store(true)
	return w.watch(ctx, ws, sc)
}

// watch reloads on the events of ws and on the periodic look until ctx
// is done; sc is what ws watches now.
func (w *Watcher) watch(ctx context.Context, ws *watchSet, sc *scope) error {
	recheck := time.NewTicker(w.recheck)
	defer recheck.Stop()
	var b burst
	defer b.stop()
	// resync watches what the path resolves to now before reading the
	// files, so that a write after the read is an event.
	resync := func(next *scope) {
		sc = next
		if ws.sync(sc, w.logger) == 0 {
			w.logger.Warn("rules: no directory of the rule path can be watched; looking again every "+w.recheck.String(), "path", w.path)
		}
		w.reload(false)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-ws.fw.Events:
			if !ok {
				return errors.New("rules: file watcher closed")
			}
			relevant := sc.relevant(ev)
			if w.seen != nil {
				w.seen(ev, relevant)
			}
			if relevant {
				b.add()
			}
		case err, ok := <-ws.fw.Errors:
			if !ok {
				return errors.New("rules: file watcher closed")
			}
			// An overflow loses events: reload to be sure.
			w.logger.Warn("rules: file watcher error; reloading", "path", w.path, "error", err)
			b.add()
		case <-b.done():
			b.pending = false
			resync(newScope(w.path, w.opts.IgnoreDotFiles))
		case <-recheck.C:
			// Events can be missed (a file system without them, a plain
			// ancestor directory renamed, a watch the kernel could not
			// place): a changed fingerprint is a change all the same.
			next := newScope(w.path, w.opts.IgnoreDotFiles)
			changed := next.fingerprint != sc.fingerprint
			if w.seen != nil {
				w.seen(fsnotify.Event{}, changed)
			}
			if changed && !b.pending {
				w.logger.Debug("rules: change seen without an event", "path", w.path)
				resync(next)
			}
		}
	}
}

// burst gathers the events of a burst into one reload: it is due settleDelay
// after the last event, and at most maxDelay after the first.
type burst struct {
	timer   *time.Timer
	pending bool
	first   time.Time
}

// add counts an event.
func (b *burst) add() {
	now := time.Now()
	if !b.pending {
		b.pending, b.first = true, now
	}
	wait := min(settleDelay, max(0, b.first.Add(maxDelay).Sub(now)))
	if b.timer == nil {
		b.timer = time.NewTimer(wait)
	} else {
		b.timer.Reset(wait)
	}
}

// done returns the channel that fires when the reload is due; nil, which
// never fires, before the first event.
func (b *burst) done() <-chan time.Time {
	if b.timer == nil {
		return nil
	}
	return b.timer.C
}

func (b *burst) stop() {
	if b.timer != nil {
		b.timer.Stop()
	}
}

// Watching reports whether Run is watching the files: it has started and
// taken its first look at them, so that any change made from now on is
// seen. It is false before Run and after Run returns.
func (w *Watcher) Watching() bool { return w.watching.Load() }

// reload loads the files and swaps the result in when it is good and
// different from the current set. atStart is Run's first look, which is
// not counted as a reload when it finds the rules as NewWatcher loaded them.
// Files whose names and contents are those of the current set are not
// parsed again: they would give the same set, and a large one costs seconds
// of CPU and a second set's memory (Run's first look, a touch, an event
// that changed nothing).
func (w *Watcher) reload(atStart bool) {
	cur := w.current.Load()
	files, probs := readRules(w.path, w.opts.IgnoreDotFiles)
	var set *Set
	var err error
	sortFiles(files)
	if len(probs.errs) == 0 && digest(files) == cur.digest {
		set = cur
	} else {
		set, err = build(files, w.opts, probs, sliceBytes)
	}
	if err == nil && len(set.Domains()) == 0 && len(cur.Domains()) > 0 {
		// A directory that lost every rule file is a broken deployment (a
		// bad ConfigMap, a half-finished copy), not an order to stop
		// limiting: refuse it like a broken file.
		err = fmt.Errorf("%s: %w", w.path, errNoRules)
	}
	w.offer(set, err, atStart, "")
}

// maxLinkHops bounds the symbolic links followed to resolve one path, as
// the kernel does (ELOOP), so a link loop ends.
const maxLinkHops = 40

// scope is what to watch for a rule path, as the path resolves at one
// moment: every directory the rule files are in (the rule tree, where every
// entry matters), and the directory holding each symbolic link met on the
// way to them, each missing component, and the rule path's own entry (where
// only those names matter). A swap of a link anywhere along the path (the
// rule directory itself, a parent such as RUNTIME_ROOT's current, a
// ConfigMap's ..data, a file that is a link) is then an event in a watched
// directory, and the directories of an old target are no longer watched.
type scope struct {
	dirs map[string]*watchDir // real (link-free) directory path -> what matters in it
	// fingerprint identifies the resolved tree: the links and their
	// targets, the directories, and each rule file's real path, size,
	// modification time and inode (fileID: a replacing file may carry the
	// same size and time). A periodic look compares it, to catch what no
	// event told.
	fingerprint [sha256.Size]byte
}

// watchDir is one directory to watch.
type watchDir struct {
	all   bool            // every entry matters: a directory of the rule tree
	names map[string]bool // else only these entries
	info  os.FileInfo     // the directory when resolved, to see it replaced
}

// newScope resolves path now, as Load reads it with ignoreDot
// (Options.IgnoreDotFiles). It never fails: what is missing is watched for
// in the nearest existing directory, and Load reports it.
func newScope(path string, ignoreDot bool) *scope {
	r := &resolver{sc: &scope{dirs: map[string]*watchDir{}}, h: sha256.New(), ignoreDot: ignoreDot}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = filepath.Clean(path)
	}
	if parent, ok := r.follow(filepath.Dir(abs)); ok {
		// The rule path's own entry: a rename over it replaces the rules.
		base := filepath.Base(abs)
		r.entry(parent, base)
		if real, ok := r.follow(filepath.Join(parent, base)); ok {
			r.target(real, 0)
		}
	}
	r.h.Sum(r.sc.fingerprint[:0])
	return r.sc
}

// resolver builds a scope.
type resolver struct {
	sc        *scope
	h         hash.Hash
	ignoreDot bool // the tree as Options.IgnoreDotFiles reads it
}

// note adds a fact about the resolved tree to the fingerprint.
func (r *resolver) note(parts ...string) {
	for _, p := range parts {
		r.h.Write([]byte(p))
		r.h.Write([]byte{0})
	}
	r.h.Write([]byte{'\n'})
}

// dir returns dir's entry in the scope, adding it.
func (r *resolver) dir(dir string) *watchDir {
	d := r.sc.dirs[dir]
	if d == nil {
		d = &watchDir{names: map[string]bool{}}
		d.info, _ = os.Stat(dir)
		r.sc.dirs[dir] = d
	}
	return d
}

// entry marks name in the real directory dir as mattering.
func (r *resolver) entry(dir, name string) { r.dir(dir).names[name] = true }

// follow resolves the absolute path p component by component, as opening
// it does, marking each symbolic link met and the first missing component
// in their directories. It returns the real path, and false when p does not
// resolve (missing, a loop, unreadable).
func (r *resolver) follow(p string) (string, bool) {
	real := string(filepath.Separator)
	rest := strings.Split(p, string(filepath.Separator))
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			real = filepath.Dir(real) // real has no links: its parent is the kernel's ".."
			continue
		}
		next := filepath.Join(real, c)
		fi, err := os.Lstat(next)
		if err != nil {
			r.entry(real, c) // its creation is a change
			r.note("missing", next)
			return "", false
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			real = next
			continue
		}
		r.entry(real, c) // its swap is a change
		target, err := os.Readlink(next)
		if hops++; err != nil || hops > maxLinkHops {
			r.note("unresolved", next)
			return "", false
		}
		r.note("link", next, target)
		if filepath.IsAbs(target) {
			real = string(filepath.Separator)
		}
		rest = append(strings.Split(target, string(filepath.Separator)), rest...)
	}
	return real, true
}

// target adds what the real path real holds: a rule file, or a tree of
// directories whose every entry matters, following the links in it.
func (r *resolver) target(real string, depth int) {
	fi, err := os.Stat(real)
	switch {
	case err != nil:
		r.note("unreadable", real)
	case fi.IsDir():
		if depth > maxDirDepth {
			return // a link loop: Load reports it
		}
		r.dir(real).all = true
		r.note("dir", real)
		entries, err := os.ReadDir(real)
		if err != nil {
			r.note("unreadable", real)
			return
		}
		outside := outsideTree(entries, r.ignoreDot)
		for _, e := range entries {
			if outside(e.Name()) {
				continue // not read by Load; ..data is reached through the links into it
			}
			full := filepath.Join(real, e.Name())
			switch {
			case e.Type()&os.ModeSymlink != 0:
				if t, ok := r.follow(full); ok && (isRuleFile(e.Name()) || isDir(t)) {
					r.target(t, depth+1)
				}
			case e.IsDir():
				r.target(full, depth+1)
			case isRuleFile(e.Name()):
				r.target(full, depth+1)
			}
		}
	default:
		r.entry(filepath.Dir(real), filepath.Base(real))
		r.note("file", real, strconv.FormatInt(fi.Size(), 10), strconv.FormatInt(fi.ModTime().UnixNano(), 10), fileID(fi))
	}
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// relevant reports whether an event may change the rules.
func (sc *scope) relevant(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Clean(ev.Name)
	if _, ok := sc.dirs[name]; ok {
		return true // a watched directory itself removed or moved
	}
	d, ok := sc.dirs[filepath.Dir(name)]
	return ok && (d.all || d.names[filepath.Base(name)])
}

// watchSet is the directories an fsnotify.Watcher watches, with the
// directory each watch was placed on.
type watchSet struct {
	fw      *fsnotify.Watcher
	watched map[string]os.FileInfo
}

// sync makes the watches exactly sc's directories: it removes those no
// longer needed (an old link target is never watched again) and watches
// anew a directory replaced at the same path. It returns how many of sc's
// directories are watched.
func (ws *watchSet) sync(sc *scope, logger *slog.Logger) int {
	for dir, info := range ws.watched {
		d, ok := sc.dirs[dir]
		if ok && d.info != nil && info != nil && os.SameFile(d.info, info) {
			continue
		}
		_ = ws.fw.Remove(dir) // an error means the kernel dropped it already
		delete(ws.watched, dir)
	}
	for dir, d := range sc.dirs {
		if _, ok := ws.watched[dir]; ok || d.info == nil {
			continue
		}
		if err := ws.fw.Add(dir); err != nil {
			logger.Debug("rules: cannot watch directory", "dir", dir, "error", err)
			continue
		}
		ws.watched[dir] = d.info
	}
	return len(ws.watched)
}
