package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/pkg/rules"
)

// ownDocs are the documents whose examples and links these tests keep
// true; the other files of docs/ have their own checks.
var ownDocs = []string{"rules.md", "migrating.md", "operations.md", "deploying.md", "ui.md", "settings.md"}

// TestDocsRuleExamples loads every rule file shown in the docs: a yaml
// block declaring a domain must load, unless a console block right after it
// shows what floodgate prints for it, which must then be what it prints.
func TestDocsRuleExamples(t *testing.T) {
	checked := 0
	for _, doc := range ownDocs {
		path := filepath.Join(repoRoot, "docs", doc)
		fs := readMarkdown(t, path).blocks
		for i, f := range fs {
			if f.lang != "yaml" || !regexp.MustCompile(`(?m)^domain:`).MatchString(f.body()) {
				continue
			}
			checked++
			if i+1 < len(fs) && fs[i+1].lang == "console" {
				t.Run(fmt.Sprintf("%s:%d", doc, f.line), func(t *testing.T) {
					runDocConsole(t, path, f, fs[i+1])
				})
				continue
			}
			if _, err := rules.Parse(map[string][]byte{"rules.yaml": []byte(f.body())}, rules.Options{}); err != nil {
				t.Errorf("%s:%d: the example does not load:\n%v", path, f.line, err)
			}
		}
	}
	if checked == 0 {
		t.Error("no rule example found in docs/")
	}
}

// runDocConsole runs the "$ floodgate ..." commands of a console block in a
// directory holding the preceding example as rules.yaml.
func runDocConsole(t *testing.T, path string, example, console mdBlock) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), []byte(example.body()), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(console.body(), "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		cmd, ok := strings.CutPrefix(lines[i], "$ floodgate ")
		if !ok {
			t.Fatalf("%s:%d: want a $ floodgate command, have %q", path, console.line+1+i, lines[i])
		}
		var want []string
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "$ ") {
			i++
			want = append(want, lines[i])
		}
		out, _ := runFloodgate(t, dir, strings.Fields(cmd)...)
		if got := strings.Split(strings.TrimRight(out, "\n"), "\n"); !slices.Equal(got, want) {
			t.Errorf("%s:%d: floodgate %s prints:\n%s\nthe docs say:\n%s", path, console.line, cmd, out, strings.Join(want, "\n"))
		}
	}
}

// TestDocsLinks checks that the relative links of the README and of these
// docs lead to files that exist.
func TestDocsLinks(t *testing.T) {
	files := []string{filepath.Join(repoRoot, "README.md"), filepath.Join(repoRoot, "docs", "usage.md")}
	for _, d := range ownDocs {
		files = append(files, filepath.Join(repoRoot, "docs", d))
	}
	checked := 0
	for _, f := range files {
		for _, dest := range readMarkdown(t, f).links {
			target, ok := localTarget(dest)
			if !ok {
				continue
			}
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				t.Errorf("%s links to %s: %v", f, target, err)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative link found: the links are no longer read")
	}
}

// citedTestRE finds what docs/reliability.md cites as proof: a test file
// with a test or fuzz target (`test/failure_test.go:TestRedisOutageUnderLoad`),
// a further target of the file cited last in the same cell (`TestFlush`),
// and kept fuzz corpora (`pkg/envoy/testdata/fuzz/FuzzShouldRateLimit`).
var citedTestRE = regexp.MustCompile("`(?:([\\w./-]+_test\\.go):)?((?:Test|Fuzz)\\w+)(?:/[\\w/]*)?`|`([\\w./-]+/testdata/fuzz/\\w+)`")

// TestReliabilityCitesRealTests keeps docs/reliability.md honest: each test
// it names as the proof of a guarantee exists in the file it names (or, when
// named alone, in the file cited before it in the same row, else anywhere),
// and each kept fuzz corpus it names holds inputs.
func TestReliabilityCitesRealTests(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "reliability.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string][]string{} // test name -> files declaring it
	funcRE := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)\w+)\(`)
	err = filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		for _, m := range funcRE.FindAllStringSubmatch(string(src), -1) {
			defined[m[1]] = append(defined[m[1]], filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cited := 0
	for n, line := range strings.Split(string(data), "\n") {
		file := "" // the file cited last on this line
		for _, m := range citedTestRE.FindAllStringSubmatch(line, -1) {
			cited++
			if corpus := m[3]; corpus != "" {
				entries, err := os.ReadDir(filepath.Join(repoRoot, corpus))
				if err != nil || len(entries) == 0 {
					t.Errorf("reliability.md:%d: fuzz corpus %s: %d inputs, %v", n+1, corpus, len(entries), err)
				}
				continue
			}
			if m[1] != "" {
				file = m[1]
			}
			name, files := m[2], defined[m[2]]
			switch {
			case len(files) == 0:
				t.Errorf("reliability.md:%d: %s is cited, but no test file declares it", n+1, name)
			case file != "" && !slices.Contains(files, file):
				t.Errorf("reliability.md:%d: %s is cited in %s, but declared in %v", n+1, name, file, files)
			}
		}
	}
	if cited < 40 {
		t.Errorf("found %d citations in reliability.md; the pattern no longer reads it", cited)
	}
}

// TestArchitectureNamesRealFunctions checks that every function
// docs/architecture.md names as file:Name or file:Type.Method is declared
// in that file, so the request's path there stays true as code moves.
func TestArchitectureNamesRealFunctions(t *testing.T) {
	doc, err := os.ReadFile("../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	cites := regexp.MustCompile("`((?:pkg|cmd)/[a-z/]+\\.go):(?:([A-Za-z]+)\\.)?([A-Za-z]+)`").FindAllStringSubmatch(string(doc), -1)
	if len(cites) < 10 {
		t.Fatalf("docs/architecture.md names %d functions, want the request's path (at least 10)", len(cites))
	}
	for _, c := range cites {
		src, err := os.ReadFile(filepath.Join("..", c[1]))
		if err != nil {
			t.Errorf("docs/architecture.md names %s: %v", c[0], err)
			continue
		}
		decl := `func ` + regexp.QuoteMeta(c[3]) + `\b|\n\t` + regexp.QuoteMeta(c[3]) + `\(`
		if c[2] != "" {
			decl = `func \(\w+ \*?` + regexp.QuoteMeta(c[2]) + `\) ` + regexp.QuoteMeta(c[3]) + `\(|type ` + regexp.QuoteMeta(c[2]) + ` interface[^}]*\n\t` + regexp.QuoteMeta(c[3]) + `\(`
		}
		if !regexp.MustCompile(decl).Match(src) {
			t.Errorf("docs/architecture.md names %s, which %s does not declare", c[0], c[1])
		}
	}
}
