package rules

import (
	"log/slog"
	"sync"
)

// Feed holds the rules a remote source, such as an xDS management server,
// pushes whole: each push is compiled as Parse does and put in force
// atomically when good; a bad one is refused and the current set stays.
// Current, Status and Changed mean what a Watcher's do. Its methods are
// safe for concurrent use.
type Feed struct {
	history
	opts   Options
	once   sync.Once
	loaded chan struct{}
	pushed map[string][]byte // the files of the last Push, good or refused, under mu
	origin string            // and its origin
}

// NewFeed returns a Feed whose Current, until the first good push, is an
// empty Set, allowing every request, at Status().Version 0. attrs name the
// source in the logs, as slog takes them. A nil logger discards logs.
func NewFeed(opts Options, logger *slog.Logger, attrs ...any) *Feed {
	f := &Feed{opts: opts, loaded: make(chan struct{})}
	f.init(newCompiler(Options{}, &problems{}).finish(), 0, logger, attrs...)
	return f
}

// Push compiles files as Parse does and puts the result in force when it
// is good, or returns Parse's error. origin is the source's name for the
// push (an xDS version_info), kept in Status().Origin. Unlike a rule
// directory, a push with no domain is accepted: it is how a source says it
// has no limits left.
func (f *Feed) Push(origin string, files map[string][]byte) error {
	f.mu.Lock()
	f.pushed, f.origin = files, origin
	f.mu.Unlock()
	set, err := Parse(files, f.opts)
	f.offer(set, err, false, origin)
	if err == nil {
		f.once.Do(func() { close(f.loaded) })
	}
	return err
}

// Refuse records, as Push records a bad one, a push that could not be
// turned into rule files.
func (f *Feed) Refuse(origin string, err error) {
	f.offer(nil, err, false, origin)
}

// Pushed returns the files of the last Push, in force or refused, and its
// origin: the files that positions in Status().LastError refer to. The map
// must not be modified.
func (f *Feed) Pushed() (origin string, files map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.origin, f.pushed
}

// Loaded returns a channel closed once a first push has been put in force.
func (f *Feed) Loaded() <-chan struct{} { return f.loaded }

// SetSource records the state of the source's connection, as
// Status().Source.
func (f *Feed) SetSource(state string) {
	f.mu.Lock()
	f.status.Source = state
	f.mu.Unlock()
}
