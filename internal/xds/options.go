package xds

import "github.com/floodgate/floodgate/pkg/option"

// Validate reports the first option New refuses as an *option.Error
// ("xds.Options.RetryInterval -1s: must not be negative"), or nil. Zero
// values are valid: they mean the defaults, except ServerURL, which is
// required.
func (o Options) Validate() error {
	if o.ServerURL == "" {
		return &option.Error{Options: "xds.Options", Field: "ServerURL", Want: "is empty: give the management server's host:port"}
	}
	if err := CheckTarget(o.ServerURL); err != nil {
		return err
	}
	switch {
	case o.RetryInterval < 0:
		return refused("RetryInterval", o.RetryInterval, "must not be negative")
	case o.BackoffInitial < 0:
		return refused("BackoffInitial", o.BackoffInitial, "must not be negative")
	case o.BackoffMax < 0:
		return refused("BackoffMax", o.BackoffMax, "must not be negative")
	case o.BackoffMax > 0 && o.BackoffInitial > o.BackoffMax:
		return backoffUpsideDown(o)
	case o.BackoffRandomFactor < 0 || o.BackoffRandomFactor > 1:
		return refused("BackoffRandomFactor", o.BackoffRandomFactor, "want a number from 0 to 1")
	case o.StallWarning < 0:
		return refused("StallWarning", o.StallWarning, "must not be negative")
	case o.MaxMessageBytes < 0:
		return refused("MaxMessageBytes", o.MaxMessageBytes, "must not be negative")
	}
	return nil
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "xds.Options", Field: field, Value: v, Want: want}
}

// backoffUpsideDown refuses o's BackoffInitial, longer than its
// BackoffMax.
func backoffUpsideDown(o Options) error {
	return &option.Error{Options: "xds.Options", Field: "BackoffInitial", Value: o.BackoffInitial,
		Want: "want at most %s (" + o.BackoffMax.String() + ")", With: []string{"BackoffMax"}}
}
