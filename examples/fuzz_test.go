package examples_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestFuzzScriptTellsRaceFromFinding runs scripts/fuzz, which make fuzz runs
// for every target. Go 1.26's coordinator race (a bare "context deadline
// exceeded" when -fuzztime ends, no input written) cannot be caused on
// demand, so those cases replace go with a script printing what go test
// printed in CI; the last cases run the real go on a target of their own.
// Only the race passes: an input written, or any other reason, fails.
func TestFuzzScriptTellsRaceFromFinding(t *testing.T) {
	script := scriptPath(t, "fuzz")
	const race = "fuzz: elapsed: 3s, execs: 742 (0/sec), new interesting: 1 (total: 94)\n" +
		"--- FAIL: FuzzX (3.05s)\n    context deadline exceeded\nFAIL\n"
	for _, tc := range []struct {
		name    string
		printed string // by the stand-in go test; "" runs the real go
		target  string
		writes  bool // the stand-in writes an input into the target's corpus
		wantRC  int
		wantOut string
	}{
		{name: "passed", printed: "PASS\n", target: "FuzzX", wantRC: 0},
		{name: "the race passes, saying why", printed: race, target: "FuzzX", wantRC: 0,
			wantOut: "go.dev/issue/75804"},
		{name: "the race's line with an input written fails", printed: race, target: "FuzzX", writes: true, wantRC: 1},
		{name: "the target's own deadline error fails", target: "FuzzX", writes: true, wantRC: 1,
			printed: "--- FAIL: FuzzX (0.20s)\n    --- FAIL: FuzzX (0.00s)\n        x_test.go:9: context deadline exceeded\n" +
				"    Failing input written to testdata/fuzz/FuzzX/0123\nFAIL\n"},
		{name: "a failing seed fails", target: "FuzzX", wantRC: 1,
			printed: "--- FAIL: FuzzX (0.00s)\n    --- FAIL: FuzzX/seed#0 (0.00s)\n        x_test.go:9: boom\nFAIL\n"},
		{name: "real go: a target that holds", target: "FuzzHolds", wantRC: 0},
		{name: "real go: a failing seed", target: "FuzzBoom", wantRC: 1, wantOut: "x_test.go"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			goBin, pkg := harness.Require(t, "go"), "./"
			if tc.printed != "" {
				goBin, pkg = standInGo(t, dir, tc.printed, tc.writes, tc.target), "example.com/x"
			} else {
				writeFuzzModule(t, dir)
			}
			cmd := exec.Command(script, pkg, dir, tc.target)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GO="+goBin, "FUZZTIME=50x", "GOWORK=off", "GOFLAGS=-mod=mod")
			rc, out := exitAndOutput(t, cmd)
			if (rc == 0) != (tc.wantRC == 0) || !strings.Contains(out, tc.wantOut) {
				t.Errorf("exit %d, output:\n%s\nwant exit %d, output with %q", rc, out, tc.wantRC, tc.wantOut)
			}
		})
	}
}

// standInGo writes a go command that prints printed and fails unless it
// printed PASS, writing an input into target's corpus first when writes.
func standInGo(t *testing.T, dir, printed string, writes bool, target string) string {
	t.Helper()
	body := "#!/bin/sh\nprintf '%s' '" + printed + "'\n"
	if writes {
		corpus := filepath.Join(dir, "testdata", "fuzz", target)
		body += "mkdir -p " + corpus + " && echo 'go test fuzz v1' > " + corpus + "/0123\n"
	}
	if printed != "PASS\n" {
		body += "exit 1\n"
	}
	bin := filepath.Join(t.TempDir(), "go")
	if err := os.WriteFile(bin, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// writeFuzzModule copies testdata/fuzzmodule, whose targets stay out of
// make fuzz's way there, into dir.
func writeFuzzModule(t *testing.T, dir string) {
	t.Helper()
	if err := os.CopyFS(dir, os.DirFS(filepath.Join("testdata", "fuzzmodule"))); err != nil {
		t.Fatal(err)
	}
}
