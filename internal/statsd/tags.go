package statsd

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/floodgate/floodgate/pkg/option"
)

// Tag is a key and value added to every stat (Options.Tags).
type Tag struct {
	Key, Value string
}

// ParseTags reads tags written as the reference server's EXTRA_TAGS:
// "key:value" items separated by commas, such as "env:prod,zone:a". An
// empty or blank string has no tags, as the reference reads it; an item
// without exactly one ':' is an error naming it.
func ParseTags(s string) ([]Tag, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var tags []Tag
	for _, item := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(item, ":")
		if !ok || strings.Contains(v, ":") {
			return nil, fmt.Errorf("statsd: tag %q: want key:value", item)
		}
		tags = append(tags, Tag{Key: k, Value: v})
	}
	return tags, nil
}

// normalizeTags returns tags as Options.Tags says they are sent, sorted
// by key as lyft/gostats sorts them.
func normalizeTags(tags []Tag) []Tag {
	byKey := map[string]string{}
	for _, t := range tags {
		if t.Key != "" && t.Value != "" {
			byKey[t.Key] = tagValueReplacer.Replace(t.Value)
		}
	}
	out := make([]Tag, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, Tag{k, byKey[k]})
	}
	return out
}

// checkKeys refuses a tag key of the option field with a character that
// would corrupt the lines.
func checkKeys(field string, tags []Tag) error {
	for _, t := range tags {
		if i := strings.IndexFunc(t.Key, badKeyRune); i >= 0 {
			return &option.Error{Options: "statsd.Options", Field: field, Value: t.Key,
				Want: fmt.Sprintf("%q in a tag key would corrupt the stat lines", t.Key[i:i+1])}
		}
	}
	return nil
}

var tagValueReplacer = strings.NewReplacer(".", "_", ":", "_", "|", "_", "\n", "_", "\r", "_", ",", "_", "#", "_")

func badKeyRune(r rune) bool {
	return strings.ContainsRune(":|,=#", r) || r < ' ' || r == 0x7f
}

// nameTags writes tags into a plain statsd name, as lyft/gostats does:
// ".__env=prod.__zone=a".
func nameTags(tags []Tag) string {
	s := ""
	for _, t := range tags {
		s += ".__" + t.Key + "=" + t.Value
	}
	return s
}

// dogTags writes tags at the end of a DogStatsD line: "|#env:prod,zone:a".
func dogTags(tags []Tag) string {
	if len(tags) == 0 {
		return ""
	}
	kv := make([]string, len(tags))
	for i, t := range tags {
		kv[i] = t.Key + ":" + t.Value
	}
	return "|#" + strings.Join(kv, ",")
}
