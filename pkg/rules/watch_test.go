package rules

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
)

// maxReloadDelay is the longest a valid change may take to be seen.
const maxReloadDelay = time.Second

// startWatcher runs a Watcher on path until the test ends and returns it
// once it watches.
func startWatcher(t *testing.T, path string) (*Watcher, *testlog.Buffer) {
	t.Helper()
	logs := &testlog.Buffer{}
	w, err := NewWatcher(path, Options{}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	runUntilCleanup(t, w)
	return w, logs
}

// runUntilCleanup runs w until the test ends and returns once it watches.
func runUntilCleanup(t *testing.T, w *Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for !w.Watching() {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitFor polls the watcher's current set until cond holds, failing when it
// takes longer than maxReloadDelay from since.
func waitFor(t *testing.T, w *Watcher, since time.Time, what string, cond func(*Set) bool) {
	t.Helper()
	for !cond(w.Current()) {
		if time.Since(since) > maxReloadDelay {
			t.Fatalf("%s: not seen within %v (status %+v)", what, maxReloadDelay, w.Status())
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Logf("%s: seen after %v", what, time.Since(since).Round(time.Millisecond))
}

// limitIs reports whether key k of domain has requests_per_unit n.
func limitIs(domain string, n uint32) func(*Set) bool {
	return func(s *Set) bool {
		r := s.Match(domain, entries("k=x"))
		return r != nil && len(r.Limits) == 1 && r.Limits[0].RequestsPerUnit == n
	}
}

// rulesWith is a rule file for domain whose key k allows n per second.
func rulesWith(domain string, n int) string {
	return strings.Replace(domainFile(domain, "k"), "requests_per_unit: 1}", "requests_per_unit: "+itoa(n)+"}", 1)
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestWatcherReloads(t *testing.T) {
	t.Run("in-place write", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
		w, _ := startWatcher(t, dir)
		for n := 2; n <= 3; n++ {
			start := time.Now()
			writeFile(t, dir+"/rules.yaml", rulesWith("d", n))
			waitFor(t, w, start, "write "+itoa(n), limitIs("d", uint32(n)))
		}
		if st := w.Status(); st.Version != 3 || w.Current().Version() != 3 || st.LastError != nil {
			t.Errorf("status %+v, set version %d; want version 3", st, w.Current().Version())
		}
	})

	// Names starting with "." are read, as the reference reads them, and
	// watched alike.
	t.Run("a dot file and a dot directory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
		w, _ := startWatcher(t, dir)
		start := time.Now()
		writeFile(t, dir+"/.late.yaml", rulesWith("late", 4))
		waitFor(t, w, start, "a dot file written", limitIs("late", 4))
		writeFile(t, dir+"/.sub/rules.yaml", rulesWith("sub", 5))
		waitFor(t, w, start, "a dot directory made", limitIs("sub", 5))
		start = time.Now()
		writeFile(t, dir+"/.sub/rules.yaml", rulesWith("sub", 6))
		waitFor(t, w, start, "a file in it written", limitIs("sub", 6))
	})

	t.Run("editor's write and rename", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
		w, _ := startWatcher(t, dir)
		start := time.Now()
		writeFile(t, dir+"/.rules.yaml.swp", rulesWith("d", 7))
		if err := os.Rename(dir+"/.rules.yaml.swp", dir+"/rules.yaml"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, w, start, "rename", limitIs("d", 7))
	})

	t.Run("ConfigMap symlink swap", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/..2026_01_01_00_00_00.1/rules.yaml", rulesWith("d", 1))
		symlink(t, "..2026_01_01_00_00_00.1", dir+"/..data")
		symlink(t, "..data/rules.yaml", dir+"/rules.yaml")
		w, _ := startWatcher(t, dir)
		for i, ts := range []string{"..2026_01_01_00_01_00.2", "..2026_01_01_00_02_00.3"} {
			n := i + 2
			start := time.Now()
			// What the kubelet does: write a new directory, point a temporary
			// link at it, rename the link over ..data, remove the old one.
			writeFile(t, dir+"/"+ts+"/rules.yaml", rulesWith("d", n))
			symlink(t, ts, dir+"/..data_tmp")
			old, _ := os.Readlink(dir + "/..data")
			if err := os.Rename(dir+"/..data_tmp", dir+"/..data"); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dir + "/" + old); err != nil {
				t.Fatal(err)
			}
			waitFor(t, w, start, "swap to "+ts, limitIs("d", uint32(n)))
		}
	})

	t.Run("single file in a ConfigMap", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/..v1/rules.yaml", rulesWith("d", 1))
		symlink(t, "..v1", dir+"/..data")
		symlink(t, "..data/rules.yaml", dir+"/rules.yaml")
		w, _ := startWatcher(t, dir+"/rules.yaml")
		start := time.Now()
		writeFile(t, dir+"/..v2/rules.yaml", rulesWith("d", 2))
		symlink(t, "..v2", dir+"/..data_tmp")
		if err := os.Rename(dir+"/..data_tmp", dir+"/..data"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, w, start, "swap", limitIs("d", 2))
		// The file itself, written in place through its links.
		start = time.Now()
		writeFile(t, dir+"/..v2/rules.yaml", rulesWith("d", 3))
		waitFor(t, w, start, "write through the link", limitIs("d", 3))
	})

	t.Run("broken file keeps the old rules", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
		writeFile(t, dir+"/other.yaml", rulesWith("e", 1))
		w, logs := startWatcher(t, dir)
		before := w.Current()
		start := time.Now()
		writeFile(t, dir+"/rules.yaml", strings.Replace(rulesWith("d", 5), "unit: second", "unit: secnd", 1))
		writeFile(t, dir+"/other.yaml", rulesWith("e", 5)) // valid, but the set is refused whole
		for w.Status().LastError == nil {
			if time.Since(start) > maxReloadDelay {
				t.Fatalf("broken file not reported within %v", maxReloadDelay)
			}
			time.Sleep(2 * time.Millisecond)
		}
		st := w.Status()
		if w.Current() != before || st.Version != 1 || st.Failures == 0 || st.LastErrorAt.IsZero() {
			t.Errorf("after a broken edit: status %+v, set replaced: %v", st, w.Current() != before)
		}
		if !strings.Contains(st.LastError.Error(), dir+"/rules.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit \"secnd\"") {
			t.Errorf("LastError = %v", st.LastError)
		}
		if !limitIs("d", 1)(w.Current()) || !limitIs("e", 1)(w.Current()) {
			t.Errorf("the old rules are not in force")
		}
		if !strings.Contains(logs.String(), "reload refused") || !strings.Contains(logs.String(), "unknown unit") {
			t.Errorf("the refusal is not logged:\n%s", logs.String())
		}
		start = time.Now()
		writeFile(t, dir+"/rules.yaml", rulesWith("d", 6))
		waitFor(t, w, start, "fixed", func(s *Set) bool { return limitIs("d", 6)(s) && limitIs("e", 5)(s) })
		if st := w.Status(); st.LastError != nil || st.Version != 2 {
			t.Errorf("after the fix: %+v", st)
		}
	})

	t.Run("deletion and new subdirectories", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/a.yaml", rulesWith("a", 1))
		writeFile(t, dir+"/b.yaml", rulesWith("b", 1))
		w, _ := startWatcher(t, dir)
		start := time.Now()
		if err := os.Remove(dir + "/b.yaml"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, w, start, "deletion", func(s *Set) bool { return !s.HasDomain("b") && s.HasDomain("a") })

		start = time.Now()
		writeFile(t, dir+"/team/c.yaml", rulesWith("c", 1))
		waitFor(t, w, start, "new subdirectory", func(s *Set) bool { return s.HasDomain("c") })
		// The new subdirectory is watched too.
		start = time.Now()
		writeFile(t, dir+"/team/c.yaml", rulesWith("c", 2))
		waitFor(t, w, start, "write in the new subdirectory", limitIs("c", 2))

		start = time.Now()
		if err := os.RemoveAll(dir + "/team"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, w, start, "subdirectory removed", func(s *Set) bool { return !s.HasDomain("c") })
	})

	t.Run("every file removed keeps the last good rules", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFile(t, dir+"/a.yaml", rulesWith("a", 1))
		w, _ := startWatcher(t, dir)
		if err := os.Remove(dir + "/a.yaml"); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(time.Second)
		for w.Status().LastError == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		st := w.Status()
		if !errors.Is(st.LastError, errNoRules) {
			t.Fatalf("after removing every file: LastError = %v, want errNoRules", st.LastError)
		}
		if !w.Current().HasDomain("a") || st.Version != 1 {
			t.Fatalf("after removing every file: domain a kept = %v, version %d; want the last good set (version 1)", w.Current().HasDomain("a"), st.Version)
		}
		start := time.Now()
		writeFile(t, dir+"/a.yaml", rulesWith("a", 3))
		waitFor(t, w, start, "a good file after the empty directory", limitIs("a", 3))
	})

	t.Run("the rule directory replaced", func(t *testing.T) {
		t.Parallel()
		parent := t.TempDir()
		dir := parent + "/rules"
		writeFile(t, dir+"/a.yaml", rulesWith("a", 1))
		w, _ := startWatcher(t, dir)
		writeFile(t, parent+"/rules.new/a.yaml", rulesWith("a", 4))
		start := time.Now()
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(parent+"/rules.new", dir); err != nil {
			t.Fatal(err)
		}
		waitFor(t, w, start, "directory replaced", limitIs("a", 4))
		start = time.Now()
		writeFile(t, dir+"/a.yaml", rulesWith("a", 5))
		waitFor(t, w, start, "write in the replacement", limitIs("a", 5))
	})
}

func TestWatcherIgnoresNoOpChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/rules.yaml", rulesWith("d", 1))
	w, _ := startWatcher(t, dir)
	first := w.Current()
	changed := w.Changed()
	writeFile(t, dir+"/rules.yaml", rulesWith("d", 1)) // same content
	writeFile(t, dir+"/notes.txt", "not a rule file")
	start := time.Now()
	for w.Status().Reloads < 1 {
		if time.Since(start) > maxReloadDelay {
			t.Fatal("no reload attempted")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if w.Current() != first || w.Status().Version != 1 {
		t.Errorf("an unchanged rule set was swapped in (version %d)", w.Status().Version)
	}
	select {
	case <-changed:
		t.Errorf("Changed closed without a change")
	default:
	}
	writeFile(t, dir+"/rules.yaml", rulesWith("d", 2))
	select {
	case <-changed:
	case <-time.After(maxReloadDelay):
		t.Fatal("Changed not closed after a change")
	}
	if !limitIs("d", 2)(w.Current()) {
		t.Errorf("Changed closed before the new set was current")
	}
}

// TestWatcherConcurrentReaders matches continuously while the rules are
// rewritten; run with -race it checks the swap is safe, and each set read
// must be whole: both files of one write agree.
func TestWatcherConcurrentReaders(t *testing.T) {
	dir, scratch := t.TempDir(), t.TempDir()
	write := func(n int) {
		// One rename replaces both rules at once. The new file is written
		// outside the rule directory, where a dot file is a rule file too.
		content := "domain: both\ndescriptors:\n  - key: x\n    rate_limit: {unit: second, requests_per_unit: " + itoa(n) + "}\n  - key: y\n    rate_limit: {unit: minute, requests_per_unit: " + itoa(n) + "}\n"
		writeFile(t, scratch+"/both.yaml", content)
		if err := os.Rename(scratch+"/both.yaml", dir+"/both.yaml"); err != nil {
			t.Error(err)
		}
	}
	write(1)
	w, _ := startWatcher(t, dir)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s := w.Current()
				x, y := s.Match("both", entries("x=1")), s.Match("both", entries("y=1"))
				if x == nil || y == nil || x.Limits[0].RequestsPerUnit != y.Limits[0].RequestsPerUnit {
					t.Errorf("a set mixes two versions: %v %v", summary(x), summary(y))
					return
				}
			}
		}()
	}
	for n := 2; n <= 4; n++ {
		start := time.Now()
		write(n)
		waitFor(t, w, start, "write", func(s *Set) bool {
			r := s.Match("both", entries("x=1"))
			return r != nil && r.Limits[0].RequestsPerUnit == uint32(n)
		})
	}
	close(stop)
	wg.Wait()
}

