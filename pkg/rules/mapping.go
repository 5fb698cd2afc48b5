package rules

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Reading a YAML mapping's fields as the reference server reads them:
// merge keys, fields given twice, and fields unknown or misplaced.

// field is one key: value pair of a mapping.
type field struct {
	name     string
	key, val *yaml.Node
}

// mapping returns the fields of a mapping node, resolving aliases and merge
// keys, and records unknown and non-string keys. A field given twice warns
// and is read as the reference server reads it (see overlay). ok is false
// when n is not a mapping.
func (p *parser) mapping(n *yaml.Node, path, what string, allowed []string) (fields []field, ok bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(p.pos(n), path, "want %s (a mapping), not %s", what, describe(n))
		return nil, false
	}
	var merged []field
	fields = make([]field, 0, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := p.deref(n.Content[i]), p.deref(n.Content[i+1])
		if k == nil || v == nil {
			return fields, true
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(p.pos(k), path, "a field name must be a string, not %s", describe(k))
			continue
		}
		name := k.Value
		if name == "<<" && k.ShortTag() == "!!merge" {
			merged = append(merged, p.mergeFields(v, path, what, allowed)...)
			continue
		}
		if !slices.Contains(allowed, name) {
			p.unknownField(k, v, path, name, allowed)
			continue
		}
		if at := fieldAt(fields, name); at >= 0 {
			first := &fields[at]
			val, how := overlay(first.val, v)
			p.warnf(p.pos(k), join(path, name), "given twice, at lines %d and %d: %s, as the reference server reads it",
				p.pos(first.key).Line, p.pos(k).Line, how)
			*first = field{name: name, key: k, val: val}
			continue
		}
		fields = append(fields, field{name: name, key: k, val: v})
	}
	for _, f := range merged {
		if fieldAt(fields, f.name) < 0 {
			fields = append(fields, f)
		}
	}
	return fields, true
}

// fieldAt returns the index of the field named name, or -1. fields holds
// at most one field per allowed name, so the scan stays short however
// many keys a file repeats.
func fieldAt(fields []field, name string) int {
	return slices.IndexFunc(fields, func(f field) bool { return f.name == name })
}

// overlay is what the reference server makes of a field given as a then
// as b: b, but for two mappings, whose fields it reads one after the
// other, b's winning. how says so, for the warning.
func overlay(a, b *yaml.Node) (val *yaml.Node, how string) {
	if a.Kind != yaml.MappingNode || b.Kind != yaml.MappingNode {
		return b, "the last is read"
	}
	m := *b
	m.Content = append(slices.Clip(a.Content), b.Content...)
	return &m, "the fields of both are read, the later's winning"
}

// mergeFields returns the fields a merge key brings in: a mapping, or a
// sequence of mappings where earlier ones win.
func (p *parser) mergeFields(v *yaml.Node, path, what string, allowed []string) []field {
	switch v.Kind {
	case yaml.MappingNode:
		fs, _ := p.mapping(v, path, what, allowed)
		return fs
	case yaml.SequenceNode:
		var out []field
		for _, item := range v.Content {
			if item = p.deref(item); item == nil {
				break
			}
			out = append(out, p.mergeFields(item, path, what, allowed)...)
		}
		return out
	}
	p.errorf(p.pos(v), path, "a merge key (<<) wants a mapping or a list of mappings, not %s", describe(v))
	return nil
}

// fieldHomes says, for fields misplaced at another level, where they belong.
var fieldHomes = []struct {
	fields []string
	home   string
}{
	{rootFields, "the top level of the file"},
	{descriptorFields, "a descriptor"},
	{rateLimitFields, "a rate_limit"},
}

// referenceKeys are the field names the reference server accepts anywhere
// in a file, ignoring them where they mean nothing.
var referenceKeys = []string{
	"domain", "key", "value", "descriptors", "rate_limit", "unit", "requests_per_unit", "unlimited",
	"shadow_mode", "quota_mode", "name", "replaces", "detailed_metric", "value_to_metric", "share_threshold",
}

// unknownField records a field not allowed at path: an error, but for one
// of referenceKeys, which the reference server ignores (Envoy Gateway
// writes a top-level name): a warning, once its value is checked.
func (p *parser) unknownField(k, v *yaml.Node, path, name string, allowed []string) {
	for _, h := range fieldHomes {
		if !slices.Contains(h.fields, name) {
			continue
		}
		if slices.Contains(referenceKeys, name) {
			p.warnf(p.pos(k), join(path, name), "ignored here, as the reference server ignores it (%s belongs to %s)", name, h.home)
			p.ignoredValue(v, join(path, name))
			return
		}
		p.errorf(p.pos(k), join(path, name), "unknown field here (%s belongs to %s)", name, h.home)
		return
	}
	if s := suggest(name, allowed); s != "" {
		p.errorf(p.pos(k), join(path, name), "unknown field (did you mean %q?)", s)
		return
	}
	p.errorf(p.pos(k), join(path, name), "unknown field (want %s)", orList(allowed))
}

// ignoredValue checks an ignored field's value as the reference server
// checks every value: mappings of referenceKeys, lists of mappings, and
// scalars other than fractions.
func (p *parser) ignoredValue(n *yaml.Node, path string) {
	if n = p.deref(n); n == nil {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := p.deref(n.Content[i])
			switch {
			case k == nil:
				return
			case k.Kind != yaml.ScalarNode:
				p.errorf(p.pos(k), path, "a field name must be a string, not %s", describe(k))
			case !slices.Contains(referenceKeys, k.Value):
				p.errorf(p.pos(k), join(path, k.Value), "unknown field, in an ignored field (the reference server refuses it there too)")
			default:
				p.ignoredValue(n.Content[i+1], join(path, k.Value))
			}
		}
	case yaml.SequenceNode:
		p.each(n.Content, path, 0, func(item *yaml.Node, fp string) {
			if item.Kind != yaml.MappingNode {
				p.errorf(p.pos(item), fp, "want a mapping, not %s (the reference server refuses a list of anything else)", describe(item))
				return
			}
			p.ignoredValue(item, fp)
		})
	case yaml.ScalarNode:
		if n.ShortTag() == "!!float" {
			p.errorf(p.pos(n), path, "want a whole number, a string or a boolean, not %s (the reference server refuses it)", describe(n))
		}
	}
}

// orList writes "a, b or c".
func orList(list []string) string {
	if len(list) == 1 {
		return list[0]
	}
	return strings.Join(list[:len(list)-1], ", ") + " or " + list[len(list)-1]
}

// suggest returns the allowed name closest to a misspelt one, or "" when
// none is close (at most a third of the letters differ).
func suggest(name string, allowed []string) string {
	best, bestD := "", len(name)/3+1
	for _, a := range allowed {
		if d := editDistance(strings.ToLower(name), a); d < bestD {
			best, bestD = a, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
