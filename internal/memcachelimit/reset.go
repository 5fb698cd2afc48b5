package memcachelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Reset deletes the counter key (a limit.Hit.Key) of a fixed window spec,
// so that its next hit finds the window empty: what an operator asks to
// unblock a client at once. A counter is one Memcached key per window
// (AppendKey), so the key of the window holding this process's now is
// deleted, and with it those of the window before and the window after:
// other instances place hits in windows by their own clocks, and one a
// little behind or ahead near a boundary would otherwise go on counting
// in a window the reset left (see the package documentation, Time). The
// keys go to their servers in one round trip each, concurrently.
//
// Another algorithm is an error wrapping ErrUnsupported, and Memcached is
// not called. The call waits at most Options.Timeout, or ctx's sooner
// deadline; a failure is an error wrapping ErrStore that names the
// servers that failed (the keys of the others are deleted).
func (l *Limiter) Reset(ctx context.Context, key string, spec limit.Spec) error {
	if spec.Algorithm != limit.FixedWindow {
		return fmt.Errorf("memcachelimit: reset: %w: %v", ErrUnsupported, spec.Algorithm)
	}
	if err := (limit.Hit{Key: key, Spec: spec}).Validate(); err != nil {
		return fmt.Errorf("memcachelimit: reset: %w", err)
	}
	ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
	defer cancel()
	servers := l.pool.list()
	var buf []byte
	var cmds []*command
	for _, start := range resetWindows(spec, l.opts.Now()) {
		buf = AppendKey(buf[:0], l.opts.KeyPrefix, start.UnixMicro(), key)
		k := string(buf)
		cmds = append(cmds, &command{kind: cmdDelete, key: k, srv: pick(servers, k)})
	}
	if err := l.pool.runAll(ctx, cmds); err != nil {
		err = fmt.Errorf("memcachelimit: reset: %w: %w", ErrStore, err)
		l.failed(ctx, err)
		return err
	}
	return nil
}

// resetWindows returns the starts of the window holding now and of the
// windows just before and after it, calendar windows included.
func resetWindows(spec limit.Spec, now time.Time) [3]time.Time {
	start, end := spec.WindowAt(now)
	prev, _ := spec.WindowAt(start.Add(-time.Microsecond))
	return [3]time.Time{prev, start, end}
}
