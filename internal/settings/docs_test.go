package settings

import (
	"flag"
	"os"
	"path/filepath"
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
