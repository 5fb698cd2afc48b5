package settings

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "write the generated tables into the docs instead of checking them")

// TestDocsTablesAreCurrent: docs/settings.md's table of every setting and
// docs/migrating.md's table of the reference's variables are what Table
// and References generate; go test ./internal/settings -update writes
// them.
func TestDocsTablesAreCurrent(t *testing.T) {
	for _, r := range Regions() {
		path := filepath.Join("..", "..", r.File)
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want, err := r.Replace(string(doc))
		if err != nil {
			t.Fatal(err)
		}
		if want == string(doc) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: the %q table is stale: run go test ./internal/settings -update", r.File, r.Name)
	}
}

// FlagTable returns the Markdown table of every setting, in Table's
// order: flag, default, the variables that set it and what it does.
// docs/settings.md carries it between <!-- settings:flags --> markers.
func FlagTable() string {
	var b strings.Builder
	b.WriteString("| Flag | Default | Environment (in order) | Meaning |\n|---|---|---|---|\n")
	var c Config
	fs := flagSet(&c, func(string) (string, bool) { return "", false })
	for i := range Table {
		s := &Table[i]
		def := s.DefaultDoc
		if def == "" && !s.Command {
			def = fs.Lookup(s.Flag).DefValue
			if def != "" && s.typeName(fs.Lookup(s.Flag).Value) == "string" {
				def = "`" + def + "`"
			}
		}
		meaning := s.Doc
		if meaning == "" {
			meaning = s.Usage
		}
		fmt.Fprintf(&b, "| `-%s` | %s | %s | %s |\n", s.Flag, def, code(s.Vars()), meaning)
	}
	return b.String()
}

// ReferenceTable returns the Markdown table of every variable of the
// reference server, in its settings.go's order: what floodgate does with
// it and a note. docs/migrating.md carries it between
// <!-- settings:reference --> markers, after a line counting each kind.
func ReferenceTable() string {
	var honoured, refused, accepted int
	for _, r := range References {
		switch {
		case r.Flag != "":
			honoured++
		case r.Refuse != nil:
			refused++
		default:
			accepted++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "In numbers: %d variables, %d honoured, %d with refused values, %d accepted.\n\n", len(References), honoured, refused, accepted)
	b.WriteString("| Variable | In floodgate | Notes |\n|---|---|---|\n")
	for _, r := range References {
		in := r.In
		if in == "" {
			in = "honoured: `-" + r.Flag + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.Name, in, r.Doc)
	}
	return b.String()
}

// code formats names as Markdown code, comma-separated.
func code(names []string) string {
	for i, n := range names {
		name, rest, _ := strings.Cut(n, " ")
		names[i] = "`" + name + "`"
		if rest != "" {
			names[i] += " " + rest
		}
	}
	return strings.Join(names, ", ")
}

// Regions are the generated parts of the docs: file (from the module's
// root), marker name, and the text between the markers.
func Regions() []Region {
	return []Region{
		// The rows link other pages as from the repository's root.
		{File: "docs/settings.md", Name: "flags", Text: strings.ReplaceAll(FlagTable(), "](docs/", "](")},
		{File: "docs/migrating.md", Name: "reference", Text: ReferenceTable()},
	}
}

// Region is a generated part of a document: the text between
// "<!-- settings:Name -->" and "<!-- /settings:Name -->" lines in File.
type Region struct {
	File, Name, Text string
}

// Replace returns doc with the region's text between its markers, or an
// error if doc lacks them.
func (r Region) Replace(doc string) (string, error) {
	open, end := "<!-- settings:"+r.Name+" -->\n", "<!-- /settings:"+r.Name+" -->"
	i := strings.Index(doc, open)
	j := strings.Index(doc, end)
	if i < 0 || j < i {
		return "", fmt.Errorf("%s: no %q ... %q markers", r.File, strings.TrimSpace(open), end)
	}
	return doc[:i+len(open)] + r.Text + doc[j:], nil
}
