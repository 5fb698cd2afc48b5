package harness

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records Require's skip or failure instead
// of ending the test running it.
type recorder struct {
	testing.TB // nil: Require calls only the methods below
	skipped    string
	failed     string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatal(args ...any) {
	r.failed = fmt.Sprint(args...)
	runtime.Goexit()
}

// require runs Require on a recorder in a goroutine of its own, which the
// recorder's Skipf and Fatal end as the testing package's do.
func (r *recorder) require(program string) (path string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		path = Require(r, program)
	}()
	<-done
	return path
}

// pathWith sets PATH, for the rest of t, to a new directory holding an
// executable file for each of programs, and returns the directory.
func pathWith(t *testing.T, programs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, p := range programs {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	return dir
}

// TestRequire: without the processes tag Require skips, naming the tag,
// whether the program is there or not; with it, it returns the program's
// path, or fails with the install hint, and never skips.
func TestRequire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		present bool
	}{{"program on the PATH", true}, {"program missing", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var dir string
			if tc.present {
				dir = pathWith(t, "memcached")
			} else {
				pathWith(t)
			}
			r := &recorder{}
			got := r.require("memcached")
			switch {
			case !Processes:
				if !strings.Contains(r.skipped, "-tags "+Tag) || r.failed != "" {
					t.Errorf("without -tags %s: skipped %q, failed %q; want a skip naming the tag", Tag, r.skipped, r.failed)
				}
			case tc.present:
				if want := filepath.Join(dir, "memcached"); got != want || r.skipped != "" || r.failed != "" {
					t.Errorf("Require = %q (skipped %q, failed %q), want %q", got, r.skipped, r.failed, want)
				}
			default:
				if r.skipped != "" || !strings.Contains(r.failed, InstallHint("memcached")) {
					t.Errorf("skipped %q, failed %q; want a failure with the install hint %q", r.skipped, r.failed, InstallHint("memcached"))
				}
			}
		})
	}
}

// TestFind: a program's variable ($ENVOY_BIN, $REFERENCE_BIN) names it
// when set; a program that is missing, from the PATH or where its
// variable says, is ErrNotFound with its hint.
func TestFind(t *testing.T) {
	dir := pathWith(t, "redis-server")
	envoy, reference := filepath.Join(dir, "my-envoy"), filepath.Join(dir, "service_cmd")
	for _, p := range []string{envoy, reference} {
		if err := os.WriteFile(p, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		program, bin string // bin: the value of the program's variable
		want         string // the path; "" for ErrNotFound
	}{
		{"redis-server", "", filepath.Join(dir, "redis-server")},
		{"memcached", "", ""},
		{"envoy", envoy, envoy},
		{"envoy", filepath.Join(dir, "no-envoy"), ""},
		{"envoy", "", ""},
		{Reference, reference, reference},
		{Reference, filepath.Join(dir, "no-reference"), ""},
		{Reference, "", ""},
		{"no-such-tool", "", ""},
	} {
		t.Setenv("ENVOY_BIN", "")
		t.Setenv("REFERENCE_BIN", "")
		if v := binVars[tc.program]; v != "" {
			t.Setenv(v, tc.bin)
		}
		got, err := Find(tc.program)
		switch {
		case tc.want != "" && (got != tc.want || err != nil):
			t.Errorf("Find(%q) with its variable %q = %q, %v; want %q", tc.program, tc.bin, got, err, tc.want)
		case tc.want == "" && !errors.Is(err, ErrNotFound):
			t.Errorf("Find(%q) with its variable %q = %q, %v; want ErrNotFound", tc.program, tc.bin, got, err)
		case tc.want == "" && InstallHint(tc.program) != "" && !strings.Contains(err.Error(), InstallHint(tc.program)):
			t.Errorf("Find(%q): %v; want the install hint", tc.program, err)
		}
	}
}

// TestModuleRoot: from this package's directory, the root is two levels
// up, and its go.mod declares the module; a go.mod of another module (as
// examples/'s) does not stop the search.
func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Dir(filepath.Dir(wd)); root != want {
		t.Errorf("ModuleRoot() = %q, want %q", root, want)
	}
	for _, tc := range []struct {
		gomod string
		want  bool
	}{
		{"module github.com/floodgate/floodgate\n\ngo 1.25\n", true},
		{"// the server\nmodule github.com/floodgate/floodgate\n", true},
		{"module github.com/floodgate/floodgate/examples\n", false},
		{"go 1.25\n", false},
	} {
		if got := declares([]byte(tc.gomod), modulePath); got != tc.want {
			t.Errorf("declares(%q) = %v, want %v", tc.gomod, got, tc.want)
		}
	}
}
