package rules

import (
	"bytes"
	"crypto/sha256"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/floodgate/floodgate/pkg/limit"
)

// maxDirDepth bounds the directory tree Load descends, which also stops
// symbolic-link loops.
const maxDirDepth = 16

// Load reads a rule file, or the rule files of a directory tree (see
// readDir), validates and compiles them. File names in errors are path
// joined with the file's name inside it, as given. The error, if any, is a
// *LoadError holding every problem found.
func Load(path string, opts Options) (*Set, error) {
	files, probs := readRules(path, opts.IgnoreDotFiles)
	return build(files, opts, probs, sliceBytes)
}

// Parse validates and compiles in-memory rule files (name -> content), in
// the order of their sorted names. The error, if any, is a *LoadError
// holding every problem found.
func Parse(files map[string][]byte, opts Options) (*Set, error) {
	list := make([]ruleFile, 0, len(files))
	for name, data := range files {
		list = append(list, ruleFile{name: name, data: data})
	}
	return build(list, opts, &problems{}, sliceBytes)
}

// ruleFile is one file's name and content.
type ruleFile struct {
	name string
	data []byte
}

// build parses and compiles files after the problems of reading them,
// with slices of about slice bytes of a file's descriptors (sliceBytes; 0
// parses every file whole, which gives the same result with more memory,
// as tests check).
func build(files []ruleFile, opts Options, read *problems, slice int) (*Set, error) {
	sortFiles(files)
	set, probs := compileFiles(files, opts, read, slice)
	if opts.Supports != nil {
		// Also when there are other problems: every problem is told at once.
		probs.errs = append(probs.errs, unsupported(set, opts.Supports)...)
	}
	if len(probs.errs) > 0 {
		sortByPos(probs.errs)
		return nil, &LoadError{Errors: probs.errs}
	}
	set.warnings = probs.warns
	sortByPos(set.warnings)
	set.digest = digest(files)
	set.files = len(files)
	return set, nil
}

// unsupported returns a problem for each limit of set that supports
// refuses, at the limit's position.
func unsupported(set *Set, supports func(limit.Spec) error) []FieldError {
	var errs []FieldError
	for _, r := range set.rules {
		for _, l := range r.Limits {
			if l.Unlimited {
				continue
			}
			if err := supports(l.Spec); err != nil {
				errs = append(errs, FieldError{Pos: l.Pos, Msg: "rule " + r.Path + ": " + err.Error()})
			}
		}
	}
	return errs
}

// compileFiles parses and compiles files, in order, after the problems of
// reading them. Files are parsed in slices of about slice bytes where they
// allow it (stream.go), each top-level descriptor compiled as soon as it is
// parsed. When a file's slices do not parse alone, the compilation so far
// is dropped and done again with that file and those after it parsed
// whole: at most once, since the files before it were sliced without
// trouble.
func compileFiles(files []ruleFile, opts Options, read *problems, slice int) (*Set, *problems) {
	wholeFrom := len(files)
	if slice <= 0 {
		wholeFrom = 0
	}
	for {
		probs := &problems{errs: slices.Clone(read.errs), warns: slices.Clone(read.warns)}
		c := newCompiler(opts, probs)
		redo := -1
		for i, f := range files {
			s := slice
			if i >= wholeFrom {
				s = 0
			}
			if !parseFile(f.name, f.data, probs, c, s) {
				redo = i
				break
			}
		}
		if redo < 0 {
			return c.finish(), probs
		}
		wholeFrom = redo
	}
}

