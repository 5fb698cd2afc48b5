package rules

import "strings"

// globMatch reports whether value matches a pattern split at its stars:
// segs[0] must be a prefix, segs[len-1] a suffix, and the runs between them
// must appear in order, without overlapping.
func globMatch(segs []string, value string) bool {
	first, last := segs[0], segs[len(segs)-1]
	if len(value) < len(first)+len(last) ||
		!strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, seg := range segs[1 : len(segs)-1] {
		i := strings.Index(rest, seg)
		if i < 0 {
			return false
		}
		rest = rest[i+len(seg):]
	}
	return true
}
