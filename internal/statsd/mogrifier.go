package statsd

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Mogrifier renames the DogStatsD stats whose name Pattern matches to Name,
// and tags them with Tags, as the reference server's DogStatsD mogrifiers
// do: "$0" in Name and in tag values is the whole match, "$1" the first
// submatch, and so on; a "$n" beyond the submatches stays as it is. A
// pattern "^ratelimit\.service\.rate_limit\.(.*)\.(.*)\.(.*)$" with Name
// "ratelimit.service.rate_limit.$3" and tags domain:$1 and key:$2 sends
// one stat per kind tagged by domain and rule.
type Mogrifier struct {
	Pattern *regexp.Regexp
	Name    string
	Tags    []Tag
}

// placeholder is "$0", "$1", … in a mogrifier's name and tag values.
var placeholder = regexp.MustCompile(`\$\d+`)

// mogrify returns the name and tags of the first mogrifier that matches
// name, or name and no tags. It runs once per stat, when it is created.
func mogrify(ms []Mogrifier, name string) (string, []Tag) {
	for _, m := range ms {
		match := m.Pattern.FindStringSubmatch(name)
		if match == nil {
			continue
		}
		expand := func(s string) string {
			return placeholder.ReplaceAllStringFunc(s, func(p string) string {
				if i, err := strconv.Atoi(p[1:]); err == nil && i < len(match) {
					return match[i]
				}
				return p
			})
		}
		tags := make([]Tag, 0, len(m.Tags))
		for _, t := range m.Tags {
			tags = append(tags, Tag{Key: t.Key, Value: mogrifiedValue.Replace(expand(t.Value))})
		}
		return expand(m.Name), tags
	}
	return name, nil
}

// mogrifiedValue cleans what a submatch puts in a tag value of what would
// end the tag or the line.
var mogrifiedValue = strings.NewReplacer(",", "_", "|", "_", "\n", "_", "\r", "_")

// MogrifiersFromEnv reads the mogrifiers that list names, as the
// reference server reads USE_DOG_STATSD_MOGRIFIERS: for each name in the
// comma-separated list, DOG_STATSD_MOGRIFIER_<NAME>_PATTERN (a regular
// expression), _NAME and _TAGS ("key:value,…", as EXTRA_TAGS), read
// through lookup (os.LookupEnv). A missing pattern or name, a pattern that
// does not compile and a tag without a key or value are errors naming the
// variable.
func MogrifiersFromEnv(list string, lookup func(string) (string, bool)) ([]Mogrifier, error) {
	if list == "" {
		return nil, nil
	}
	var ms []Mogrifier
	for _, name := range strings.Split(list, ",") {
		prefix := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name) + "_"
		get := func(field string) string {
			v, _ := lookup(prefix + field)
			return v
		}
		pattern, newName := get("PATTERN"), get("NAME")
		if pattern == "" {
			return nil, fmt.Errorf("statsd: mogrifier %q: %sPATTERN is not set", name, prefix)
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			return nil, fmt.Errorf("statsd: mogrifier %q: %sPATTERN: %w", name, prefix, err)
		}
		if newName == "" {
			return nil, fmt.Errorf("statsd: mogrifier %q: %sNAME is not set", name, prefix)
		}
		tags, err := ParseTags(get("TAGS"))
		if err != nil {
			return nil, fmt.Errorf("statsd: mogrifier %q: %sTAGS: %w", name, prefix, err)
		}
		for _, t := range tags {
			if t.Key == "" || t.Value == "" {
				return nil, fmt.Errorf("statsd: mogrifier %q: %sTAGS: tag %q needs a key and a value", name, prefix, t.Key+":"+t.Value)
			}
		}
		ms = append(ms, Mogrifier{Pattern: re, Name: newName, Tags: tags})
	}
	return ms, nil
}
