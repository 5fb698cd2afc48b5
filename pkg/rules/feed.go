package rules

import (
	"fmt"
	"log/slog"
	"sync"
)

// Feed holds the rules that a remote source pushes whole, such as an xDS
// management server: each push is a complete set of rule files, validated
// and compiled as Load does, swapped in atomically when good and refused
// when not, the current set staying. Its Current, Status and Changed mean
// what a Watcher's do, so that the server, /rlconfig and the reload metrics
// treat both sources alike. Its methods are safe for concurrent use.
type Feed struct {
	history
	opts   Options
	once   sync.Once
	loaded chan struct{}

	mu     sync.Mutex
	source string
	pushed map[string][]byte // the files of the last Push, good or refused
	origin string            // and its origin
}

// NewFeed returns a Feed holding no rules yet: until the first good push,
// Current is an empty Set (no domain, so every request is allowed) and
// Status().Version is 0. attrs name the source in the logs (key, value
// pairs, as slog takes them). A nil logger discards logs.
func NewFeed(opts Options, logger *slog.Logger, attrs ...any) *Feed {
	f := &Feed{opts: opts, loaded: make(chan struct{})}
	empty, err := Parse(nil, Options{})
	if err != nil {
		panic(fmt.Sprintf("rules: an empty set does not compile: %v", err)) // cannot happen
	}
	f.init(empty, 0, logger, attrs...)
	return f
}

// Push compiles files (name -> content, as Parse takes them) and puts the
// result in force when it is good. origin is the source's name for this
// push (an xDS version_info), kept in Status().Origin and logged. Unlike a
// rule directory, a push with no domain is accepted: it is the source's
// whole state, and a source that has no limits left says so that way. The
// error, a *LoadError holding every problem found, is the refusal to report
// back; the current set then stays.
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

// Refuse records a push that could not be turned into rule files (a
// resource that does not decode), as Push records a bad one: counted as a
// failure, kept in Status().LastError and logged, the current set staying.
func (f *Feed) Refuse(origin string, err error) {
	f.offer(nil, err, false, origin)
}

// Pushed returns the files of the last Push and its origin, whether they
// were put in force or refused: the positions of Status().LastError, and
// of the rules in force when it is nil, are in these files, which exist
// nowhere else. The map must not be modified; Push keeps files as given.
func (f *Feed) Pushed() (origin string, files map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.origin, f.pushed
}

// Loaded returns a channel closed once a first push has been put in force.
func (f *Feed) Loaded() <-chan struct{} { return f.loaded }

// SetSource records the state of the source's connection, shown as
// Status().Source: the client that pushes tells there whether its server is
// reached and why not, so that operators see it beside the rules.
func (f *Feed) SetSource(state string) {
	f.mu.Lock()
	f.source = state
	f.mu.Unlock()
}

// Status returns the state of the pushes and of the source's connection.
func (f *Feed) Status() Status {
	st := f.history.Status()
	f.mu.Lock()
	st.Source = f.source
	f.mu.Unlock()
	return st
}
