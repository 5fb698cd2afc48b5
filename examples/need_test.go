package examples_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestNeedInstallsOrSaysHow runs scripts/need, which make deps and make
// demo run before anything else, on a PATH holding only what each case
// allows, with apt-get, sudo and id replaced by scripts that record their
// calls: the real ones would install packages or depend on who runs the
// test. It installs when it may, and otherwise installs nothing and names
// the one command to run.
func TestNeedInstallsOrSaysHow(t *testing.T) {
	script := scriptPath(t, "need")
	for _, tc := range []struct {
		name    string
		args    string // programs:packages asked for
		uid     string
		aptGet  bool   // apt-get present
		sudo    string // "" none, "ok" without password, "password" asks for one
		wantRC  int
		wantOut string // in the output
		wantLog string // the calls of apt-get and sudo, one a line
	}{
		{name: "all there", args: "sh:dash", uid: "1000", wantRC: 0},
		{name: "root installs", args: "sh:dash x:pkg-a y:pkg-a z:pkg-b", uid: "0", aptGet: true, wantRC: 0,
			wantOut: "installing pkg-a pkg-b", wantLog: "apt-get update -qq\napt-get install -y -qq pkg-a pkg-b\n"},
		{name: "sudo without a password installs", args: "x:pkg-a", uid: "1000", aptGet: true, sudo: "ok", wantRC: 0,
			wantLog: "sudo -n true\nsudo apt-get update -qq\napt-get update -qq\nsudo apt-get install -y -qq pkg-a\napt-get install -y -qq pkg-a\n"},
		{name: "sudo asking a password: the command", args: "x:pkg-a z:pkg-b", uid: "1000", aptGet: true, sudo: "password", wantRC: 1,
			wantOut: "missing: pkg-a pkg-b\ninstall them, then run make again: sudo apt-get install -y pkg-a pkg-b", wantLog: "sudo -n true\n"},
		{name: "no sudo: the command", args: "x:pkg-a", uid: "1000", aptGet: true, wantRC: 1,
			wantOut: "sudo apt-get install -y pkg-a"},
		{name: "no apt-get: the packages", args: "x:pkg-a", uid: "0", wantRC: 1,
			wantOut: "install them with your package manager (Debian names: pkg-a)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, log := t.TempDir(), filepath.Join(t.TempDir(), "calls")
			for _, p := range []string{"sh", "awk", "tr"} {
				if err := os.Symlink(harness.Require(t, p), filepath.Join(bin, p)); err != nil {
					t.Fatal(err)
				}
			}
			stub := func(name, body string) {
				if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			stub("id", "echo "+tc.uid)
			if tc.aptGet {
				stub("apt-get", `echo "apt-get $*" >> `+log)
			}
			switch tc.sudo {
			case "ok":
				stub("sudo", `echo "sudo $*" >> `+log+`; [ "$1" = -n ] && exit 0; "$@"`)
			case "password":
				stub("sudo", `echo "sudo $*" >> `+log+`; exit 1`)
			}
			cmd := exec.Command(filepath.Join(bin, "sh"), append([]string{script}, strings.Fields(tc.args)...)...)
			cmd.Env = []string{"PATH=" + bin}
			rc, out := exitAndOutput(t, cmd)
			calls, _ := os.ReadFile(log)
			if rc != tc.wantRC || !strings.Contains(out, tc.wantOut) || string(calls) != tc.wantLog {
				t.Errorf("exit %d, output:\n%s\ncalls:\n%s\nwant exit %d, output with %q, calls:\n%s",
					rc, out, calls, tc.wantRC, tc.wantOut, tc.wantLog)
			}
		})
	}
}

// scriptPath is the absolute path of scripts/name, which the tests run
// from directories of their own.
func scriptPath(t *testing.T, name string) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join(repoRoot, "scripts", name))
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// exitAndOutput runs cmd and returns its exit code and what it printed on
// both streams; a command that could not start fails the test.
func exitAndOutput(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if x, ok := err.(*exec.ExitError); ok {
		return x.ExitCode(), out.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String()
}
