package memcachelimit

import (
	"fmt"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Supports returns nil if a Limiter can decide limits of spec (any fixed
// window), else an error naming the algorithm and what to do instead. The
// rule loader (rules.Options.Supports) refuses such rules with it, at
// their position, rather than each request failing with ErrUnsupported.
func Supports(spec limit.Spec) error {
	if spec.Algorithm == limit.FixedWindow {
		return nil
	}
	return fmt.Errorf("algorithm %v cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis", spec.Algorithm)
}
