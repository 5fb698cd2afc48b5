package rules

// Explanation says which rule applies to a request descriptor and why,
// level by level. It is for people (a -explain flag, debugging), not for the
// request path.
type Explanation struct {
	Domain  string
	Entries []Entry
	// DomainFound reports whether the domain is declared.
	DomainFound bool
	// Steps has one element per entry that was looked up, in order; it
	// stops at the first entry that matched nothing.
	Steps []ExplainStep
	// Rule is what Match returns: nil when nothing applies.
	Rule *Rule
	// Reason says in words why Rule is nil, or why it limits nothing.
	Reason string
}

// ExplainStep is the lookup of one request entry.
type ExplainStep struct {
	Entry Entry
	// How is "exact", "wildcard", "key-only", or "none" when nothing matched.
	How string
	// Pattern is the rule value that matched ("" for key-only or none).
	Pattern string
	// Rule is the descriptor matched at this level (nil when none).
	Rule *Rule
}

// Explain looks up a request descriptor as Match does and reports each
// level's choice.
func (s *Set) Explain(domain string, entries []Entry) Explanation {
	return Explanation{Domain: domain, Entries: entries}
}

// String prints the explanation, one line per level and a conclusion.
func (e Explanation) String() string { return "" }
