package test

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRuleDirectoryEmptied: every rule file removed from the directory is
// a broken deployment, not an order to drop every limit: the last good
// rules stay.
func TestRuleDirectoryEmptied(t *testing.T) {
	testRuleBreak(t, ruleBreak{"emptied", func(t *testing.T, dir string) {
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no rule files in %s (%v)", dir, err)
		}
		for _, f := range files {
			if err := os.Remove(f); err != nil {
				t.Fatal(err)
			}
		}
	}})
}
