package rules

import (
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Reading scalars as the reference server does, and naming nodes in
// messages.

func isNull(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode {
		return len(n.Content) == 0 || isNull(n.Content[0])
	}
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// str reads a scalar as text. Numbers and booleans are taken as written, as
// the reference server does (value: 200 is the string "200"); null is "".
func (p *parser) str(n *yaml.Node, path string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(p.pos(n), path, "want a string, not %s", describe(n))
		return "", false
	}
	if n.ShortTag() == "!!null" {
		return "", true
	}
	return n.Value, true
}

// yaml11Bools are the plain scalars YAML 1.1 (and so the reference server's
// parser) reads as booleans.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"true": true, "True": true, "TRUE": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false,
	"false": false, "False": false, "FALSE": false, "off": false, "Off": false, "OFF": false,
}

func (p *parser) boolean(n *yaml.Node, path string) bool {
	if n.Kind == yaml.ScalarNode {
		if n.ShortTag() == "!!null" {
			return false
		}
		if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) == 0 {
			if b, ok := yaml11Bools[n.Value]; ok {
				return b
			}
		}
	}
	p.errorf(p.pos(n), path, "want true or false, not %s", describe(n))
	return false
}

// integer reads a whole number in [lo, hi]. Null is 0 and not checked
// against lo (the field counts as not given).
func (p *parser) integer(n *yaml.Node, path string, lo, hi int64) (int64, bool) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		return 0, false
	}
	var u uint64
	var err error
	neg := false
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		s := strings.ReplaceAll(n.Value, "_", "")
		neg = strings.HasPrefix(s, "-")
		u, err = strconv.ParseUint(strings.TrimLeft(s, "+-"), 0, 64)
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float" && isDigits(n.Value):
		// Digits that YAML took for a float: too long for an int64, or a
		// leading zero that is not octal ("08").
		neg = strings.HasPrefix(n.Value, "-")
		u, err = strconv.ParseUint(strings.TrimPrefix(n.Value, "-"), 10, 64)
	default:
		p.errorf(p.pos(n), path, "want a whole number, not %s", describe(n))
		return 0, false
	}
	switch {
	case neg && (err != nil || u > 0):
		p.errorf(p.pos(n), path, "%s is negative (want %d to %d)", n.Value, lo, hi)
	case err != nil || u > uint64(hi):
		p.errorf(p.pos(n), path, "%s is too large (want at most %d)", n.Value, hi)
	case int64(u) < lo:
		p.errorf(p.pos(n), path, "%s is too small (want at least %d)", n.Value, lo)
	default:
		return int64(u), true
	}
	return 0, false
}

func isDigits(s string) bool {
	s = strings.TrimPrefix(s, "-")
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// describe names a node's type and, for scalars, its text, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int", "!!float":
			return "the number " + v
		case "!!bool":
			return "the boolean " + v
		}
		return strconv.Quote(v)
	}
	return "nothing"
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
