package rules

import (
	"maps"
	"slices"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Options tune how rule files are read and combined.
type Options struct {
	// MergeDomains merges the descriptors of files that declare the same
	// domain (the reference server's MERGE_DOMAIN_CONFIG); without it a
	// repeated domain is an error.
	MergeDomains bool
	// Supports, when not nil, says whether the store can serve a counted
	// limit's Spec. An error is a problem of the load, at the limit and
	// naming its rule, so that a rule the store cannot serve is refused
	// when loaded rather than failing every request it matches.
	Supports func(limit.Spec) error
	// IgnoreDotFiles skips the names starting with "." in a rule directory
	// (the reference server's RUNTIME_IGNOREDOTFILES=true). Without it they
	// are read, but for Kubernetes' own entries in a mounted ConfigMap
	// ("..data" and its targets), whose files are read once, through the
	// links beside them.
	IgnoreDotFiles bool
}

// Set is an immutable compiled rule set, safe for concurrent use.
type Set struct {
	domains  map[string]*node
	rules    []*Rule // every rule, in file order
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
// the one whose path matches every entry, level by level (an exact value
// first, then wildcards in file order, then the key-only descriptor), and
// whose depth is len(entries); nil for none. It does not allocate.
func (s *Set) Match(domain string, entries []Entry) *Rule {
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
		n, _ = g.lookup(entries[i].Value)
	}
	if n == nil {
		return nil
	}
	return n.rule
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

// Domains returns the declared domains, sorted, in a slice of the caller's.
func (s *Set) Domains() []string { return slices.Sorted(maps.Keys(s.domains)) }

// Rules returns every rule, for listings such as /rlconfig: files in the
// order of their names, descriptors in file order, each before its nested
// ones. The Rules are shared and read-only; the slice is the caller's.
func (s *Set) Rules() []*Rule { return append([]*Rule(nil), s.rules...) }

// Files returns the number of rule files the set was compiled from.
func (s *Set) Files() int { return s.files }

// Version is the set's Status.Version in its Watcher or Feed; 0 for a Set
// from Load or Parse.
func (s *Set) Version() uint64 { return s.version }

// LoadedAt is when the set was compiled.
func (s *Set) LoadedAt() time.Time { return s.loadedAt }

// Warnings returns the warnings of the load, in file order: rules that
// are legal but probably not what was meant, or costly. They have the
// shape of errors but did not stop the load.
func (s *Set) Warnings() []FieldError { return append([]FieldError(nil), s.warnings...) }
