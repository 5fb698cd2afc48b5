package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/pkg/rules"
)

// TestCheckRules: check prints a summary of a good set with its warnings,
// every error of a refused one, and the error of a missing path.
func TestCheckRules(t *testing.T) {
	var out bytes.Buffer
	if err := checkRules(&out, "../../config", rules.Options{}); err != nil {
		t.Fatalf("checkRules: %v", err)
	}
	for _, want := range []string{"domain demo: 20 rules, 17 limits", "../../config: OK: 1 file, 1 domain, 20 rules, 17 limits, 0 warnings"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}

	dir := t.TempDir()
	limitFile := func(name string, lines ...string) {
		content := "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n"
		for _, l := range lines {
			content += "      " + l + "\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	limitFile("a.yaml", "unit: secnd", "requests_per_unit: 1")
	limitFile("b.yaml", "unit: second", "requests_per_unit: 2000", "algorithm: sliding_log")
	out.Reset()
	err := checkRules(&out, dir, rules.Options{})
	var le *rules.LoadError
	if !errors.As(err, &le) || len(le.Errors) != 2 {
		t.Fatalf("checkRules error = %v, want a LoadError with 2 errors (duplicate domain, unit)", err)
	}
	for _, want := range []string{dir + "/a.yaml:5:13: descriptors[0].rate_limit.unit: unknown unit", dir + "/b.yaml:1:9: domain: duplicate domain", "2 errors, rules refused"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	out.Reset()
	if err := checkRules(&out, dir+"/b.yaml", rules.Options{}); err != nil {
		t.Fatalf("checkRules of a valid file with a warning: %v", err)
	}
	if !strings.Contains(out.String(), "warning: "+dir+"/b.yaml:5:7: descriptors[0].rate_limit: sliding_log keeps one entry") ||
		!strings.Contains(out.String(), "1 warning\n") {
		t.Errorf("warnings not printed:\n%s", out.String())
	}

	out.Reset()
	if err := checkRules(&out, dir+"/missing", rules.Options{}); err == nil || !strings.Contains(out.String(), dir+"/missing: no such file or directory") {
		t.Errorf("missing path: err %v, output %q", err, out.String())
	}
}
