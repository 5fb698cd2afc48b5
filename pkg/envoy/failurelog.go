package envoy

import (
	"log/slog"
	"sync"
	"time"
)

// failureLog logs store failures at most once per interval, with the number
// of failures since the previous line, so that a Redis outage under load
// writes a line a second instead of one per request. The exact count is in
// the store_errors_total metric.
type failureLog struct {
	logger   *slog.Logger
	interval time.Duration

	mu     sync.Mutex
	last   time.Time
	unseen int // failures since the last line
}

func newFailureLog(logger *slog.Logger, interval time.Duration) *failureLog {
	return &failureLog{logger: logger, interval: interval}
}

// record counts a failure and logs it if the last line is old enough.
func (f *failureLog) record(err error) {
	now := time.Now()
	f.mu.Lock()
	f.unseen++
	if !f.last.IsZero() && now.Sub(f.last) < f.interval {
		f.mu.Unlock()
		return
	}
	n := f.unseen
	f.unseen = 0
	f.last = now
	f.mu.Unlock()
	f.logger.Warn("rate-limit store failed; applying the failure policy", "err", err, "failures", n)
}
