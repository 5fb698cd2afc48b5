package examples_test

import (
	"path/filepath"
	"testing"
)

// TestDeployingCommands checks the commands of docs/deploying.md, which
// need Docker, Kubernetes, kind or Helm, against the files they use, as
// TestReadmeCommands checks the README's.
func TestDeployingCommands(t *testing.T) {
	c := loadCompose(t)
	n := 0
	for _, b := range parseReadme(t, filepath.Join(repoRoot, "docs", "deploying.md")) {
		for _, cmd := range b.cmds {
			n++
			if classify(cmd.text) != kindStructural {
				t.Errorf("docs/deploying.md:%d: %s: no check for this command here", cmd.line, cmd.text)
				continue
			}
			if err := checkStructural(t, c, cmd.text); err != nil {
				t.Errorf("docs/deploying.md:%d: %s: %v", cmd.line, cmd.text, err)
			}
		}
	}
	if n < 7 {
		t.Errorf("docs/deploying.md has %d commands: want the kind, kubectl, Helm and Istio ones", n)
	}
}
