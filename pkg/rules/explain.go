package rules

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// explanation says which rule applies to a request descriptor and why,
// level by level.
type explanation struct {
	Domain  string
	Entries []Entry
	Steps   []explainStep // one per entry looked up, up to the first that matched nothing
	Rule    *Rule         // what Match returns
	Reason  string        // why Rule is nil, or what it does, in a sentence
}

// explainStep is the lookup of one request entry: how it matched
// ("exact", "wildcard", "key-only" or "none") and the report's line on it.
type explainStep struct{ How, Line string }

// Explain looks up a request descriptor as Match does and says why it
// finds what it finds, for people (an -explain flag, a debugging page).
// report has one line per level, the conclusion and the limits that
// apply; reason is the conclusion alone, in one sentence.
func (s *Set) Explain(domain string, entries []Entry) (report, reason string) {
	e := s.explain(domain, entries)
	return e.String(), e.Reason
}

func (s *Set) explain(domain string, entries []Entry) explanation {
	e := explanation{Domain: domain, Entries: entries}
	n, ok := s.domains[domain]
	switch {
	case !ok:
		e.Reason = fmt.Sprintf("no rule file declares domain %q, so nothing is limited", domain)
		return e
	case len(entries) == 0:
		e.Reason = "the descriptor has no entries, so nothing is limited"
		return e
	}
	for i, ent := range entries {
		at := fmt.Sprintf("  %d. %s=%s: ", i+1, ent.Key, ent.Value)
		g, _ := n.children.get(ent.Key)
		if g == nil {
			e.Steps = append(e.Steps, explainStep{"none", at + "no match: " + explainNoKey(n, ent.Key, i)})
			e.Reason = fmt.Sprintf("entry %d (%s) matches no rule, so nothing is limited", i+1, ent.Key)
			return e
		}
		next, kind := g.lookup(ent.Value)
		if next == nil {
			note := fmt.Sprintf("key %q has no rule for value %q (%s)", ent.Key, ent.Value, g.summary())
			e.Steps = append(e.Steps, explainStep{"none", at + "no match: " + note})
			e.Reason = fmt.Sprintf("entry %d (%s=%s) matches no rule, so nothing is limited", i+1, ent.Key, ent.Value)
			return e
		}
		e.Steps = append(e.Steps, matchedStep(at, next.rule, kind))
		n = next
	}
	e.Rule = n.rule
	e.Reason = ruleReason(n.rule)
	return e
}

// matchedStep explains an entry that matched r's last level as kind; at
// begins the line.
func matchedStep(at string, r *Rule, kind matchKind) explainStep {
	lv := r.levels[len(r.levels)-1]
	var note string
	switch {
	case kind == matchExact:
		note = "exact value"
	case kind == matchWildcard && lv.dynamic:
		note = "wildcard; each distinct value has its own counter"
	case kind == matchWildcard:
		note = "wildcard with share_threshold; all matching values share one counter"
	default:
		return explainStep{kind.String(), fmt.Sprintf("%skey-only %s (%v): key-only rule: no exact value or wildcard matched; each distinct value has its own counter", at, r.Path, r.Pos)}
	}
	return explainStep{kind.String(), fmt.Sprintf("%s%s %q %s (%v): %s", at, kind, lv.value, r.Path, r.Pos, note)}
}

func ruleReason(r *Rule) string {
	if len(r.Limits) == 0 {
		return fmt.Sprintf("rule %s matches but holds no limit, so the request is not limited", r.Path)
	}
	var parts []string
	for _, l := range r.Limits {
		parts = append(parts, l.Describe())
	}
	reason := fmt.Sprintf("rule %s applies: %s", r.Path, strings.Join(parts, "; "))
	if r.ShadowMode {
		reason += " (shadow mode: counted, never denied)"
	}
	return reason
}

// explainNoKey says why key found no rule below n at level i.
func explainNoKey(n *node, key string, i int) string {
	if n.children.size() == 0 {
		if i == 0 {
			return "the domain has no descriptors"
		}
		return fmt.Sprintf("rule %s has no nested descriptors: a descriptor with more entries than a rule's depth matches nothing", n.rule.Path)
	}
	keys := quotedKeys(&n.children)
	return fmt.Sprintf("no rule for key %q at level %d (keys there: %s)", key, i+1, strings.Join(keys, ", "))
}

// quotedKeys returns t's keys quoted, in order.
func quotedKeys[V any](t *table[V]) []string {
	keys := t.keys()
	for i, k := range keys {
		keys[i] = strconv.Quote(k)
	}
	sort.Strings(keys)
	return keys
}

// summary lists a key group's rule values for messages.
func (g *keyGroup) summary() string {
	var parts []string
	if g.exact.size() > 0 {
		vals := quotedKeys(&g.exact)
		if len(vals) > 10 {
			vals = append(vals[:10], "...")
		}
		parts = append(parts, "exact values "+strings.Join(vals, ", "))
	}
	if len(g.wildcards) > 0 {
		pats := make([]string, len(g.wildcards))
		for i, w := range g.wildcards {
			pats[i] = strconv.Quote(strings.Join(w.segs, "*"))
		}
		parts = append(parts, "wildcards "+strings.Join(pats, ", "))
	}
	parts = append(parts, "no key-only rule")
	return strings.Join(parts, "; ")
}

// String prints the explanation, one line per level and a conclusion.
func (e explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain %q, descriptor [", e.Domain)
	for i, ent := range e.Entries {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%s", ent.Key, ent.Value)
	}
	b.WriteString("]\n")
	for _, st := range e.Steps {
		b.WriteString(st.Line + "\n")
	}
	fmt.Fprintf(&b, "  => %s\n", e.Reason)
	if e.Rule != nil {
		for _, l := range e.Rule.Limits {
			fmt.Fprintf(&b, "     limit %s (%v) id %s\n", l.Describe(), l.Pos, l.ID)
		}
	}
	return b.String()
}

// Describe says what a limit allows in words, such as "10 per second
// (token_bucket, burst 20)" or "100000 per calendar month in
// America/New_York (fixed_window)".
func (l *Limit) Describe() string {
	if l.Unlimited {
		return "unlimited"
	}
	var b strings.Builder
	if l.Name != "" {
		fmt.Fprintf(&b, "%s: ", l.Name)
	}
	fmt.Fprintf(&b, "%d per ", l.RequestsPerUnit)
	switch {
	case l.Spec.Calendar != nil:
		fmt.Fprintf(&b, "calendar %s in %v", l.Unit, l.Spec.Calendar)
	case l.UnitMultiplier > 1:
		fmt.Fprintf(&b, "%d %ss", l.UnitMultiplier, l.Unit)
	default:
		b.WriteString(l.Unit.String())
	}
	fmt.Fprintf(&b, " (%s", l.Spec.Algorithm)
	if l.Spec.Algorithm.HasBurst() {
		fmt.Fprintf(&b, ", burst %d", l.Spec.Capacity())
	}
	if l.Spec.Precision > 1 {
		fmt.Fprintf(&b, ", precision %d", l.Spec.Precision)
	}
	b.WriteByte(')')
	if len(l.Replaces) > 0 {
		fmt.Fprintf(&b, ", replaces %s", strings.Join(l.Replaces, ", "))
	}
	return b.String()
}
