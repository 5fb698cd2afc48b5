package rules

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// compiler builds a Set a descriptor at a time: it is the fileSink of
// every file of a load, in order.
type compiler struct {
	*problems
	opts     Options
	set      *Set
	domainAt map[string]Position // where each domain was first declared
	names    map[string][]*Limit // named limits per domain, for replaces
	// fields and paths hold the field paths that a warning of finish may
	// name (limits that replace, wildcard and key-only rules), and only
	// those: every rule's would be megabytes in a large set.
	fields map[*Limit]string
	paths  map[*Rule]string

	cur  string // the current file's domain
	root *node  // where its descriptors go; nil when they are dropped
}

func newCompiler(opts Options, probs *problems) *compiler {
	return &compiler{
		problems: probs,
		opts:     opts,
		set:      &Set{domains: map[string]*node{}, loadedAt: time.Now()},
		domainAt: map[string]Position{},
		names:    map[string][]*Limit{},
		fields:   map[*Limit]string{},
		paths:    map[*Rule]string{},
	}
}

// domain starts the next file (fileSink).
func (c *compiler) domain(name string, pos Position) {
	c.cur, c.root = name, nil
	if name == "" {
		return // already reported
	}
	root, ok := c.set.domains[name]
	if ok && !c.opts.MergeDomains {
		c.errorf(pos, "domain", "duplicate domain %q, first declared at %v (one file per domain, or turn on merging of domains)",
			name, c.domainAt[name])
		return
	}
	if !ok {
		root = &node{}
		c.set.domains[name] = root
		c.domainAt[name] = pos
	}
	c.root = root
}

// descriptor compiles a top-level descriptor (fileSink).
func (c *compiler) descriptor(d *descDoc) {
	if c.root != nil {
		c.add(c.cur, c.root, nil, d)
	}
}

// finish checks what needs every file and returns the set.
func (c *compiler) finish() *Set {
	c.checkReplaces()
	for _, root := range c.set.domains {
		c.checkReachable(root)
	}
	return c.set
}

// checkReachable warns about descriptors that can never match because a
// wildcard of only stars, earlier at the same level, matches every value.
func (c *compiler) checkReachable(n *node) {
	for _, g := range n.children.all() {
		c.checkGroup(g)
	}
}

func (c *compiler) checkGroup(g *keyGroup) {
	var all *Rule
	shadowed := func(n *node) {
		if all != nil {
			c.warnf(n.rule.Pos, c.paths[n.rule], "never matched: the wildcard %q at %v matches every value first",
				all.levels[len(all.levels)-1].value, all.Pos)
		}
		c.checkReachable(n)
	}
	for _, w := range g.wildcards {
		shadowed(w.node)
		if all == nil && strings.Join(w.segs, "") == "" {
			all = w.node.rule
		}
	}
	if g.keyOnly != nil {
		shadowed(g.keyOnly)
	}
	for _, n := range g.exact.all() {
		c.checkReachable(n)
	}
}

// add adds d and its children under parent, whose path is levels.
func (c *compiler) add(domain string, parent *node, levels []level, d *descDoc) {
	if d.key == "" {
		return // already reported
	}
	g, _ := parent.children.get(d.key)
	if g == nil {
		g = &keyGroup{}
		parent.children.put(d.key, g)
	}
	lv := level{key: d.key, value: d.value, share: d.share, valueToMetric: d.rule.ValueToMetric}
	switch {
	case d.value == "":
		lv.kind = matchKeyOnly
		lv.dynamic = true
	case strings.Contains(d.value, "*"):
		lv.kind = matchWildcard
		lv.dynamic = !d.share
	default:
		lv.kind = matchExact
	}
	if first := g.existing(lv); first != nil {
		c.errorf(d.rule.Pos, d.field, "duplicate descriptor %s at this level, first at %v (merge the two)",
			describeLevel(lv), first.rule.Pos)
		return
	}
	path := append(levels[:len(levels):len(levels)], lv)
	n := &node{rule: c.rule(domain, path, d)}
	switch lv.kind {
	case matchKeyOnly:
		g.keyOnly = n
	case matchWildcard:
		g.wildcards = append(g.wildcards, wildcard{segs: strings.Split(d.value, "*"), node: n})
	default:
		g.exact.put(d.value, n)
	}
	for _, child := range d.children {
		c.add(domain, n, path, child)
	}
}

