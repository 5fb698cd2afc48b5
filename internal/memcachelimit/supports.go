package memcachelimit

import (
	"fmt"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Supports reports whether a Limiter can decide limits of spec: nil for a
// fixed window (calendar windows and blocking limits included), and
// otherwise an error naming the algorithm and what to do instead. The rule
// loader takes it (rules.Options.Supports) so that such rules are refused
// when they are loaded, at their position, rather than every request they
// match failing with ErrUnsupported.
func Supports(spec limit.Spec) error {
	if spec.Algorithm == limit.FixedWindow {
		return nil
	}
	return fmt.Errorf("algorithm %v cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis", spec.Algorithm)
}