// sortByPos orders problems by file, line and column, keeping the order of
// problems at the same place.
func sortByPos(list []FieldError) {
	sort.SliceStable(list, func(i, j int) bool {
		a, b := list[i].Pos, list[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Column < b.Column
	})
}

// sortFiles orders files by name: the order they are compiled and
// digested in.
func sortFiles(files []ruleFile) {
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
}

// digest identifies the content of a set of (sorted) files, so a reload
// that changes nothing is recognised.
func digest(files []ruleFile) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, f := range files {
		for _, part := range [][]byte{[]byte(f.name), f.data} {
			l := uint64(len(part))
			for i := range n {
				n[i] = byte(l >> (8 * i))
			}
			h.Write(n[:])
			h.Write(part)
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// readRules reads the rule files at path, skipping the names starting
// with "." of a directory tree when ignoreDot.
func readRules(path string, ignoreDot bool) ([]ruleFile, *problems) {
	probs := &problems{}
	fi, err := os.Stat(path)
	if err != nil {
		probs.errorf(Position{File: path}, "", "%v", unwrapPathError(err))
		return nil, probs
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			probs.errorf(Position{File: path}, "", "%v", unwrapPathError(err))
			return nil, probs
		}
		return []ruleFile{{name: path, data: data}}, probs
	}
	// Resolve the links above the tree once, so that a swap of one (a
	// release's "current", a directory that is a link) during the read
	// cannot mix the old target's files with the new one's.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		probs.errorf(Position{File: path}, "", "%v", unwrapPathError(err))
		return nil, probs
	}
	t := &tree{ignoreDot: ignoreDot, probs: probs}
	t.readDir(real, path, 0)
	if len(t.files) == 0 && len(probs.errs) == 0 {
		probs.warnf(Position{File: path}, "", "no rule files: every request is allowed")
	}
	return t.files, probs
}

// tree is the reading of a rule directory tree.
type tree struct {
	ignoreDot bool // skip names starting with "."
	files     []ruleFile
	probs     *problems
}

// readDir appends the rule files of dir and its subdirectories, following
// symbolic links. Files are named under shown, the path dir was given as.
//
// As the reference server, every regular file is read whatever its name,
// names starting with "." included unless ignoreDot
// (RUNTIME_IGNOREDOTFILES=true): one named *.yaml or *.yml is a rule file;
// another is one when it is YAML with a top-level domain (b.conf, a name
// without extension, rules.json), and is skipped with a warning otherwise
// (a README: the reference would refuse the whole load). The entries a
// Kubernetes volume keeps for itself are left out (see outsideTree).
func (t *tree) readDir(dir, shown string, depth int) {
	if depth > maxDirDepth {
		t.probs.errorf(Position{File: shown}, "", "directories nested deeper than %d (a symbolic link loop?)", maxDirDepth)
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.probs.errorf(Position{File: shown}, "", "%v", unwrapPathError(err))
		return
	}
	outside := outsideTree(entries, t.ignoreDot)
	for _, e := range entries {
		name := e.Name()
		if outside(name) {
			continue
		}
		full, named := filepath.Join(dir, name), filepath.Join(shown, name)
		fi, err := os.Stat(full) // follows symbolic links
		if err != nil {
			if e.Type()&fs.ModeSymlink != 0 && os.IsNotExist(err) {
				continue // a dangling link, such as one caught mid-swap
			}
			t.probs.errorf(Position{File: named}, "", "%v", unwrapPathError(err))
			continue
		}
		if fi.IsDir() {
			t.readDir(full, named, depth+1)
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		data, err := os.ReadFile(full)
		if err != nil {
			if os.IsNotExist(err) {
				continue // removed since listed: the next reload sees the result
			}
			t.probs.errorf(Position{File: named}, "", "%v", unwrapPathError(err))
			continue
		}
		if !isRuleFile(name) && !declaresDomain(data) {
			t.probs.warnf(Position{File: named}, "", "skipped: not a rule file (no top-level domain); the reference server would refuse the whole load")
			continue
		}
		t.files = append(t.files, ruleFile{name: named, data: data})
	}
}

// outsideTree returns the test of which names of a directory's entries are
// not part of the rule tree: with ignoreDot, every name starting with "."
// and what is below it, as the reference server skips them with
// RUNTIME_IGNOREDOTFILES=true. Otherwise, in a directory where Kubernetes
// projects a ConfigMap or Secret (it holds "..data"), the names starting
// with "..": its "..data" link and the "..<timestamp>" directories behind
// it, whose files the links beside them lead to, so that each file is read
// once (the reference reads them twice, and fails on the repeated domain).
// Kubernetes refuses such names for the files themselves.
func outsideTree(entries []os.DirEntry, ignoreDot bool) func(name string) bool {
	kubernetes := slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "..data" })
	return func(name string) bool {
		return ignoreDot && strings.HasPrefix(name, ".") || kubernetes && strings.HasPrefix(name, "..")
	}
}

// topLevelDomain finds a rule file's domain key written in block style.
var topLevelDomain = regexp.MustCompile(`(?m)^domain\s*:`)

// declaresDomain reports whether data, a file whose name does not say it
// is YAML, is YAML whose first document is a mapping with a domain field,
// as the reference server would read it: in block style, in flow style or
// as JSON.
func declaresDomain(data []byte) bool {
	if topLevelDomain.Match(data) {
		return true
	}
	var doc yaml.Node
	if yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc) != nil || len(doc.Content) == 0 {
		return false
	}
	root := doc.Content[0]
	for i := 0; root.Kind == yaml.MappingNode && i < len(root.Content); i += 2 {
		if k := root.Content[i]; k.Kind == yaml.ScalarNode && k.Value == "domain" {
			return true
		}
	}
	return false
}

// isRuleFile reports whether a file name has a YAML extension.
func isRuleFile(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".yaml" || ext == ".yml"
}

// unwrapPathError drops the path from an *fs.PathError, which messages
// already name.
func unwrapPathError(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}
