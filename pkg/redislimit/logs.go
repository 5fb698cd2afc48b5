package redislimit

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// QuietLogs routes go-redis's own log lines to l at debug level; a nil l
// discards them. go-redis writes one to stderr for every failed dial, so
// while Redis is down it logs once per request; floodgate reports store
// failures itself (errors wrapping ErrStore, and the breaker's state, see
// Limiter.Healthy). go-redis's logger is one per process, so this setting
// is too: call it once at start, before making clients.
func QuietLogs(l *slog.Logger) {
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
