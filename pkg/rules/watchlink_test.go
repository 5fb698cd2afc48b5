package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// linkStep is one change made to a rule tree behind links, and what must
// follow within maxReloadDelay.
type linkStep struct {
	name string
	do   func(t *testing.T, root string)
	// want is the limit of key k in domain d in force afterwards.
	want uint32
	// refused, when set, is a part of the error the change must be
	// refused with (counted in Status.Failures, kept in LastError) while
	// want stays in force.
	refused string
	// ignored marks a change the Watcher must not react to: none of its
	// events may change the rules, and want stays in force.
	ignored bool
}

// eventLog records, in order, the file events a Watcher's Run takes and
// its periodic looks.
type eventLog struct {
	mu     sync.Mutex
	events []seenEvent
}

// seenEvent is a file event, or a periodic look when name is "".
type seenEvent struct {
	name     string
	relevant bool // the event may change the rules; the look found a change
}

// startLinkWatcher runs a Watcher on path until the test ends, recording
// its events, and returns it once it watches.
func startLinkWatcher(t *testing.T, path string) (*Watcher, *eventLog) {
	t.Helper()
	w, err := NewWatcher(path, Options{}, nil)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	return w, runRecorded(t, w)
}

// runRecorded runs w until the test ends, recording its events, and
// returns once it watches.
func runRecorded(t *testing.T, w *Watcher) *eventLog {
	t.Helper()
	e := &eventLog{}
	w.seen = func(ev fsnotify.Event, relevant bool) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.events = append(e.events, seenEvent{ev.Name, relevant})
	}
	runUntilCleanup(t, w)
	return e
}

var marks atomic.Int64

// markName is the prefix of the names of mark's files.
const markName = ".mark-"

// mark creates a new file in dir, a directory the Watcher watches (for
// other names: the file changes no rule), and returns the position in
// the log of its first event once Run has taken it. inotify delivers a
// watcher's events in the order they happened, so every event of what
// was done before the mark is in the log before it.
func (e *eventLog) mark(t *testing.T, dir string) int {
	t.Helper()
	name := fmt.Sprint(markName, marks.Add(1))
	writeFile(t, filepath.Join(dir, name), "")
	for deadline := time.Now().Add(maxReloadDelay); ; time.Sleep(2 * time.Millisecond) {
		e.mu.Lock()
		for i, ev := range e.events {
			if filepath.Base(ev.name) == name {
				e.mu.Unlock()
				return i
			}
		}
		e.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("Run took no event of %s within %v", name, maxReloadDelay)
		}
	}
}

// lookAfter returns the position of the first periodic look logged after
// position from, once Run has made it; within 5 s for the 100 ms period
// the tests set.
func (e *eventLog) lookAfter(t *testing.T, from int) int {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		e.mu.Lock()
		for i := from + 1; i < len(e.events); i++ {
			if e.events[i].name == "" {
				e.mu.Unlock()
				return i
			}
		}
		e.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("Run made no periodic look within 5 s")
		}
	}
}

// relevantBetween returns what was logged between positions from and to,
// marks aside, that may change the rules: events, and looks that found a
// change.
func (e *eventLog) relevantBetween(from, to int) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var names []string
	for _, ev := range e.events[from:to] {
		switch {
		case !ev.relevant, strings.HasPrefix(filepath.Base(ev.name), markName):
		case ev.name == "":
			names = append(names, "(a periodic look)")
		default:
			names = append(names, ev.name)
		}
	}
	return names
}

