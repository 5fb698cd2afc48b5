package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/floodgate/floodgate/internal/buildinfo"
	"github.com/floodgate/floodgate/internal/settings"
)

// replayProgram is the program `floodgate replay` runs (cmd/replay): an
// offline tool, kept out of the server's binary.
const replayProgram = "floodgate-replay"

// runReplay runs replayProgram, next to this binary or else on PATH, with
// args. Where the system allows it (Unix), the program takes this process
// over: its streams, signals and exit status are this process's, as when
// the replay was part of this binary. It returns an exit code only when it
// cannot, or on systems where the program runs as a child.
func runReplay(args []string, env settings.Lookup, stderr io.Writer) int {
	path, err := findReplay()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: replay is the %s program, found neither next to floodgate nor on PATH (%v): build it into floodgate's directory (go build -o %s ./cmd/replay) or one on PATH, or run go run ./cmd/replay\n",
			replayProgram, err, filepath.Join(selfDir(), replayProgram))
		return 1
	}
	code, err := execProgram(path, append([]string{path}, args...), replayEnv(env))
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %s: %v\n", path, err)
		return 1
	}
	return code
}

// findReplay returns the path of an executable replayProgram.
func findReplay() (string, error) {
	if path, err := exec.LookPath(filepath.Join(selfDir(), replayProgram)); err == nil {
		return path, nil
	}
	return exec.LookPath(replayProgram)
}

// selfDir is the directory of this binary, "." when it cannot be told.
func selfDir() string {
	self, err := os.Executable()
	if err != nil {
		return "."
	}
	return filepath.Dir(self)
}

// replayEnv is the environment of the replay: this one, with the garbage
// collector's settings the server takes (applyGCDefault), which the
// replay had when it ran in this binary, and this build
// (buildinfo.ParentEnv).
func replayEnv(env settings.Lookup) []string {
	environ := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, buildinfo.ParentEnv+"=") })
	environ = append(environ, buildinfo.ParentEnv+"="+buildinfo.String())
	s := gcDefaults(env, "/")
	if s.gogc > 0 {
		environ = append(environ, "GOGC="+strconv.Itoa(s.gogc))
	}
	if s.memLimit > 0 {
		environ = append(environ, "GOMEMLIMIT="+strconv.FormatInt(s.memLimit, 10))
	}
	return environ
}
