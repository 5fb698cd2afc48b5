package envoy

import (
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/pkg/rules"
)

// responseUnit returns the RLS unit of a rule unit, which rules.Unit
// numbers as the proto does.
func responseUnit(u rules.Unit) pb.RateLimitResponse_RateLimit_Unit {
	return pb.RateLimitResponse_RateLimit_Unit(u)
}

// overrideUnit returns the rule unit for the unit of a descriptor's limit
// override (envoy.type.v3.RateLimitUnit, which has no week), or an error
// naming the field for UNKNOWN and unknown numbers.
func overrideUnit(u typev3.RateLimitUnit, index int) (rules.Unit, error) {
	if u < typev3.RateLimitUnit_SECOND || u > typev3.RateLimitUnit_YEAR {
		return 0, fmt.Errorf("descriptors[%d].limit: unit %v is not a rate-limit unit (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", index, u)
	}
	return rules.Unit(u), nil
}
