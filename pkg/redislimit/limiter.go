package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/redis/go-redis/v9"
)

// ErrStore reports that Redis could not decide: unreachable, too slow, or
// answering with an error. Every error Evaluate returns because of Redis
// wraps it, so the caller can apply its failure policy with errors.Is.
var ErrStore = errors.New("redislimit: redis failed")

// DefaultTimeout is the deadline of each Redis call when Options.Timeout is 0.
const DefaultTimeout = 50 * time.Millisecond

// Options configures a Limiter. The zero value is usable.
type Options struct {
	// KeyPrefix is prepended to every key (the reference server's
	// CACHE_KEY_PREFIX). It must not contain '{' or '}'.
	KeyPrefix string
	// Timeout is the deadline of each Redis call; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Limiter evaluates limits in Redis. It is safe for concurrent use.
type Limiter struct {
	client redis.UniversalClient
	opts   Options
}

// New returns a Limiter that keeps its counters in client. It does not
// contact Redis.
func New(client redis.UniversalClient, opts Options) (*Limiter, error) {
	if client == nil {
		return nil, errors.New("redislimit: nil client")
	}
	if !validPrefix(opts.KeyPrefix) {
		return nil, fmt.Errorf("redislimit: key prefix %q contains '{' or '}'", opts.KeyPrefix)
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("redislimit: negative timeout %v", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	return &Limiter{client: client, opts: opts}, nil
}

// Evaluate decides hits together, with the same contract as
// limit.Memory.Evaluate: decisions[i] answers hits[i] (len(decisions) must
// equal len(hits)), and if any hit of cost > 0 that is not a refund is
// denied, no hit changes any counter. On error, decisions are undefined and
// nothing was consumed (on Redis Cluster, see the package documentation for
// the window in which a consumption may be visible before it is given back).
func (l *Limiter) Evaluate(ctx context.Context, hits []limit.Hit, decisions []limit.Decision) error {
	if len(decisions) != len(hits) {
		return fmt.Errorf("redislimit: %d decisions for %d hits", len(decisions), len(hits))
	}
	return fmt.Errorf("redislimit: not implemented yet: %w", ErrStore)
}
