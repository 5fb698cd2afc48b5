package envoy

import (
	"fmt"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/floodgate/floodgate/pkg/rules"
)

// responseUnit returns the RLS unit of a rule unit. The two enums number
// their units differently (WEEK came last to the proto).
func responseUnit(u rules.Unit) pb.RateLimitResponse_RateLimit_Unit {
	switch u {
	case rules.Second:
		return pb.RateLimitResponse_RateLimit_SECOND
	case rules.Minute:
		return pb.RateLimitResponse_RateLimit_MINUTE
	case rules.Hour:
		return pb.RateLimitResponse_RateLimit_HOUR
	case rules.Day:
		return pb.RateLimitResponse_RateLimit_DAY
	case rules.Week:
		return pb.RateLimitResponse_RateLimit_WEEK
	case rules.Month:
		return pb.RateLimitResponse_RateLimit_MONTH
	case rules.Year:
		return pb.RateLimitResponse_RateLimit_YEAR
	}
	return pb.RateLimitResponse_RateLimit_UNKNOWN
}

// overrideUnit returns the rule unit and its length for the unit of a
// descriptor's limit override (envoy.type.v3.RateLimitUnit, which has no
// week), or an error naming the field for UNKNOWN and unknown numbers.
func overrideUnit(u typev3.RateLimitUnit, index int) (rules.Unit, error) {
	var ru rules.Unit
	switch u {
	case typev3.RateLimitUnit_SECOND:
		ru = rules.Second
	case typev3.RateLimitUnit_MINUTE:
		ru = rules.Minute
	case typev3.RateLimitUnit_HOUR:
		ru = rules.Hour
	case typev3.RateLimitUnit_DAY:
		ru = rules.Day
	case typev3.RateLimitUnit_MONTH:
		ru = rules.Month
	case typev3.RateLimitUnit_YEAR:
		ru = rules.Year
	default:
		return 0, fmt.Errorf("descriptors[%d].limit: unit %v is not a rate-limit unit (want SECOND, MINUTE, HOUR, DAY, MONTH or YEAR)", index, u)
	}
	return ru, nil
}
