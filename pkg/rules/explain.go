package rules

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Explain looks up a request descriptor as Match does and says why it
// finds what it finds, for people (an -explain flag, a debugging page).
// report has one line per level, the conclusion and the limits that
// apply; reason is the conclusion alone, in one sentence.
func (s *Set) Explain(domain string, entries []Entry) (report, reason string) {
	var b strings.Builder
	fmt.Fprintf(&b, "domain %q, descriptor [", domain)
	for i, ent := range entries {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%s", ent.Key, ent.Value)
	}
	b.WriteString("]\n")
	r, reason := s.explain(&b, domain, entries)
	fmt.Fprintf(&b, "  => %s\n", reason)
	if r != nil {
		for _, l := range r.Limits {
			fmt.Fprintf(&b, "     limit %s (%v) id %s\n", l.Describe(), l.Pos, l.ID)
		}
	}
	return b.String(), reason
}

// explain writes a line per entry looked up, up to the first that matches
// nothing, and returns the rule Match returns and the reason for it.
func (s *Set) explain(b *strings.Builder, domain string, entries []Entry) (*Rule, string) {
	n, ok := s.domains[domain]
	switch {
	case !ok:
		return nil, fmt.Sprintf("no rule file declares domain %q, so nothing is limited", domain)
	case len(entries) == 0:
		return nil, "the descriptor has no entries, so nothing is limited"
	}
	for i, ent := range entries {
		fmt.Fprintf(b, "  %d. %s=%s: ", i+1, ent.Key, ent.Value)
		g, _ := n.children.get(ent.Key)
		if g == nil {
			b.WriteString("no match: " + explainNoKey(n, ent.Key, i) + "\n")
			return nil, fmt.Sprintf("entry %d (%s) matches no rule, so nothing is limited", i+1, ent.Key)
		}
		next, kind := g.lookup(ent.Value)
		if next == nil {
			fmt.Fprintf(b, "no match: key %q has no rule for value %q (%s)\n", ent.Key, ent.Value, g.summary())
			return nil, fmt.Sprintf("entry %d (%s=%s) matches no rule, so nothing is limited", i+1, ent.Key, ent.Value)
		}
		b.WriteString(matchedStep(next.rule, kind) + "\n")
		n = next
	}
	return n.rule, ruleReason(n.rule)
}

// matchedStep explains an entry that matched r's last level as kind.
func matchedStep(r *Rule, kind matchKind) string {
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
		return fmt.Sprintf("key-only %s (%v): key-only rule: no exact value or wildcard matched; each distinct value has its own counter", r.Path, r.Pos)
	}
	return fmt.Sprintf("%s %q %s (%v): %s", kind, lv.value, r.Path, r.Pos, note)
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
	var keys []string
	for k := range t.all() {
		keys = append(keys, strconv.Quote(k))
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
