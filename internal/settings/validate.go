package settings

// validate asks each package that is on whether it takes its options,
// so that a bad value stops the start (and floodgate check) before
// anything opens; the range checks stay the packages'. Tracing is always
// asked: its variables are refused whenever they are wrong.
func (c *Config) validate() error {
	checks := []func() error{
		c.Store.Validate,
		c.Service.Validate,
		c.Server.Validate,
		c.Tracing.Options.Validate,
	}
	if c.RLQS.On {
		checks = append(checks, c.RLQS.Options.Validate)
	}
	if c.Rules.XDS {
		checks = append(checks, c.Rules.XDSOptions.Validate)
	}
	if c.Statsd.On {
		checks = append(checks, c.Statsd.Options.Validate)
	}
	if c.Capture.Path != "" {
		checks = append(checks, c.Capture.Options.Validate)
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}
