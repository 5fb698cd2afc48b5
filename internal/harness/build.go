package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// modulePath is the floodgate module, whose ./cmd/server Build builds.
const modulePath = "github.com/floodgate/floodgate"

// BuildFlags returns the go build flags Build passes besides -o: those of
// the Dockerfile's build, whose link flags aside (they strip the symbol
// table and stamp the version), so that the tests run the binary the image
// ships; examples/docker_test.go holds the two equal. The tags are the
// Makefile's (vtprotobuf compiles go-control-plane's generated encoders,
// which the server's codec uses for answers) and timetzdata, which embeds
// the time zone database the image lacks.
func BuildFlags() []string {
	return []string{"-trimpath", "-tags", "timetzdata,vtprotobuf"}
}

// BuildEnv returns the variables Build sets for the go command, as the
// Dockerfile does: cgo off, for a static binary.
func BuildEnv() []string { return []string{"CGO_ENABLED=0"} }

// ModuleRoot returns the directory of the floodgate module that holds the
// working directory: the nearest directory, the working directory or one
// of its parents, whose go.mod declares github.com/floodgate/floodgate.
// From examples/, a module of its own inside it, that is examples/'s
// parent.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && declares(data, modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("harness: no go.mod of %s in the working directory or above it: run inside the floodgate repository", modulePath)
		}
		dir = parent
	}
}

// declares reports whether a go.mod's module line names path.
func declares(gomod []byte, path string) bool {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if f := bytes.Fields(sc.Bytes()); len(f) == 2 && string(f[0]) == "module" {
			return string(f[1]) == path
		}
	}
	return false
}

// Build builds the floodgate binary into out with the go command, from the
// module ModuleRoot finds, as the Dockerfile builds it (BuildFlags,
// BuildEnv). It never builds with the race detector, even under go test
// -race: the binary is the subject, not the test, and a race build runs
// several times slower.
func Build(ctx context.Context, out string) error {
	return BuildCommand(ctx, "./cmd/server", out)
}

// ReplayProgram is the name `floodgate replay` looks for, next to floodgate
// or on PATH: cmd/replay's binary.
const ReplayProgram = "floodgate-replay"

// BuildCommand builds the command in pkg, a directory of the module
// ("./cmd/replay"), into out, as Build builds the server.
func BuildCommand(ctx context.Context, pkg, out string) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	args := append(append([]string{"build"}, BuildFlags()...), "-o", out, pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), BuildEnv()...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("harness: %s go %s in %s: %w\n%s", strings.Join(BuildEnv(), " "), strings.Join(args, " "), root, err, b)
	}
	return nil
}

// built is the binary Binary builds once per test binary.
var built struct {
	once sync.Once
	dir  string // removed by Main
	path string
	err  error
}

// mainRunning is set by Main: Binary refuses to build when nothing would
// remove the binary.
var mainRunning atomic.Bool

// Main runs the tests of m, removes the binary Binary built, and returns
// m.Run's exit code. A package whose tests call Binary, Start or Run calls
// it from its TestMain: os.Exit(harness.Main(m)). It builds nothing
// itself: a test binary whose tests all skip (no Tag) never runs go build.
func Main(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	return code
}

// Binary returns the floodgate binary, built by Build on the first call
// of the test binary into a temporary directory, which Main removes, with
// ReplayProgram next to it for `floodgate replay`. It
// requires the processes tier and the go command (see Require), and fails
// t when the build fails or when TestMain does not call Main.
func Binary(t testing.TB) string {
	t.Helper()
	require(t, "floodgate (built with go build)", "go")
	if !mainRunning.Load() {
		t.Fatal("harness.Binary: the package's TestMain must call harness.Main, which removes the binary when the tests end")
	}
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "floodgate-harness-")
		if built.err != nil {
			return
		}
		built.path = filepath.Join(built.dir, "floodgate")
		if built.err = Build(context.Background(), built.path); built.err == nil {
			built.err = BuildCommand(context.Background(), "./cmd/replay", filepath.Join(built.dir, ReplayProgram))
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// errNoBinary is StartFloodgate's answer to Options without Bin.
var errNoBinary = errors.New("harness: Options.Bin is empty: build the binary first (Build)")
