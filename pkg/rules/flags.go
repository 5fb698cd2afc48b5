package rules

// Flags names the settings the rule turns on, as rule files write them, in
// this order: shadow_mode, quota_mode, detailed_metric, value_to_metric,
// then "failure_mode " and the mode when the rule sets one. It returns nil
// for a rule that sets none.
func (r *Rule) Flags() []string {
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{
		{r.ShadowMode, "shadow_mode"}, {r.QuotaMode, "quota_mode"},
		{r.DetailedMetric, "detailed_metric"}, {r.ValueToMetric, "value_to_metric"},
	} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	if r.FailureMode != FailureDefault {
		flags = append(flags, "failure_mode "+r.FailureMode.String())
	}
	return flags
}
