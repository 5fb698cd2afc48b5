package buildinfo

import (
	"regexp"
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	if got := String(); !regexp.MustCompile(`^\S+ commit \S+ go\S*$`).MatchString(got) {
		t.Errorf("String() = %q, want VERSION commit COMMIT GOVERSION", got)
	}
	// A build without the repository's history (the image's) stamps both.
	stampedVersion, stampedCommit = "v1.2.3", "0123abc"
	defer func() { stampedVersion, stampedCommit = "", "" }()
	if got := String(); !strings.HasPrefix(got, "v1.2.3 commit 0123abc go") {
		t.Errorf("stamped String() = %q, want v1.2.3 commit 0123abc go...", got)
	}
}