// existing returns the node already holding lv's key and value, if any.
func (g *keyGroup) existing(lv level) *node {
	switch lv.kind {
	case matchKeyOnly:
		return g.keyOnly
	case matchWildcard:
		for _, w := range g.wildcards {
			if w.node.rule.levels[len(w.node.rule.levels)-1].value == lv.value {
				return w.node
			}
		}
		return nil
	}
	n, _ := g.exact.get(lv.value)
	return n
}

func describeLevel(lv level) string {
	if lv.kind == matchKeyOnly {
		return fmt.Sprintf("key %q (no value)", lv.key)
	}
	return fmt.Sprintf("key %q value %q", lv.key, lv.value)
}

// rule compiles a descriptor's rule, giving its limits their IDs.
func (c *compiler) rule(domain string, levels []level, d *descDoc) *Rule {
	r := new(Rule) // a copy, so that the set does not keep d
	*r = d.rule
	r.Domain, r.Path, r.levels = domain, rulePath(domain, levels), levels
	if levels[len(levels)-1].kind != matchExact {
		c.paths[r] = d.field
	}
	seen := map[string]limitDoc{}
	for _, ld := range d.limits {
		l := ld.lim
		l.ID = limitID(domain, levels, l)
		if first, dup := seen[l.ID]; dup {
			c.errorf(l.Pos, ld.field, "same algorithm and window as %s (their counters would be one; merge them or change the window)", first.field)
			continue
		}
		seen[l.ID] = ld
		if c.opts.Supports != nil && !l.Unlimited {
			// Whatever the other problems: every problem is told at once.
			if err := c.opts.Supports(l.Spec); err != nil {
				c.errs = append(c.errs, FieldError{Pos: l.Pos, Msg: "rule " + r.Path + ": " + err.Error()})
			}
		}
		if len(l.Replaces) > 0 {
			c.fields[l] = ld.field
		}
		r.Limits = append(r.Limits, l)
		if l.Name != "" {
			c.names[domain] = append(c.names[domain], l)
		}
	}
	c.set.rules = append(c.set.rules, r)
	return r
}

// checkReplaces warns about replaces that name no limit of the domain.
func (c *compiler) checkReplaces() {
	for _, r := range c.set.rules {
		for _, l := range r.Limits {
			for _, name := range l.Replaces {
				if !slices.ContainsFunc(c.names[r.Domain], func(o *Limit) bool { return o.Name == name }) {
					c.warnf(l.Pos, join(c.fields[l], "replaces"), "no limit of domain %q is named %q, so this replaces nothing", r.Domain, name)
				}
			}
		}
	}
}

// rulePath is Rule.Path.
func rulePath(domain string, levels []level) string {
	path := domain
	for _, lv := range levels {
		path += "." + lv.key
		if lv.value != "" {
			path += "_" + lv.value
		}
	}
	return path
}

// limitID is Limit.ID: the domain and each level's key and value,
// length-prefixed ("4:demo/7:api_key=0:"), then "|a=" algorithm, "|w="
// window (a Go duration, or "cal:" unit "@" zone), and "|p=" precision for
// sliding windows; "|unlimited" for unlimited limits. Length prefixes and
// distinct markers make it injective.
func limitID(domain string, levels []level, l *Limit) string {
	b := fmt.Appendf(nil, "%d:%s", len(domain), domain)
	for _, lv := range levels {
		b = fmt.Appendf(b, "/%d:%s=%d:%s", len(lv.key), lv.key, len(lv.value), lv.value)
	}
	if l.Unlimited {
		return string(b) + "|unlimited"
	}
	s := l.Spec
	if s.Calendar == nil {
		b = fmt.Appendf(b, "|a=%s|w=%s", s.Algorithm, s.Window)
	} else {
		b = fmt.Appendf(b, "|a=%s|w=cal:%s@%s", s.Algorithm, l.Unit, s.Calendar)
	}
	if s.Algorithm == limit.SlidingWindow {
		b = fmt.Appendf(b, "|p=%d", s.SubWindows())
	}
	return string(b)
}
