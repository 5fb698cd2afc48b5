package memcachelimit

import (
	"fmt"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// CheckRules reports whether every limit of set can be served by a
// Limiter: it returns nil when all are fixed windows (or unlimited), and
// otherwise a *rules.LoadError with one error per other limit, at the
// limit's position, naming its rule and algorithm, in file order. The rule
// loader calls it so that such rules are refused when they are loaded, and
// a reload that brings one keeps the rules in force, rather than every
// request they match failing.
func CheckRules(set *rules.Set) error {
	var errs []rules.FieldError
	for _, r := range set.Rules() {
		for _, l := range r.Limits {
			if l.Unlimited || l.Spec.Algorithm == limit.FixedWindow {
				continue
			}
			errs = append(errs, rules.FieldError{Pos: l.Pos, Msg: fmt.Sprintf(
				"rule %s: algorithm %v cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis",
				r.Path, l.Spec.Algorithm)})
		}
	}
	if errs == nil {
		return nil
	}
	return &rules.LoadError{Errors: errs}
}
