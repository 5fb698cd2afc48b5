package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// replayProgram is the program `floodgate replay` runs (cmd/replay): an
// offline tool, kept out of the server's binary.
const replayProgram = "floodgate-replay"

// runReplay runs replayProgram, next to this binary or else on PATH, with
// args, and returns its exit code.
func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, err := findReplay()
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: replay is the %s program, found neither next to floodgate nor on PATH (%v): build it with go build -o %s ./cmd/replay, or run go run ./cmd/replay\n",
			replayProgram, err, replayProgram)
		return 1
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	// On SIGINT or SIGTERM the replay stops as it would run alone.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	var exit *exec.ExitError
	switch err := cmd.Run(); {
	case errors.As(err, &exit):
		return max(exit.ExitCode(), 1) // -1 when a signal ended it
	case err != nil:
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
		return 1
	}
	return 0
}

// findReplay returns the path of replayProgram.
func findReplay() (string, error) {
	if self, err := os.Executable(); err == nil {
		sibling := filepath.Join(filepath.Dir(self), replayProgram)
		if _, err := os.Stat(sibling); err == nil {
			return sibling, nil
		}
	}
	return exec.LookPath(replayProgram)
}
