// Command floodgate-replay rehearses an edit of floodgate's rules on
// recorded traffic: internal/replay's Command. It is a program of its own
// so that the server's binary carries none of it; `floodgate replay` runs
// it, found next to floodgate or on PATH. The image and `make build`
// install it as floodgate-replay.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/floodgate/floodgate/internal/buildinfo"
	"github.com/floodgate/floodgate/internal/replay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	// The first signal stops the replay; a second, while the report is
	// still being written (to a slow pipe, say), ends the process.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code. Warnings go to
// stderr as the server's text log, an error that ends the run as
// "floodgate: ...", as the server reports its own.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	if parent, own := os.Getenv(buildinfo.ParentEnv), buildinfo.String(); otherBuild(parent, own) {
		logger.Warn("this floodgate-replay is another build than the floodgate that runs it, and may read rules or decide otherwise: put the floodgate-replay built with floodgate next to it",
			"floodgate", parent, "floodgate_replay", own)
	}
	code, err := replay.Command(ctx, args, stdout, logger)
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
	}
	return code
}

// otherBuild reports whether floodgate's build parent and this program's
// own (buildinfo.String) are known to be of other commits.
func otherBuild(parent, own string) bool {
	a, b := cleanCommit(parent), cleanCommit(own)
	return a != "" && b != "" && a != b
}

// cleanCommit is the commit a build names, or "" when it names none or
// its tree had changes (an untracked file is one): such builds cannot be
// told apart.
func cleanCommit(build string) string {
	_, rest, ok := strings.Cut(build, " commit ")
	commit, _, _ := strings.Cut(rest, " ")
	if !ok || commit == "unknown" || strings.HasSuffix(commit, "+dirty") {
		return ""
	}
	return commit
}
