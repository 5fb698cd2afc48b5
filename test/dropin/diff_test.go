package dropin

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// difference is a field where two answers differ, by its path ("code"
// for the status code), with both values.
type difference struct{ field, reference, floodgate string }

// fieldsOf lists the differences' fields, in order.
func fieldsOf(diffs []difference) []string {
	var out []string
	for _, d := range diffs {
		out = append(out, d.field)
	}
	return out
}

// details is the values of the differences, for a failure's message.
func details(diffs []difference) string {
	var b strings.Builder
	for _, d := range diffs {
		fmt.Fprintf(&b, "\n    %s: %s, %s", d.field, d.reference, d.floodgate)
	}
	return b.String()
}

// diff lists where b differs from a: the status code, then each field of
// the bodies by its path. A time left in a window (duration_until_reset,
// a reset header) may differ by a second: the servers read the clock a
// moment apart.
func (a answer) diff(b answer, ignore []string) []difference {
	var out []difference
	if a.code != b.code {
		out = append(out, difference{"code", a.code, b.code})
	}
	diffValue("", a.body, b.body, ignore, &out)
	return out
}

func diffValue(path string, a, b any, ignore []string, out *[]difference) {
	switch {
	case reflect.DeepEqual(a, b) || slices.Contains(ignore, path):
		return
	case strings.HasSuffix(path, "durationUntilReset") && withinSecond(strings.TrimSuffix(fmt.Sprint(a), "s"), strings.TrimSuffix(fmt.Sprint(b), "s")):
		return
	}
	am, aMap := a.(map[string]any)
	bm, bMap := b.(map[string]any)
	if aMap && bMap {
		if isResetHeader(am) && am["key"] == bm["key"] && withinSecond(fmt.Sprint(am["value"]), fmt.Sprint(bm["value"])) {
			return
		}
		for _, k := range keys(am, bm) {
			diffValue(path+"."+k, am[k], bm[k], ignore, out)
		}
		return
	}
	al, aList := a.([]any)
	bl, bList := b.([]any)
	if aList && bList && len(al) == len(bl) {
		for i := range al {
			diffValue(fmt.Sprintf("%s[%d]", path, i), al[i], bl[i], ignore, out)
		}
		return
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	*out = append(*out, difference{path, string(ja), string(jb)})
}

// isResetHeader reports whether a header entry of an answer
// ({key, value}) tells the seconds to a window's reset.
func isResetHeader(m map[string]any) bool {
	k, ok := m["key"].(string)
	return ok && strings.Contains(strings.ToLower(k), "reset")
}

// withinSecond reports whether a and b are numbers at most 1 apart.
func withinSecond(a, b string) bool {
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	return errA == nil && errB == nil && x-y <= 1 && y-x <= 1
}

// keys are the keys of a and b, sorted.
func keys[V any](a, b map[string]V) []string {
	both := maps.Clone(a)
	maps.Copy(both, b)
	return slices.Sorted(maps.Keys(both))
}
