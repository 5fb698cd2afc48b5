package store

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// quietRedisLogs routes go-redis's own log lines to l at debug level; a
// nil l discards them. go-redis writes one to stderr for every failed
// dial, so while Redis is down it would log once per request; the store
// reports failures itself. go-redis's logger is one per process: this is
// called once per opening, before making clients.
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
