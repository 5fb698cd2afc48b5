package envoy

import (
	"log/slog"
	"sync"
	"time"
)

// failureLog logs store failures at most once per interval, with their
// number since the previous line: an outage under load writes a line a
// second, not one per request.
type failureLog struct {
	logger   *slog.Logger
	interval time.Duration
	now      func() time.Time

	mu     sync.Mutex
	last   time.Time
	unseen int // failures since the last line
}

// newFailureLog returns a failureLog writing to logger at most once per
// interval as measured by now.
func newFailureLog(logger *slog.Logger, interval time.Duration, now func() time.Time) *failureLog {
	return &failureLog{logger: logger, interval: interval, now: now}
}

// record counts a failure and logs it if the last line is old enough.
func (f *failureLog) record(err error) {
	now := f.now()
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
