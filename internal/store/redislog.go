package store

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// quietRedisLogs routes go-redis's own log lines, one per failed dial, to
// l at debug level (nil discards them): the watch reports failures.
// go-redis has one logger per process; call this before making clients.
func quietRedisLogs(l *slog.Logger) {
	redis.SetLogger(debugLog{l})
}

// debugLog is a go-redis logger writing to slog at debug level.
type debugLog struct{ l *slog.Logger }

func (d debugLog) Printf(ctx context.Context, format string, v ...any) {
	if d.l == nil || !d.l.Enabled(ctx, slog.LevelDebug) {
		return
	}
	d.l.DebugContext(ctx, "redis: "+fmt.Sprintf(format, v...))
}
