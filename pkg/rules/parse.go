package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The fields of each level of a rule file, in the order error messages list
// them; a rate_limit's are in rateLimitTable.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{
		"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"detailed_metric", "quota_mode", "share_threshold", "value_to_metric",
		"metadata", "failure_mode",
	}
	replacesFields = []string{"name"}
)

// fileSink, the compiler, takes a file's domain ("" when invalid), then
// each top-level descriptor as soon as it is parsed, so that the parsed
// form of one need not outlive its compilation.
type fileSink interface {
	domain(name string, pos Position)
	descriptor(d *descDoc)
}

// descDoc is one parsed descriptor, before compilation.
type descDoc struct {
	key, value string
	field      string // e.g. "descriptors[2].descriptors[0]"
	// rule holds the fields a Rule takes as written: the modes, the
	// failure mode, the metadata, and Pos, the descriptor's mapping.
	rule     Rule
	limits   []limitDoc
	children []*descDoc
	share    bool
	sharePos Position
}

// limitDoc is one parsed rate limit and its field path.
type limitDoc struct {
	lim   *Limit
	field string
}

// problems collects the errors and warnings of one load.
type problems struct {
	errs  []FieldError
	warns []FieldError
}

func (p *problems) errorf(pos Position, field, format string, args ...any) {
	p.errs = append(p.errs, FieldError{Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) warnf(pos Position, field, format string, args ...any) {
	p.warns = append(p.warns, FieldError{Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// parser walks the YAML trees of one file.
type parser struct {
	*problems
	file string
	sink fileSink
	// budget bounds the nodes visited, so that aliases cannot expand a
	// small file into a huge tree.
	budget int
	line   int // added to every node's: the line before the slice parsed
	draft  draft
}

func (p *parser) pos(n *yaml.Node) Position {
	return Position{File: p.file, Line: n.Line + p.line, Column: n.Column}
}

// parseFile parses one rule file into sink, in slices of about slice bytes
// where its layout allows (stream.go). It returns false when a slice does
// not parse alone: what sink got is then to be dropped and the file parsed
// again with slice 0, whole, which always returns true.
func parseFile(name string, data []byte, probs *problems, sink fileSink, slice int) bool {
	p := &parser{problems: probs, file: name, sink: sink, budget: 100_000 + 20*len(data)}
	if slice > 0 {
		if lay, ok := cutItems(data, slice); ok {
			// What the header records when it does not parse alone is
			// dropped with the rest.
			root := p.document(lay.header)
			return root != nil && p.root(root, data, lay)
		}
	}
	if root := p.document(data); root != nil {
		p.root(root, nil, nil)
	}
	return true
}

// slices parses the slices lay lists into the sink. It returns false when
// one does not parse alone into the items the cut found.
func (p *parser) slices(data []byte, lay *layout) bool {
	next := 0
	for _, s := range lay.slices {
		var doc yaml.Node
		if yaml.Unmarshal(data[s.start:s.end], &doc) != nil || len(doc.Content) != 1 {
			return false
		}
		list := doc.Content[0]
		if list.Kind != yaml.SequenceNode || len(list.Content) != s.items {
			return false
		}
		p.line = s.line - 1
		if !p.descriptors(list, "descriptors", next, p.sink.descriptor) {
			break // the node budget is spent, as it would be parsed whole
		}
		next += s.items
	}
	return true
}

// document decodes data, which must hold one YAML document, and returns
// its root node, or nil with the problem recorded.
func (p *parser) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node // a DocumentNode
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(Position{File: p.file, Line: 1, Column: 1}, "domain", "missing: the file is empty (want a domain and descriptors)")
			return nil
		}
		p.syntaxError(data, err)
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.syntaxError(data, err)
		return nil
	case !isNull(&extra):
		p.errorf(p.pos(&extra), "", "a rule file holds one YAML document, this is a second one (move it to a file of its own)")
		return nil
	}
	if len(doc.Content) == 0 {
		p.errorf(p.pos(&doc), "domain", "missing: the file is empty (want a domain and descriptors)")
		return nil
	}
	return doc.Content[0]
}

// deref follows aliases to the anchored node, charging the budget. It
// returns nil when the budget is spent.
func (p *parser) deref(n *yaml.Node) *yaml.Node {
	at := n
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	p.budget--
	if p.budget == 0 {
		p.errorf(p.pos(at), "", "the file expands to too many YAML nodes (aliases referring to aliases?)")
	}
	if p.budget <= 0 {
		return nil
	}
	return n
}

// root parses the top-level mapping into the sink: the domain first,
// wherever it is written, then the descriptors, which with lay are its
// slices of data. It returns false when those cannot be used.
func (p *parser) root(n *yaml.Node, data []byte, lay *layout) bool {
	if n = p.deref(n); n == nil {
		return lay == nil
	}
	fields, ok := p.mapping(n, "", "a rule file", rootFields)
	if !ok {
		return lay == nil
	}
	domain, pos := "", p.pos(n)
	if i := fieldAt(fields, "domain"); i >= 0 {
		fl := fields[i]
		domain, _ = p.str(fl.val, "domain")
		pos = p.pos(fl.val)
		if domain == "" && fl.val.Kind == yaml.ScalarNode {
			p.errorf(pos, "domain", "empty (want the domain name Envoy sends)")
		}
	} else {
		p.errorf(pos, "domain", "missing (want the domain name Envoy sends)")
	}
	p.sink.domain(domain, pos)
	for _, fl := range fields {
		switch {
		case fl.name != "descriptors":
		case lay == nil:
			p.descriptors(fl.val, "descriptors", 0, p.sink.descriptor)
		case p.pos(fl.key).Line != lay.line || fl.key.Column != 1 || !isNull(fl.val):
			return false // the cut misread the file
		default:
			return p.slices(data, lay)
		}
	}
	return lay == nil
}

// descriptors parses a list of descriptors, the elements first, first+1,
// ... of the list at path, handing each to emit. It returns false when the
// node budget is spent.
func (p *parser) descriptors(n *yaml.Node, path string, first int, emit func(*descDoc)) bool {
	if isNull(n) {
		return true
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(p.pos(n), path, "want a list of descriptors, not %s", describe(n))
		return true
	}
	return p.each(n.Content, path, first, func(item *yaml.Node, fp string) {
		if d := p.descriptor(item, fp); d != nil {
			emit(d)
		}
	})
}

// each calls f with each element of list, aliases resolved, and its path:
// path indexed from first. It returns false when the node budget is
// spent.
func (p *parser) each(list []*yaml.Node, path string, first int, f func(item *yaml.Node, path string)) bool {
	for i, item := range list {
		if item = p.deref(item); item == nil {
			return false
		}
		f(item, fmt.Sprintf("%s[%d]", path, first+i))
	}
	return true
}

// descriptor parses a descriptor and its children; nil when n is not a
// mapping.
func (p *parser) descriptor(n *yaml.Node, path string) *descDoc {
	fields, ok := p.mapping(n, path, "a descriptor", descriptorFields)
	if !ok {
		return nil
	}
	d := &descDoc{field: path, rule: Rule{Pos: p.pos(n)}}
	for i := range fields {
		p.descriptorField(d, &fields[i], join(path, fields[i].name))
	}
	if fieldAt(fields, "key") < 0 {
		p.errorf(p.pos(n), join(path, "key"), "missing (want the descriptor key Envoy sends, such as remote_address)")
	}
	if d.share && !strings.Contains(d.value, "*") {
		what := fmt.Sprintf("value %q has none", d.value)
		if d.value == "" {
			what = "this descriptor has no value"
		}
		p.errorf(d.sharePos, join(path, "share_threshold"), "needs a wildcard value containing * (%s)", what)
	}
	d.limits = p.descriptorLimits(fields, path)
	return d
}

// descriptorField reads a field of a descriptor into d, but for rate_limit
// and rate_limits (descriptorLimits).
func (p *parser) descriptorField(d *descDoc, fl *field, fp string) {
	switch fl.name {
	case "key":
		d.key, _ = p.str(fl.val, fp)
		if d.key == "" && fl.val.Kind == yaml.ScalarNode {
			p.errorf(p.pos(fl.val), fp, "empty (want the descriptor key Envoy sends, such as remote_address)")
		}
		if strings.Contains(d.key, "*") {
			// The reference server matched a * in "key_value": a rule
			// migrated from it would stop matching without a word.
			p.warnf(p.pos(fl.val), fp, "%q matches only a key written so: wildcards are for values (the reference server matched this * against the whole \"key_value\")", d.key)
		}
	case "value":
		d.value, _ = p.str(fl.val, fp)
	case "descriptors":
		p.descriptors(fl.val, fp, 0, func(c *descDoc) { d.children = append(d.children, c) })
	case "shadow_mode":
		d.rule.ShadowMode = p.boolean(fl.val, fp)
	case "detailed_metric":
		d.rule.DetailedMetric = p.boolean(fl.val, fp)
	case "quota_mode":
		d.rule.QuotaMode = p.boolean(fl.val, fp)
	case "share_threshold":
		d.share, d.sharePos = p.boolean(fl.val, fp), p.pos(fl.val)
	case "value_to_metric":
		d.rule.ValueToMetric = p.boolean(fl.val, fp)
	case "metadata":
		d.rule.Metadata = p.metadata(fl.val, fp)
	case "failure_mode":
		d.rule.FailureMode = p.failureMode(fl.val, fp)
	}
}

// descriptorLimits parses a descriptor's rate_limit or rate_limits, of its
// fields, refusing both at once.
func (p *parser) descriptorLimits(fields []field, path string) []limitDoc {
	one, many := fieldAt(fields, "rate_limit"), fieldAt(fields, "rate_limits")
	switch {
	case one >= 0 && many >= 0:
		p.errorf(p.pos(fields[many].key), join(path, "rate_limits"), "given together with rate_limit (want one of them: rate_limit for one limit, rate_limits for several)")
	case one >= 0 && !isNull(fields[one].val):
		fp := join(path, "rate_limit")
		if l := p.rateLimit(fields[one].val, fp); l != nil {
			return []limitDoc{{lim: l, field: fp}}
		}
	case many >= 0:
		return p.rateLimits(fields[many].val, join(path, "rate_limits"))
	}
	return nil
}

func (p *parser) rateLimits(n *yaml.Node, path string) []limitDoc {
	if n.Kind != yaml.SequenceNode {
		p.errorf(p.pos(n), path, "want a list of rate limits, not %s", describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(p.pos(n), path, "empty (want at least one rate limit, or remove the field)")
		return nil
	}
	var out []limitDoc
	unlimited := false
	p.each(n.Content, path, 0, func(item *yaml.Node, fp string) {
		if l := p.rateLimit(item, fp); l != nil {
			out = append(out, limitDoc{lim: l, field: fp})
			unlimited = unlimited || l.Unlimited
		}
	})
	if unlimited && len(n.Content) > 1 {
		p.errorf(p.pos(n), path, "unlimited: true together with other limits (an unlimited descriptor wants a single rate_limit)")
	}
	return out
}

func (p *parser) replaces(n *yaml.Node, path string) []string {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(p.pos(n), path, "want a list such as [{name: other_limit}], not %s", describe(n))
		return nil
	}
	var out []string
	p.each(n.Content, path, 0, func(item *yaml.Node, fp string) {
		fields, ok := p.mapping(item, fp, "a replaced limit such as {name: other_limit}", replacesFields)
		if !ok {
			return
		}
		name := ""
		for _, fl := range fields {
			name, _ = p.str(fl.val, join(fp, "name"))
		}
		if name == "" {
			p.errorf(p.pos(item), join(fp, "name"), "empty (want the name of the limit to replace)")
			return
		}
		out = append(out, name)
	})
	return out
}

func (p *parser) metadata(n *yaml.Node, path string) map[string]any {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(p.pos(n), path, "want a mapping of names to values, not %s", describe(n))
		return nil
	}
	m, _ := p.metadataValue(n, path, 0).(map[string]any)
	return m
}

// maxMetadataDepth bounds how deep metadata nests.
const maxMetadataDepth = 32

// metadataValue turns a YAML value into what JSON carries, as the reference
// server does: mappings with string keys, lists, strings, float64,
// booleans and null.
func (p *parser) metadataValue(n *yaml.Node, path string, depth int) any {
	n = p.deref(n)
	if n == nil {
		return nil
	}
	if depth > maxMetadataDepth {
		p.errorf(p.pos(n), path, "nested deeper than %d levels", maxMetadataDepth)
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := p.deref(n.Content[i])
			if k == nil {
				break
			}
			if k.Kind != yaml.ScalarNode {
				p.errorf(p.pos(k), path, "a metadata name must be a string, not %s", describe(k))
				continue
			}
			if _, dup := out[k.Value]; dup {
				p.errorf(p.pos(k), join(path, k.Value), "given twice")
				continue
			}
			out[k.Value] = p.metadataValue(n.Content[i+1], join(path, k.Value), depth+1)
		}
		return out
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, c := range n.Content {
			out[i] = p.metadataValue(c, fmt.Sprintf("%s[%d]", path, i), depth+1)
		}
		return out
	}
	switch n.ShortTag() {
	case "!!null":
		return nil
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b
		}
	case "!!int", "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
			return f
		}
	}
	return n.Value
}

func (p *parser) failureMode(n *yaml.Node, path string) FailureMode {
	s, ok := p.str(n, path)
	if !ok || s == "" {
		return FailureDefault
	}
	if i := slices.Index(failureModeNames[1:], s); i >= 0 {
		return FailureMode(i + 1)
	}
	p.errorf(p.pos(n), path, "unknown failure mode %q (want allow, deny or unavailable)", s)
	return FailureDefault
}
