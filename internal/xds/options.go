package xds

import (
	"errors"
	"fmt"
)

// Validate reports the first option New refuses, naming the field and
// its value ("xds: Options.RetryInterval -1s: must not be negative"), or
// nil. Zero values are valid: they mean the defaults, except ServerURL,
// which is required.
func (o Options) Validate() error {
	if o.ServerURL == "" {
		return errors.New("xds: Options.ServerURL is empty: give the management server's host:port")
	}
	if err := CheckTarget(o.ServerURL); err != nil {
		return fmt.Errorf("xds: Options.ServerURL %w", err)
	}
	switch {
	case o.RetryInterval < 0:
		return fmt.Errorf("xds: Options.RetryInterval %v: must not be negative", o.RetryInterval)
	case o.BackoffInitial < 0:
		return fmt.Errorf("xds: Options.BackoffInitial %v: must not be negative", o.BackoffInitial)
	case o.BackoffMax < 0:
		return fmt.Errorf("xds: Options.BackoffMax %v: must not be negative", o.BackoffMax)
	case o.BackoffMax > 0 && o.BackoffInitial > o.BackoffMax:
		return fmt.Errorf("xds: Options.BackoffInitial %v and Options.BackoffMax %v: want initial <= max", o.BackoffInitial, o.BackoffMax)
	case o.BackoffRandomFactor < 0 || o.BackoffRandomFactor > 1:
		return fmt.Errorf("xds: Options.BackoffRandomFactor %v: want a number from 0 to 1", o.BackoffRandomFactor)
	case o.StallWarning < 0:
		return fmt.Errorf("xds: Options.StallWarning %v: must not be negative", o.StallWarning)
	case o.MaxMessageBytes < 0:
		return fmt.Errorf("xds: Options.MaxMessageBytes %d: must not be negative", o.MaxMessageBytes)
	}
	return nil
}