func TestNewWatcherErrors(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/bad.yaml", "domain: [")
	if w, err := NewWatcher(dir, Options{}, nil); err == nil || w != nil {
		t.Errorf("NewWatcher of a broken set = %v, %v; want an error", w, err)
	}
	writeFile(t, dir+"/bad.yaml", rulesWith("d", 1))
	w, err := NewWatcher(dir, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Current().Version() != 1 || w.Status().Version != 1 || w.Status().LoadedAt.IsZero() {
		t.Errorf("first load: version %d, status %+v", w.Current().Version(), w.Status())
	}
	if w.Watching() {
		t.Error("Watching before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()
	for deadline := time.Now().Add(5 * time.Second); !w.Watching(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Run did not start watching")
		}
	}
	if err := w.Run(ctx); err == nil || !strings.Contains(err.Error(), "already running") {
		t.Errorf("second Run = %v", err)
	}
	if !w.Watching() {
		t.Error("a second Run stopped the first one's watching")
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
	if w.Watching() {
		t.Error("Watching after Run returned")
	}
}

// TestUnchangedFilesAreNotParsedAgain checks that a reload finding the
// files as they were loaded reads them but does not parse them: Run's
// first look and events that change nothing would otherwise cost a large
// rule set's parse, seconds of CPU and a second set's memory.
func TestUnchangedFilesAreNotParsedAgain(t *testing.T) {
	data := largeDomain(10_000)
	path := filepath.Join(t.TempDir(), "large.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := NewWatcher(path, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := w.Current()
	allocated := func(f func()) uint64 {
		before := heapMetric("/gc/heap/allocs:bytes")
		f()
		return heapMetric("/gc/heap/allocs:bytes") - before
	}
	unchanged := allocated(func() { w.reload(false) })
	if w.Current() != first || w.Status().Reloads != 1 {
		t.Fatalf("an unchanged reload replaced the set or was not counted: %+v", w.Status())
	}
	// A parse allocates some 40 times the file; reading it, once.
	if limit := 3 * uint64(len(data)); unchanged > limit {
		t.Errorf("a reload of unchanged files allocated %d bytes; want at most %d (reading them, not parsing)", unchanged, limit)
	}
	changed := append([]byte("# changed\n"), data...)
	if err := os.WriteFile(path, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	parsed := allocated(func() { w.reload(false) })
	if w.Current() == first || parsed < 10*uint64(len(data)) {
		t.Errorf("a changed file: set replaced %v, %d bytes allocated; want a new set, parsed", w.Current() != first, parsed)
	}
}
