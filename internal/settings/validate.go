package settings

// validate asks each package whether it takes its options, as its
// constructor will: the checks of a setting's range are its package's,
// declared once there; they run here too so that a bad value stops the
// start (and floodgate check) before anything opens. Parts that are off
// are not asked, except tracing, whose variables the reference reads
// only when on but which floodgate refuses whenever they are wrong.
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
