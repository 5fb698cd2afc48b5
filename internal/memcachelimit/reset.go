package memcachelimit

import (
	"context"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Reset deletes counter key of the fixed window spec in the window holding
// this process's now and in the windows just before and after it, which
// instances with clocks a little apart may count in. Another algorithm is
// an error wrapping ErrUnsupported; a failure wraps ErrStore and names the
// servers that failed.
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

// resetWindows returns the starts of the windows before, at and after now.
func resetWindows(spec limit.Spec, now time.Time) [3]time.Time {
	start, end := spec.WindowAt(now)
	prev, _ := spec.WindowAt(start.Add(-time.Microsecond))
	return [3]time.Time{prev, start, end}
}
