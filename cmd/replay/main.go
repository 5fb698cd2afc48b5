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
	"syscall"

	"github.com/floodgate/floodgate/internal/replay"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program; it returns the exit code. Warnings go to
// stderr as the server's text log, an error that ends the run as
// "floodgate: ...", as the server reports its own.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code, err := replay.Command(ctx, args, stdout, slog.New(slog.NewTextHandler(stderr, nil)))
	if err != nil {
		fmt.Fprintf(stderr, "floodgate: %v\n", err)
	}
	return code
}
