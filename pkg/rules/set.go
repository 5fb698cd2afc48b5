package rules

import (
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Options tune how rule files are combined.
type Options struct {
	// MergeDomains lets several files declare the same domain, whose
	// descriptors are then merged (the reference server's
	// MERGE_DOMAIN_CONFIG). Without it a repeated domain is an error.
	MergeDomains bool
	// Supports, when not nil, says whether the store can serve a limit:
	// it is called with the Spec of every limit but the unlimited ones,
	// and an error makes that limit a problem of the load, at its position
	// and naming its rule ("rule d.k: " and the error), with the load's
	// other problems. Rules the store cannot serve are thus refused when
	// they are loaded, and a reload bringing one keeps the rules in force,
	// rather than every request they match failing.
	Supports func(limit.Spec) error
	// IgnoreDotFiles skips, in a rule directory, every name starting with
	// "." and what is below it (the reference server's
	// RUNTIME_IGNOREDOTFILES=true). Without it such a name is read as any
	// other, as the reference reads it, but for the entries Kubernetes keeps
	// for itself in a mounted ConfigMap ("..data" and what it points to),
	// whose files are read once, through the links beside them.
	IgnoreDotFiles bool
}

// Set is an immutable compiled rule set. It is safe for concurrent use.
type Set struct {
	domains  map[string]*node
	names    []string // domain names, sorted
	rules    []*Rule  // every rule, in file order
	warnings []FieldError
	version  uint64
	loadedAt time.Time
	digest   [32]byte // of the files' names and contents
	files    int      // number of rule files read
}

// node is one descriptor of the compiled tree (or a domain's root).
type node struct {
	rule     *Rule
	children table[*keyGroup] // by entry key
}

// keyGroup holds a node's children for one key, in matching order.
type keyGroup struct {
	exact     table[*node]
	wildcards []wildcard // file order
	keyOnly   *node
}

// wildcard is a value pattern with `*`, split at the stars.
type wildcard struct {
	segs []string // literal runs; len >= 2 (a leading and trailing run, maybe empty)
	node *node
}

// Match returns the rule that applies to a request descriptor of domain:
// the descriptor whose path matches every entry, level by level (an exact
// value first, then wildcards in file order, then the key-only descriptor),
// and whose depth equals len(entries). It returns nil for an unknown domain,
// no match, or a depth mismatch. It does not allocate.
func (s *Set) Match(domain string, entries []Entry) *Rule {
	n := s.find(domain, entries, nil)
	if n == nil {
		return nil
	}
	return n.rule
}

// find walks the tree; visit, when not nil, sees each level's choice.
func (s *Set) find(domain string, entries []Entry, visit func(i int, n *node, kind matchKind)) *node {
	if s == nil || len(entries) == 0 {
		return nil
	}
	n := s.domains[domain]
	for i := range entries {
		if n == nil {
			return nil
		}
		g, _ := n.children.get(entries[i].Key)
		if g == nil {
			return nil
		}
		next, kind := g.lookup(entries[i].Value)
		if visit != nil {
			visit(i, next, kind)
		}
		n = next
	}
	return n
}

// lookup picks the child for value: exact, else the first matching
// wildcard, else key-only.
func (g *keyGroup) lookup(value string) (*node, matchKind) {
	if n, _ := g.exact.get(value); n != nil {
		return n, matchExact
	}
	for i := range g.wildcards {
		if globMatch(g.wildcards[i].segs, value) {
			return g.wildcards[i].node, matchWildcard
		}
	}
	return g.keyOnly, matchKeyOnly
}

// HasDomain reports whether some rule file declares domain.
func (s *Set) HasDomain(domain string) bool {
	_, ok := s.domains[domain]
	return ok
}

// Domains returns the declared domains, sorted. The caller may modify the
// slice.
func (s *Set) Domains() []string { return append([]string(nil), s.names...) }

// Rules returns every rule (every descriptor of every file) for listings
// such as /rlconfig: files in the order of their names, descriptors in file
// order, each before its nested ones. The Rules are shared and read-only;
// the slice is the caller's.
func (s *Set) Rules() []*Rule { return append([]*Rule(nil), s.rules...) }

// Version is the set's number in its Watcher's sequence of rule sets (the
// first load is 1, each good reload that changes the rules adds 1); 0 for a
// Set not loaded by a Watcher.
func (s *Set) Version() uint64 { return s.version }

// LoadedAt is when the set was compiled.
func (s *Set) LoadedAt() time.Time { return s.loadedAt }

// Warnings returns the warnings of the load, in file order: rules that
// are legal but probably not what was meant, or costly. They have the
// shape of errors but did not stop the load.
func (s *Set) Warnings() []FieldError { return append([]FieldError(nil), s.warnings...) }