// swapLink points link at target atomically, as a deploy does (a new link
// renamed over the old one: ln -sfn and mv -T).
func swapLink(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	symlink(t, target, tmp)
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

func removeAll(t *testing.T, path string) {
	t.Helper()
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
}

const brokenRules = "domain: ["

// TestWatcherFollowsLinks drives each shape of rule tree behind symbolic
// links through swaps, edits in the new target, edits of the old target,
// broken files and removed targets.
func TestWatcherFollowsLinks(t *testing.T) {
	write := func(rel string, n int) func(*testing.T, string) {
		return func(t *testing.T, root string) { writeFile(t, filepath.Join(root, rel), rulesWith("d", n)) }
	}
	breakFile := func(rel string) func(*testing.T, string) {
		return func(t *testing.T, root string) { writeFile(t, filepath.Join(root, rel), brokenRules) }
	}
	swap := func(target, link string) func(*testing.T, string) {
		return func(t *testing.T, root string) { swapLink(t, target, filepath.Join(root, link)) }
	}
	// The files of a new release, then the swap of the link to it.
	release := func(rel string, n int, target, link string) func(*testing.T, string) {
		return func(t *testing.T, root string) {
			write(rel, n)(t, root)
			swap(target, link)(t, root)
		}
	}
	remove := func(rel string) func(*testing.T, string) {
		return func(t *testing.T, root string) { removeAll(t, filepath.Join(root, rel)) }
	}

	tests := []struct {
		name  string
		setup func(t *testing.T, root string)
		path  string // the rule path, under root
		steps []linkStep
	}{
		{
			name: "the rule directory is a link",
			setup: func(t *testing.T, root string) {
				write("A/rules.yaml", 1)(t, root)
				symlink(t, "A", root+"/current")
			},
			path: "current",
			steps: []linkStep{
				{name: "swap to B", do: release("B/rules.yaml", 2, "B", "current"), want: 2},
				{name: "edit B", do: write("B/rules.yaml", 3), want: 3},
				{name: "edit the old A", do: write("A/rules.yaml", 9), want: 3, ignored: true},
				{name: "break B", do: breakFile("B/rules.yaml"), want: 3, refused: "current/rules.yaml:1:"},
				{name: "fix B", do: write("B/rules.yaml", 4), want: 4},
				{name: "rm -rf B", do: remove("B"), want: 4, refused: "current: no such file or directory"},
				{name: "B again", do: write("B/rules.yaml", 5), want: 5},
				{name: "edit B again", do: write("B/rules.yaml", 6), want: 6},
			},
		},
		{
			name: "a parent is a link (RUNTIME_ROOT/current)",
			setup: func(t *testing.T, root string) {
				write("rel1/ratelimit/config/rules.yaml", 1)(t, root)
				symlink(t, "rel1", root+"/current")
			},
			path: "current/ratelimit/config",
			steps: []linkStep{
				{name: "swap to rel2", do: release("rel2/ratelimit/config/rules.yaml", 2, "rel2", "current"), want: 2},
				{name: "edit rel2", do: write("rel2/ratelimit/config/rules.yaml", 3), want: 3},
				{name: "edit the old rel1", do: write("rel1/ratelimit/config/rules.yaml", 9), want: 3, ignored: true},
				{name: "a new file in rel2", do: func(t *testing.T, root string) {
					writeFile(t, root+"/rel2/ratelimit/config/team/e.yaml", rulesWith("e", 1))
					write("rel2/ratelimit/config/rules.yaml", 4)(t, root)
				}, want: 4},
				{name: "break rel2", do: breakFile("rel2/ratelimit/config/team/e.yaml"), want: 4, refused: "current/ratelimit/config/team/e.yaml:1:"},
				{name: "rm -rf rel2", do: remove("rel2"), want: 4, refused: "no such file or directory"},
				{name: "swap back to rel1", do: swap("rel1", "current"), want: 9},
			},
		},
		{
			name: "rule files are links to files elsewhere",
			setup: func(t *testing.T, root string) {
				write("store/v1.yaml", 1)(t, root)
				if err := os.MkdirAll(root+"/rules", 0o755); err != nil {
					t.Fatal(err)
				}
				symlink(t, "../store/v1.yaml", root+"/rules/rules.yaml")
			},
			path: "rules",
			steps: []linkStep{
				{name: "edit the target", do: write("store/v1.yaml", 2), want: 2},
				{name: "repoint the link", do: release("store/v2.yaml", 3, "../store/v2.yaml", "rules/rules.yaml"), want: 3},
				{name: "edit the old target", do: write("store/v1.yaml", 9), want: 3, ignored: true},
				{name: "a sibling of the target", do: write("store/v3.yaml", 8), want: 3, ignored: true},
				{name: "break the target", do: breakFile("store/v2.yaml"), want: 3, refused: "rules/rules.yaml:1:"},
				{name: "remove the target", do: remove("store/v2.yaml"), want: 3, refused: errNoRules.Error()},
				{name: "the target again", do: write("store/v2.yaml", 4), want: 4},
			},
		},
		{
			name: "a single rule file that is a link",
			setup: func(t *testing.T, root string) {
				write("store/v1.yaml", 1)(t, root)
				symlink(t, "store/v1.yaml", root+"/rules.yaml")
			},
			path: "rules.yaml",
			steps: []linkStep{
				{name: "edit the target", do: write("store/v1.yaml", 2), want: 2},
				{name: "repoint the link", do: release("store/v2.yaml", 3, "store/v2.yaml", "rules.yaml"), want: 3},
				{name: "edit the old target", do: write("store/v1.yaml", 9), want: 3, ignored: true},
				{name: "break the target", do: breakFile("store/v2.yaml"), want: 3, refused: "rules.yaml:1:"},
				{name: "fix the target", do: write("store/v2.yaml", 4), want: 4},
			},
		},
		{
			name: "a link to a link",
			setup: func(t *testing.T, root string) {
				write("rel1/config/rules.yaml", 1)(t, root)
				symlink(t, "rel1", root+"/stable")
				symlink(t, "stable", root+"/current")
			},
			path: "current/config",
			steps: []linkStep{
				{name: "swap the inner link", do: release("rel2/config/rules.yaml", 2, "rel2", "stable"), want: 2},
				{name: "edit rel2", do: write("rel2/config/rules.yaml", 3), want: 3},
				{name: "swap the outer link", do: release("rel3/config/rules.yaml", 4, "rel3", "current"), want: 4},
				{name: "edit rel2, no longer reached", do: write("rel2/config/rules.yaml", 9), want: 4, ignored: true},
				{name: "edit rel3", do: write("rel3/config/rules.yaml", 5), want: 5},
				{name: "the outer link removed and made again", do: func(t *testing.T, root string) {
					// ln -sf without -T: not atomic, a moment without the link.
					removeAll(t, root+"/current")
					symlink(t, "stable", root+"/current")
				}, want: 9}, // rel2's edit, made while it was not reached
				{name: "break rel2", do: breakFile("rel2/config/rules.yaml"), want: 9, refused: "current/config/rules.yaml:1:"},
			},
		},
		{
			name: "a ConfigMap's ..data swap",
			setup: func(t *testing.T, root string) {
				write("cm/..v1/rules.yaml", 1)(t, root)
				symlink(t, "..v1", root+"/cm/..data")
				symlink(t, "..data/rules.yaml", root+"/cm/rules.yaml")
			},
			path: "cm",
			steps: []linkStep{
				{name: "swap ..data", do: release("cm/..v2/rules.yaml", 2, "..v2", "cm/..data"), want: 2},
				{name: "edit the old ..v1", do: write("cm/..v1/rules.yaml", 9), want: 2, ignored: true},
				{name: "a broken version", do: func(t *testing.T, root string) {
					writeFile(t, root+"/cm/..v3/rules.yaml", brokenRules)
					swapLink(t, "..v3", root+"/cm/..data")
				}, want: 2, refused: "cm/rules.yaml:1:"},
				{name: "a good version", do: release("cm/..v4/rules.yaml", 4, "..v4", "cm/..data"), want: 4},
			},
		},
		{
			name: "the whole tree behind a parent's parent",
			setup: func(t *testing.T, root string) {
				write("r1/ratelimit/config/rules.yaml", 1)(t, root)
				if err := os.MkdirAll(root+"/srv/runtime_data", 0o755); err != nil {
					t.Fatal(err)
				}
				symlink(t, "../../r1", root+"/srv/runtime_data/current")
				symlink(t, "srv/runtime_data", root+"/rt")
			},
			path: "rt/current/ratelimit/config",
			steps: []linkStep{
				{name: "swap current", do: release("r2/ratelimit/config/rules.yaml", 2, "../../r2", "srv/runtime_data/current"), want: 2},
				{name: "swap the runtime link", do: func(t *testing.T, root string) {
					writeFile(t, root+"/other/current/ratelimit/config/rules.yaml", rulesWith("d", 3))
					swapLink(t, "other", root+"/rt")
				}, want: 3},
				{name: "edit r2, no longer reached", do: write("r2/ratelimit/config/rules.yaml", 9), want: 3, ignored: true},
				{name: "edit the new tree", do: write("other/current/ratelimit/config/rules.yaml", 4), want: 4},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			tc.setup(t, root)
			w, events := startLinkWatcher(t, filepath.Join(root, tc.path))
			if !limitIs("d", 1)(w.Current()) {
				t.Fatalf("first load: d's limit is not 1")
			}
			for _, st := range tc.steps {
				runLinkStep(t, w, events, root, st)
			}
		})
	}
}

// runLinkStep makes st's change to the rule tree under root that w
// watches, recording its events in events, and checks what follows.
func runLinkStep(t *testing.T, w *Watcher, events *eventLog, root string, st linkStep) {
	t.Helper()
	before := w.Status()
	if st.ignored {
		// The directory holding the rule path's own entry is watched.
		dir := filepath.Dir(w.path)
		from := events.mark(t, dir)
		st.do(t, root)
		to := events.mark(t, dir)
		if names := events.relevantBetween(from, to); len(names) > 0 {
			t.Fatalf("%s: events that may change the rules: %q, want none", st.name, names)
		}
		if !limitIs("d", st.want)(w.Current()) {
			t.Fatalf("%s: d's limit changed, want %d", st.name, st.want)
		}
		return
	}
	start := time.Now()
	st.do(t, root)
	switch {
	case st.refused != "":
		for w.Status().Failures == before.Failures {
			if time.Since(start) > maxReloadDelay {
				t.Fatalf("%s: not refused within %v (status %+v)", st.name, maxReloadDelay, w.Status())
			}
			time.Sleep(2 * time.Millisecond)
		}
		s := w.Status()
		if s.LastError == nil || !strings.Contains(s.LastError.Error(), st.refused) || s.LastErrorAt.IsZero() {
			t.Errorf("%s: LastError = %v, want one containing %q", st.name, s.LastError, st.refused)
		}
		if s.Version != before.Version || !limitIs("d", st.want)(w.Current()) {
			t.Errorf("%s: version %d (was %d), d's limit %d in force: want the last good rules", st.name, s.Version, before.Version, st.want)
		}
		t.Logf("%s: refused after %v: %v", st.name, time.Since(start).Round(time.Millisecond), s.LastError)
	default:
		waitFor(t, w, start, st.name, limitIs("d", st.want))
		if s := w.Status(); s.LastError != nil || s.Version <= before.Version {
			t.Errorf("%s: status %+v after a good change (version was %d)", st.name, s, before.Version)
		}
	}
}

// A change no event tells of (a plain directory above the rule path
// replaced, whose watch is not needed to see swaps of links) is caught by
// the periodic look at the resolved tree, though the new rule file has the
// old one's size and modification time: files unpacked from an archive or
// an image built reproducibly carry one fixed time, and two written within
// a clock tick of the file system share one.
func TestWatcherRecheckCatchesUnnotifiedChanges(t *testing.T) {
	root := t.TempDir()
	stamp := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC)
	writeStamped := func(name, content string) {
		writeFile(t, name, content)
		if err := os.Chtimes(name, stamp, stamp); err != nil {
			t.Fatal(err)
		}
	}
	writeStamped(root+"/x/app/config/rules.yaml", rulesWith("d", 1))
	w, err := NewWatcher(root+"/x/app/config", Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.recheck = 100 * time.Millisecond
	events := runRecorded(t, w)
	writeStamped(root+"/y/app/config/rules.yaml", rulesWith("d", 2))
	start := time.Now()
	if err := os.Rename(root+"/x", root+"/old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(root+"/y", root+"/x"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, w, start, "x replaced", limitIs("d", 2))
	start = time.Now()
	writeFile(t, root+"/x/app/config/rules.yaml", rulesWith("d", 3))
	waitFor(t, w, start, "edit in the new x", limitIs("d", 3))
	// The old x is no longer followed: neither the events of an edit
	// there nor a periodic look after it change anything.
	from := events.mark(t, root+"/x/app")
	writeFile(t, root+"/old/app/config/rules.yaml", rulesWith("d", 9))
	look := events.lookAfter(t, events.mark(t, root+"/x/app"))
	if names := events.relevantBetween(from, look+1); len(names) > 0 {
		t.Errorf("after an edit of the old x: %q may change the rules, want nothing", names)
	}
	if !limitIs("d", 3)(w.Current()) {
		t.Error("an edit of the old x changed the rules")
	}
}
