package redislimit_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

// TestQuietLogs: with QuietLogs, go-redis's line about a failed dial goes
// to the given logger at debug level, and not at all above it.
func TestQuietLogs(t *testing.T) {
	var took time.Duration // until the debug line came
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		buf := new(testlog.Buffer)
		redislimit.QuietLogs(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: level})))
		start := time.Now()
		client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
		l, err := redislimit.New(client, redislimit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		hit := limit.Hit{Key: "k", Spec: limit.Spec{Limit: 1, Window: time.Second}, Cost: 1}
		_, _ = l.Evaluate(context.Background(), []limit.Hit{hit}, make([]limit.Decision, 1))
		// go-redis may dial in the background and log once it gives up.
		wait := 2 * time.Second
		if level != slog.LevelDebug {
			wait = 2*took + 200*time.Millisecond
		}
		var got string
		for deadline := start.Add(wait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if got = buf.String(); got != "" {
				break
			}
		}
		took = time.Since(start)
		client.Close()
		if level == slog.LevelDebug && !strings.Contains(got, "level=DEBUG") {
			t.Errorf("debug logger: %q, want go-redis's dial failure at debug level", got)
		}
		if level == slog.LevelInfo && got != "" {
			t.Errorf("info logger: %q, want nothing", got)
		}
	}
	redislimit.QuietLogs(nil)
}

func TestScriptSHA(t *testing.T) {
	sum := sha1.Sum([]byte(redislimit.ScriptSource()))
	if got, want := redislimit.ScriptSHA(), hex.EncodeToString(sum[:]); got != want {
		t.Fatalf("ScriptSHA() = %s, want %s", got, want)
	}
}
