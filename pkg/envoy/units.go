package envoy

import (
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/pkg/rules"
)

// responseUnits maps a rule unit to the answer's: the two enums number
// their units differently (WEEK came last to the proto).
var responseUnits = [...]pb.RateLimitResponse_RateLimit_Unit{
	rules.Second: pb.RateLimitResponse_RateLimit_SECOND, rules.Minute: pb.RateLimitResponse_RateLimit_MINUTE,
	rules.Hour: pb.RateLimitResponse_RateLimit_HOUR, rules.Day: pb.RateLimitResponse_RateLimit_DAY,
	rules.Week: pb.RateLimitResponse_RateLimit_WEEK, rules.Month: pb.RateLimitResponse_RateLimit_MONTH,
	rules.Year: pb.RateLimitResponse_RateLimit_YEAR,
}

// responseUnit returns the answer's unit of a rule unit, UNKNOWN for none.
func responseUnit(u rules.Unit) pb.RateLimitResponse_RateLimit_Unit {
	if int(u) < len(responseUnits) {
		return responseUnits[u]
	}
	return pb.RateLimitResponse_RateLimit_UNKNOWN
}

// overrideUnits maps the unit of a descriptor's limit override, which has
// no week, to the rule unit.
var overrideUnits = map[typev3.RateLimitUnit]rules.Unit{
	typev3.RateLimitUnit_SECOND: rules.Second, typev3.RateLimitUnit_MINUTE: rules.Minute,
	typev3.RateLimitUnit_HOUR: rules.Hour, typev3.RateLimitUnit_DAY: rules.Day,
	typev3.RateLimitUnit_MONTH: rules.Month, typev3.RateLimitUnit_YEAR: rules.Year,
}

// overrideUnit returns the rule unit of descriptor index's override unit,
// or an error naming the field for UNKNOWN and unknown numbers.
func overrideUnit(u typev3.RateLimitUnit, index int) (rules.Unit, error) {
	if ru, ok := overrideUnits[u]; ok {
		return ru, nil
	}
	return 0, fmt.Errorf("descriptors[%d].limit: unit %v is not a rate-limit unit (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", index, u)
}
