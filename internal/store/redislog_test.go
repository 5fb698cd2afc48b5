package store

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// TestQuietLogs: with quietRedisLogs, go-redis's line about a failed dial goes
// to the given logger at debug level, and not at all above it.
func TestQuietLogs(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		buf := new(testlog.Buffer)
		h := &countingHandler{Handler: slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level})}
		quietRedisLogs(slog.New(h))
		client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		l, err := redislimit.New(client, redislimit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hit := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 1, Window: time.Second}, Cost: 1}
		_, _ = l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
		// go-redis may dial in the background and log once it gives up:
		// wait until its line is written or dropped.
		for deadline := time.Now().Add(5 * time.Second); h.done.Load() == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%v logger: go-redis logged nothing in 5 s", level)
			}
		}
		client.Close()
		got := buf.String()
		if level == slog.LevelDebug && !strings.Contains(got, "level=DEBUG") {
			t.Errorf("debug logger: %q, want go-redis's dial failure at debug level", got)
		}
		if level == slog.LevelInfo && got != "" {
			t.Errorf("info logger: %q, want nothing", got)
		}
	}
	quietRedisLogs(slog.New(slog.DiscardHandler))
}

// countingHandler counts the records logged through it that are done
// with: written, or dropped for their level.
type countingHandler struct {
	slog.Handler
	done atomic.Int64
}

func (h *countingHandler) Enabled(ctx context.Context, level slog.Level) bool {
	on := h.Handler.Enabled(ctx, level)
	if !on {
		h.done.Add(1)
	}
	return on
}

func (h *countingHandler) Handle(ctx context.Context, r slog.Record) error {
	defer h.done.Add(1)
	return h.Handler.Handle(ctx, r)
}
