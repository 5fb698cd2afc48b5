package redislimit

import (
	"context"
	"fmt"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Reset deletes the counter key (a limit.Hit.Key) from Redis, so that its
// next hit finds no state: a fixed window empty, a bucket full, a log
// without entries. A counter is one Redis key whatever its algorithm
// (Key), so one DEL does it, sent by the client to the master of the
// key's slot on a Cluster. It is what an operator asks to unblock a client
// at once; spec is not needed here (Split routes by it).
//
// The call goes to Redis even while the circuit breaker is open, and its
// outcome is not counted by the breaker: an operator's reset is rare and
// asked on purpose, and should say what Redis answers rather than what
// recent requests met. It waits at most Options.Timeout, or ctx's sooner
// deadline. A failure is an error wrapping ErrStore.
func (l *Limiter) Reset(ctx context.Context, key string, _ limit.Spec) error {
	ctx, cancel := limit.Bound(ctx, l.opts.Timeout)
	defer cancel()
	if err := l.client.Del(ctx, Key(l.opts.KeyPrefix, key)).Err(); err != nil {
		return fmt.Errorf("redislimit: reset: %w: %w", ErrStore, err)
	}
	return nil
}

// Reset deletes the counter key from the Redis that holds it under spec
// (the Split's route, PerSecond by default): see Limiter.Reset. The error
// names that Redis.
func (s *Split) Reset(ctx context.Context, key string, spec limit.Spec) error {
	g := b2i(s.route(&spec))
	if err := s.limiters[g].Reset(ctx, key, spec); err != nil {
		return fmt.Errorf("%s: %w", splitNames[g], err)
	}
	return nil
}
