package envoy

import (
	"math"

	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Validate reports the first option New refuses as an *option.Error
// ("envoy.Options.NearLimitRatio 2: want a number between 0 and 1"), or
// nil. Zero values are valid: they mean the defaults.
func (o Options) Validate() error {
	switch {
	case o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(o.NearLimitRatio):
		return refused("NearLimitRatio", o.NearLimitRatio, "want a number between 0 and 1")
	case o.FailureMode > rules.FailureUnavailable:
		return refused("FailureMode", o.FailureMode, "want allow, deny or unavailable")
	case o.StoreFailureHeader != "" && !isToken(o.StoreFailureHeader):
		return refused("StoreFailureHeader", o.StoreFailureHeader, "not an HTTP token")
	}
	if _, err := o.Headers.normalize(); err != nil {
		return err
	}
	_, err := o.Bounds.normalize()
	return err
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "envoy.Options", Field: field, Value: v, Want: want}
}
