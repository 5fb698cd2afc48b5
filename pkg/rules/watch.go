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

// Events come in bursts (an editor's write-rename, a ConfigMap swap): a
// reload waits for settleDelay without events, at most maxDelay after the
// burst's first. Every recheckEvery, Run also looks for a change no event
// told of.
const (
	settleDelay  = 100 * time.Millisecond
	maxDelay     = 400 * time.Millisecond
	recheckEvery = 2 * time.Second
)

// Status describes the loads of a Watcher or the pushes of a Feed, for a
// status endpoint.
type Status struct {
	// Version is the current Set's: the number of good loads that
	// changed the rules, the first load being 1.
	Version uint64
	// LoadedAt is when the current set was loaded.
	LoadedAt time.Time
	// LastError is the last refused reload, nil when the latest attempt
	// was good; LastErrorAt is when it happened.
	LastError   error
	LastErrorAt time.Time
	// Origin is a Feed's name for the rules in force (the xDS
	// version_info); "" for rule files.
	Origin string
	// Source is the state of a Feed's connection, as its client reports
	// it with SetSource; "" for rule files.
	Source string
	// Reloads counts the reload attempts after the first load, good,
	// refused or finding nothing changed; Failures counts the refused
	// ones. Run's first look counts only when it finds a change.
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
	// seen, replaced by tests before Run, is told of each event and whether it
	// may change the rules, and of each periodic look (the zero Event) and
	// whether it found a change.
	seen func(ev fsnotify.Event, relevant bool)
}

// NewWatcher loads path as Load does and returns a Watcher holding the
// result as version 1, or Load's error. A nil logger discards logs. Run
// follows changes.
func NewWatcher(path string, opts Options, logger *slog.Logger) (*Watcher, error) {
	s, err := Load(path, opts)
	if err != nil {
		return nil, err
	}
	w := &Watcher{path: path, opts: opts, recheck: recheckEvery, seen: func(fsnotify.Event, bool) {}}
	w.init(s, 1, logger, "path", path)
	w.logLoaded(s, w.attrs)
	return w, nil
}

// errNoRules refuses a reload that finds no rule file where the current set
// has rules. To remove every limit, deploy a file with the domain and no
// descriptors.
var errNoRules = errors.New("no rule files left; keeping the last good rules")

// Run watches the files until ctx is done and reloads once a burst of
// changes settles. It follows in-place writes, write-rename swaps,
// deletions, new subdirectories, and symbolic links at any depth (a
// release's "current" link, Kubernetes' ..data); after a link swap it
// watches the new target only. Every few seconds it also resolves the path
// again, to catch a change no event told of. A valid new set replaces the
// current one atomically; an invalid or missing one is logged and kept in
// Status, and the current set stays. Run returns ctx's error, or an error
// when watching cannot start. It may run once at a time.
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
	b := &burst{timer: time.NewTimer(time.Hour)}
	b.timer.Stop() // until an event
	defer b.timer.Stop()
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
			w.seen(ev, relevant)
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
		case <-b.timer.C:
			b.pending = false
			resync(newScope(w.path, w.opts.IgnoreDotFiles))
		case <-recheck.C:
			// Events can be missed (a file system without them, a plain
			// ancestor directory renamed, a watch the kernel could not
			// place): a changed fingerprint is a change all the same.
			next := newScope(w.path, w.opts.IgnoreDotFiles)
			changed := next.fingerprint != sc.fingerprint
			w.seen(fsnotify.Event{}, changed)
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
	timer   *time.Timer // fires when the reload is due; stopped until an event
	pending bool
	first   time.Time
}

func (b *burst) add() {
	now := time.Now()
	if !b.pending {
		b.pending, b.first = true, now
	}
	b.timer.Reset(min(settleDelay, max(0, b.first.Add(maxDelay).Sub(now))))
}

// Watching reports whether Run is watching the files: it has started and
// taken its first look at them, so that any change made from now on is
// seen. It is false before Run and after Run returns.
func (w *Watcher) Watching() bool { return w.watching.Load() }

// reload loads the files and puts the result in force when it is good and
// new. atStart is Run's first look, not counted unless it finds a change.
// Files identical to the current set's are not parsed again: a large set
// costs seconds of CPU and a second set's memory.
func (w *Watcher) reload(atStart bool) {
	cur := w.current.Load()
	files, probs := readRules(w.path, w.opts.IgnoreDotFiles)
	sortFiles(files)
	set, err := cur, error(nil)
	if len(probs.errs) > 0 || digest(files) != cur.digest {
		set, err = build(files, w.opts, probs, sliceBytes)
	}
	if err == nil && len(set.domains) == 0 && len(cur.domains) > 0 {
		// Losing every rule file is a broken deployment (a bad ConfigMap,
		// a half-finished copy), not an order to stop limiting.
		err = fmt.Errorf("%s: %w", w.path, errNoRules)
	}
	w.offer(set, err, atStart, "")
}

// maxLinkHops bounds the links followed to resolve one path, as the kernel
// does (ELOOP).
const maxLinkHops = 40

// scope is what to watch for a rule path as it resolves now: the
// directories of the rule tree, where every entry matters, and the
// directories holding each link met on the way, each missing component and
// the rule path's own entry, where only those names matter. A link swapped
// anywhere along the path is then an event in a watched directory.
type scope struct {
	dirs map[string]*watchDir // by real (link-free) path
	// fingerprint is a hash of the links and their targets, the
	// directories, and each rule file's real path, size, modification time
	// and inode (a replacing file may keep the size and time).
	fingerprint [sha256.Size]byte
}

// watchDir is one directory to watch.
type watchDir struct {
	all   bool            // every entry matters: a directory of the rule tree
	names map[string]bool // else only these entries
	info  os.FileInfo     // the directory when resolved, to see it replaced
}

// newScope resolves path now, as Load reads it. It never fails: what is
// missing is watched for in the nearest existing directory.
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
// it does, marking each link met and the first missing component. It
// returns the real path, or false when p does not resolve.
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

// target adds what real holds: a rule file, or a tree of directories,
// following the links in it.
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
			case e.IsDir() || isRuleFile(e.Name()):
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

// watchSet is the directories an fsnotify.Watcher watches.
type watchSet struct {
	fw      *fsnotify.Watcher
	watched map[string]os.FileInfo
}

// sync makes the watches sc's directories, dropping an old link target's
// and watching anew a directory replaced at the same path. It returns how
// many are watched.
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
