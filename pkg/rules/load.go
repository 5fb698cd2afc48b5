package rules

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxDirDepth bounds the directory tree Load descends, which also stops
// symbolic-link loops.
const maxDirDepth = 16

// Load reads, validates and compiles a rule file, or the rule files of a
// directory tree (see readDir). Errors name files under path as given. The
// error is a *LoadError holding every problem found.
func Load(path string, opts Options) (*Set, error) {
	files, probs := readRules(path, opts.IgnoreDotFiles)
	return build(files, opts, probs, sliceBytes)
}

// Parse validates and compiles rule files given by name, in the order of
// their names. The error is a *LoadError holding every problem found.
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

// build parses and compiles files after the problems of reading them, in
// slices of about slice bytes (0 parses files whole, for tests).
func build(files []ruleFile, opts Options, read *problems, slice int) (*Set, error) {
	sortFiles(files)
	set, probs := compileFiles(files, opts, read, slice)
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

// compileFiles parses and compiles files in order, in slices where they
// allow it (stream.go). When a file's slices do not parse alone, it starts
// again with that file and those after it parsed whole: at most once.
func compileFiles(files []ruleFile, opts Options, read *problems, slice int) (*Set, *problems) {
	wholeFrom := len(files)
attempt:
	for {
		probs := &problems{errs: slices.Clone(read.errs), warns: slices.Clone(read.warns)}
		c := newCompiler(opts, probs)
		for i, f := range files {
			s := slice
			if i >= wholeFrom {
				s = 0
			}
			if !parseFile(f.name, f.data, probs, c, s) {
				wholeFrom = i
				continue attempt
			}
		}
		return c.finish(), probs
	}
}

// sortByPos orders problems by file, line and column, keeping the order of
// problems at the same place.
func sortByPos(list []FieldError) {
	slices.SortStableFunc(list, func(a, b FieldError) int {
		return cmp.Or(strings.Compare(a.Pos.File, b.Pos.File), cmp.Compare(a.Pos.Line, b.Pos.Line), cmp.Compare(a.Pos.Column, b.Pos.Column))
	})
}

// sortFiles orders files by name, as they are compiled and digested.
func sortFiles(files []ruleFile) {
	slices.SortFunc(files, func(a, b ruleFile) int { return strings.Compare(a.name, b.name) })
}

// digest identifies sorted files' names and contents, so that a reload
// that changes nothing is recognised. Lengths first make it injective.
func digest(files []ruleFile) [32]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.name), f.name, len(f.data))
		h.Write(f.data)
	}
	return [32]byte(h.Sum(nil))
}

// readRules reads the rule files at path, skipping the names starting
// with "." of a directory tree when ignoreDot.
func readRules(path string, ignoreDot bool) ([]ruleFile, *problems) {
	probs := &problems{}
	fi, err := os.Stat(path)
	if err != nil {
		probs.readError(path, err)
		return nil, probs
	}
	if !fi.IsDir() {
		data, err := os.ReadFile(path)
		if err != nil {
			probs.readError(path, err)
			return nil, probs
		}
		return []ruleFile{{name: path, data: data}}, probs
	}
	// Resolved once, so that a link swapped during the read cannot mix
	// the old target's files with the new one's.
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		probs.readError(path, err)
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
// links, named under shown, the path dir was given as. As the reference
// server, it reads every regular file: *.yaml and *.yml are rule files,
// others are when they are YAML with a top-level domain, and are skipped
// with a warning otherwise (a README, which the reference would refuse).
func (t *tree) readDir(dir, shown string, depth int) {
	if depth > maxDirDepth {
		t.probs.errorf(Position{File: shown}, "", "directories nested deeper than %d (a symbolic link loop?)", maxDirDepth)
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.probs.readError(shown, err)
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
			t.probs.readError(named, err)
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
			t.probs.readError(named, err)
			continue
		}
		if !isRuleFile(name) && !declaresDomain(data) {
			t.probs.warnf(Position{File: named}, "", "skipped: not a rule file (no top-level domain); the reference server would refuse the whole load")
			continue
		}
		t.files = append(t.files, ruleFile{name: named, data: data})
	}
}

// outsideTree returns the test of which entries of a directory are not
// part of the rule tree: with ignoreDot, the names starting with ".".
// Otherwise, where Kubernetes projects a ConfigMap (the directory holds
// "..data"), the names starting with "..": its own entries, whose files the
// links beside them lead to, so each file is read once (the reference
// reads them twice and fails on the repeated domain).
func outsideTree(entries []os.DirEntry, ignoreDot bool) func(name string) bool {
	kubernetes := slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == "..data" })
	return func(name string) bool {
		return ignoreDot && strings.HasPrefix(name, ".") || kubernetes && strings.HasPrefix(name, "..")
	}
}

// topLevelDomain finds a rule file's domain key written in block style.
var topLevelDomain = regexp.MustCompile(`(?m)^domain\s*:`)

// declaresDomain reports whether data is YAML (or JSON) whose first
// document is a mapping with a domain field.
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

// readError records err, a failure to read file, without the path that
// the position already names.
func (p *problems) readError(file string, err error) {
	if pe, ok := err.(*fs.PathError); ok {
		err = pe.Err
	}
	p.errorf(Position{File: file}, "", "%v", err)
}
