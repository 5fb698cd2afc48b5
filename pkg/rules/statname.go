package rules

// NamedByValues reports whether AppendStatName depends on the request's
// values: r has detailed_metric, or value_to_metric on a level that does
// not match one fixed value.
func (r *Rule) NamedByValues() bool {
	if r.DetailedMetric {
		return true
	}
	for i := range r.levels {
		if lv := &r.levels[i]; lv.valueToMetric && lv.kind != matchExact && !lv.share {
			return true
		}
	}
	return false
}

// AppendStatName appends the name the reference server gives the
// statistics of a request descriptor with these entries that matched r.
// Without detailed_metric it is r.Path, but that a level with
// value_to_metric shows the request's value ("shop.client_web-1"). With
// detailed_metric it is the domain and every entry's "key_value", even
// with an empty value. Either way a share_threshold wildcard's level shows
// the wildcard ("files_*"), as its values share one counter.
func (r *Rule) AppendStatName(dst []byte, entries []Entry) []byte {
	dst = append(dst, r.Domain...)
	shared := false
	for i := range r.levels {
		shared = shared || r.levels[i].kind == matchWildcard && r.levels[i].share
	}
	for i, e := range entries {
		dst = append(dst, '.')
		dst = append(dst, e.Key...)
		var lv *level
		if i < len(r.levels) {
			lv = &r.levels[i]
		}
		switch {
		case lv != nil && lv.kind == matchWildcard && lv.share:
			dst = append(dst, '_')
			dst = append(dst, lv.value...)
		case r.DetailedMetric && (!shared || e.Value != ""):
			dst = append(dst, '_')
			dst = append(dst, e.Value...)
		case r.DetailedMetric, lv == nil:
		default:
			dst = appendLevelValue(dst, lv, e.Value)
		}
	}
	return dst
}

// appendLevelValue appends "_" and what a level shows of value without
// detailed_metric: the rule's value, or the request's for value_to_metric;
// nothing for a key-only level.
func appendLevelValue(dst []byte, lv *level, value string) []byte {
	show := lv.value
	if lv.valueToMetric && lv.kind != matchExact {
		show = value
	}
	if show == "" {
		return dst
	}
	dst = append(dst, '_')
	return append(dst, show...)
}
