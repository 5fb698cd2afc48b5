package envoy

import (
	"fmt"
	"math"

	"github.com/floodgate/floodgate/pkg/rules"
)

// Validate reports the first option New refuses, naming the field and
// its value ("envoy: Options.NearLimitRatio 2: want a number between 0
// and 1"), or nil. Zero values are valid: they mean the defaults.
func (o Options) Validate() error {
	switch {
	case o.NearLimitRatio < 0 || o.NearLimitRatio > 1 || math.IsNaN(o.NearLimitRatio):
		return fmt.Errorf("envoy: Options.NearLimitRatio %v: want a number between 0 and 1", o.NearLimitRatio)
	case o.FailureMode > rules.FailureUnavailable:
		return fmt.Errorf("envoy: Options.FailureMode %v: want allow, deny or unavailable", o.FailureMode)
	case o.StoreFailureHeader != "" && !isToken(o.StoreFailureHeader):
		return fmt.Errorf("envoy: Options.StoreFailureHeader %q: not an HTTP token", o.StoreFailureHeader)
	}
	if _, err := o.Headers.normalize(); err != nil {
		return err
	}
	_, err := o.Bounds.normalize()
	return err
}
