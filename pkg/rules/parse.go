package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// The fields of each level of a rule file, in the order error messages list
// them (a rate_limit's are in rateLimitTable). Unknown fields are errors, as
// in the reference server.
var (
	rootFields       = []string{"domain", "descriptors"}
	descriptorFields = []string{
		"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode",
		"detailed_metric", "quota_mode", "share_threshold", "value_to_metric",
		"metadata", "failure_mode",
	}
	replacesFields = []string{"name"}
)

// fileDoc is one parsed rule file.
type fileDoc struct {
	name   string
	domain string
	pos    Position // of the domain value, or the document
	descs  []*descDoc
}

// descDoc is one parsed descriptor, before compilation.
type descDoc struct {
	key, value    string
	field         string   // e.g. "descriptors[2].descriptors[0]"
	pos           Position // of the descriptor's mapping
	limits        []limitDoc
	children      []*descDoc
	shadowMode    bool
	detailed      bool
	quotaMode     bool
	share         bool
	sharePos      Position
	valueToMetric bool
	failureMode   FailureMode
	metadata      map[string]any
}

// limitDoc is one parsed rate limit with where it was written.
type limitDoc struct {
	lim   *Limit
	field string
}

// problems collects the errors and warnings of one load.
type problems struct {
	errs  []FieldError
	warns []Warning
}

