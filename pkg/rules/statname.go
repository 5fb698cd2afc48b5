package rules

// NamedByValues reports whether the statistics of a request descriptor
// that matched r are named by some of its values (AppendStatName depends
// on them): r has detailed_metric, or a level of its path that does not
// match one fixed value has value_to_metric.
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

// AppendStatName appends to dst the name the reference server gives the
// statistics of a request descriptor with these entries (those given to
// Match) that matched r, after the domain, and returns the extended
// slice. Without detailed_metric it is r.Path, but that a level with
// value_to_metric shows the request's value there ("shop.client_web-1"),
// unless the level is a share_threshold wildcard. With detailed_metric it
// is every entry's "key_value", the "_" written even before an empty
// value, but that a share_threshold wildcard's level shows the wildcard
// ("files_*"): its values share one name, as they share one counter.
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

// appendLevelValue appends "_" and what a level without detailed_metric
// shows of value in a statistics name: the rule's value where it matched
// one, the request's where value_to_metric asks for it, else nothing
// (a key-only level).
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