func (p *problems) errorf(pos Position, field, format string, args ...any) {
	p.errs = append(p.errs, FieldError{Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
}

func (p *problems) warnf(pos Position, field, format string, args ...any) {
	p.warns = append(p.warns, Warning{Pos: pos, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// parser walks the YAML tree of one file.
type parser struct {
	*problems
	file string
	// budget bounds the nodes visited, so aliases that expand a small file
	// into a huge tree are refused instead of exhausting memory and time.
	budget int
}

func (p *parser) pos(n *yaml.Node) Position {
	return Position{File: p.file, Line: n.Line, Column: n.Column}
}

// parseFile parses one rule file. It returns nil when the file is unusable
// (its errors are recorded).
func parseFile(name string, data []byte, probs *problems) *fileDoc {
	p := &parser{problems: probs, file: name, budget: 100_000 + 20*len(data)}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(Position{File: name, Line: 1, Column: 1}, "domain", "missing: the file is empty (want a domain and descriptors)")
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
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.errorf(p.pos(root), "domain", "missing: the file is empty (want a domain and descriptors)")
			return nil
		}
		root = root.Content[0]
	}
	return p.root(root)
}

// yamlLine finds the line number in a yaml.v3 error message.
func yamlLine(msg string) (line int, rest string, ok bool) {
	const marker = "line "
	i := strings.Index(msg, marker)
	if i < 0 {
		return 0, msg, false
	}
	j := i + len(marker)
	k := j
	for k < len(msg) && msg[k] >= '0' && msg[k] <= '9' {
		k++
	}
	n, err := strconv.Atoi(msg[j:k])
	if err != nil {
		return 0, msg, false
	}
	return n, strings.TrimPrefix(strings.TrimSpace(msg[k:]), ": "), true
}

// syntaxError records a YAML syntax error. yaml.v3 reports the line where
// the enclosing block starts; the first line at which a prefix of the file
// stops parsing is where the problem is, and is reported instead.
func (p *parser) syntaxError(data []byte, err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line, rest, ok := yamlLine(msg)
	if !ok {
		p.errorf(badBytePos(p.file, data), "", "YAML syntax: %s", msg)
		return
	}
	if at := firstFailingLine(data, line); at > line {
		rest += fmt.Sprintf(" (in the block from line %d)", line)
		line = at
	}
	p.errorf(Position{File: p.file, Line: line, Column: indentOf(data, line) + 1}, "", "YAML syntax: %s", rest)
}

// firstFailingLine returns the smallest n >= from such that the first n
// lines of data do not parse, by bisection, or from when none is found.
func firstFailingLine(data []byte, from int) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	fails := func(n int) bool {
		var v yaml.Node
		return yaml.Unmarshal(bytes.Join(lines[:n], nil), &v) != nil
	}
	lo, hi := from, len(lines)
	if lo < 1 || lo > hi || !fails(hi) {
		return from
	}
	for lo < hi {
		mid := (lo + hi) / 2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// indentOf returns the number of leading spaces of line n (from 1) of data.
func indentOf(data []byte, n int) int {
	lines := bytes.Split(data, []byte("\n"))
	if n < 1 || n > len(lines) {
		return 0
	}
	l := lines[n-1]
	return len(l) - len(bytes.TrimLeft(l, " "))
}

// badBytePos returns the position of the first invalid UTF-8 sequence or
// control character of data, or 1:1 when there is none.
func badBytePos(file string, data []byte) Position {
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		if (r == utf8.RuneError && size <= 1) || (r < 0x20 && r != '\n' && r != '\r' && r != '\t') || r == 0x7f {
			return Position{File: file, Line: line, Column: col}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		i += size
	}
	return Position{File: file, Line: 1, Column: 1}
}

func isNull(n *yaml.Node) bool {
	if n.Kind == yaml.DocumentNode {
		return len(n.Content) == 0 || isNull(n.Content[0])
	}
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
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

// field is one key: value pair of a mapping.
type field struct {
	name     string
	key, val *yaml.Node
}

// mapping returns the fields of a mapping node, resolving aliases and merge
// keys (<<), and records unknown, repeated or non-string keys. ok is false
// when n is not a mapping.
func (p *parser) mapping(n *yaml.Node, path, what string, allowed []string) (fields []field, ok bool) {
	if n.Kind != yaml.MappingNode {
		p.errorf(p.pos(n), path, "want %s (a mapping), not %s", what, describe(n))
		return nil, false
	}
	seen := map[string]*yaml.Node{}
	var merged []field
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
		if first, dup := seen[name]; dup {
			p.errorf(p.pos(k), join(path, name), "given twice (first at line %d)", first.Line)
			continue
		}
		seen[name] = k
		if !contains(allowed, name) {
			p.unknownField(k, path, name, allowed)
			continue
		}
		fields = append(fields, field{name: name, key: k, val: v})
	}
	for _, f := range merged {
		if _, dup := seen[f.name]; !dup {
			seen[f.name] = f.key
			fields = append(fields, f)
		}
	}
	return fields, true
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

func (p *parser) unknownField(k *yaml.Node, path, name string, allowed []string) {
	for _, h := range fieldHomes {
		if contains(h.fields, name) {
			p.errorf(p.pos(k), join(path, name), "unknown field here (%s belongs to %s)", name, h.home)
			return
		}
	}
	if s := suggest(name, allowed); s != "" {
		p.errorf(p.pos(k), join(path, name), "unknown field (did you mean %q?)", s)
		return
	}
	p.errorf(p.pos(k), join(path, name), "unknown field (want %s)", orList(allowed))
}

// root parses the top-level mapping.
func (p *parser) root(n *yaml.Node) *fileDoc {
	if n = p.deref(n); n == nil {
		return nil
	}
	fields, ok := p.mapping(n, "", "a rule file", rootFields)
	if !ok {
		return nil
	}
	f := &fileDoc{name: p.file, pos: p.pos(n)}
	hasDomain := false
	for _, fl := range fields {
		switch fl.name {
		case "domain":
			hasDomain = true
			f.domain, _ = p.str(fl.val, "domain")
			f.pos = p.pos(fl.val)
			if f.domain == "" && fl.val.Kind == yaml.ScalarNode {
				p.errorf(p.pos(fl.val), "domain", "empty (want the domain name Envoy sends)")
			}
		case "descriptors":
			f.descs = p.descriptors(fl.val, "descriptors")
		}
	}
	if !hasDomain {
		p.errorf(p.pos(n), "domain", "missing (want the domain name Envoy sends)")
	}
	return f
}

// descriptors parses a list of descriptors.
func (p *parser) descriptors(n *yaml.Node, path string) []*descDoc {
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(p.pos(n), path, "want a list of descriptors, not %s", describe(n))
		return nil
	}
	out := make([]*descDoc, 0, len(n.Content))
	for i, item := range n.Content {
		if item = p.deref(item); item == nil {
			break
		}
		if d := p.descriptor(item, fmt.Sprintf("%s[%d]", path, i)); d != nil {
			out = append(out, d)
		}
	}
	return out
}

// descriptor parses one descriptor and its children. It returns nil when
// n is not a mapping.
func (p *parser) descriptor(n *yaml.Node, path string) *descDoc {
	fields, ok := p.mapping(n, path, "a descriptor", descriptorFields)
	if !ok {
		return nil
	}
	d := &descDoc{field: path, pos: p.pos(n)}
	given := map[string]*field{}
	for i := range fields {
		fl := &fields[i]
		given[fl.name] = fl
		p.descriptorField(d, fl, join(path, fl.name))
	}
	if given["key"] == nil {
		p.errorf(p.pos(n), join(path, "key"), "missing (want the descriptor key Envoy sends, such as remote_address)")
	}
	if d.share && !strings.Contains(d.value, "*") {
		what := fmt.Sprintf("value %q has none", d.value)
		if d.value == "" {
			what = "this descriptor has no value"
		}
		p.errorf(d.sharePos, join(path, "share_threshold"), "needs a wildcard value containing * (%s)", what)
	}
	d.limits = p.descriptorLimits(given["rate_limit"], given["rate_limits"], path)
	return d
}

// descriptorField reads one field of a descriptor into d; rate_limit and
// rate_limits are read by descriptorLimits.
func (p *parser) descriptorField(d *descDoc, fl *field, fp string) {
	switch fl.name {
	case "key":
		d.key, _ = p.str(fl.val, fp)
		if d.key == "" && fl.val.Kind == yaml.ScalarNode {
			p.errorf(p.pos(fl.val), fp, "empty (want the descriptor key Envoy sends, such as remote_address)")
		}
	case "value":
		d.value, _ = p.str(fl.val, fp)
	case "descriptors":
		d.children = p.descriptors(fl.val, fp)
	case "shadow_mode":
		d.shadowMode = p.boolean(fl.val, fp)
	case "detailed_metric":
		d.detailed = p.boolean(fl.val, fp)
	case "quota_mode":
		d.quotaMode = p.boolean(fl.val, fp)
	case "share_threshold":
		d.share, d.sharePos = p.boolean(fl.val, fp), p.pos(fl.val)
	case "value_to_metric":
		d.valueToMetric = p.boolean(fl.val, fp)
	case "metadata":
		d.metadata = p.metadata(fl.val, fp)
	case "failure_mode":
		d.failureMode = p.failureMode(fl.val, fp)
	}
}

// descriptorLimits parses a descriptor's rate_limit or rate_limits (nil
// when not given), refusing both at once.
func (p *parser) descriptorLimits(rateLimit, rateLimits *field, path string) []limitDoc {
	switch {
	case rateLimit != nil && rateLimits != nil:
		p.errorf(p.pos(rateLimits.key), join(path, "rate_limits"), "given together with rate_limit (want one of them: rate_limit for one limit, rate_limits for several)")
	case rateLimit != nil && !isNull(rateLimit.val):
		fp := join(path, "rate_limit")
		if l := p.rateLimit(rateLimit.val, fp); l != nil {
			return []limitDoc{{lim: l, field: fp}}
		}
	case rateLimits != nil:
		return p.rateLimits(rateLimits.val, join(path, "rate_limits"))
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
	for i, item := range n.Content {
		if item = p.deref(item); item == nil {
			break
		}
		fp := fmt.Sprintf("%s[%d]", path, i)
		if l := p.rateLimit(item, fp); l != nil {
			out = append(out, limitDoc{lim: l, field: fp})
			unlimited = unlimited || l.Unlimited
		}
	}
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
	if len(n.Content) == 0 {
		p.warnf(p.pos(n), path, "empty: replaces nothing")
	}
	var out []string
	for i, item := range n.Content {
		if item = p.deref(item); item == nil {
			break
		}
		fp := fmt.Sprintf("%s[%d]", path, i)
		fields, ok := p.mapping(item, fp, "a replaced limit such as {name: other_limit}", replacesFields)
		if !ok {
			continue
		}
		name := ""
		for _, fl := range fields {
			name, _ = p.str(fl.val, join(fp, "name"))
		}
		if name == "" {
			p.errorf(p.pos(item), join(fp, "name"), "empty (want the name of the limit to replace)")
			continue
		}
		out = append(out, name)
	}
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

// maxMetadataDepth bounds how deep metadata nests, so that a hostile file
// cannot make the answer's dynamic metadata, or this walk, unbounded.
const maxMetadataDepth = 32

// metadataValue turns a YAML value into what JSON and protobuf's Struct can
// carry, as the reference server's YAML decoding does: mappings with string
// keys, lists, strings, numbers (float64), booleans and null.
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
	for i, name := range failureModeNames[1:] {
		if name == s {
			return FailureMode(i + 1)
		}
	}
	p.errorf(p.pos(n), path, "unknown failure mode %q (want allow, deny or unavailable)", s)
	return FailureDefault
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
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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
		case "!!int":
			return "the number " + v
		case "!!float":
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

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
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
