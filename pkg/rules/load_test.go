package rules

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func symlink(t testing.TB, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// domainFile is a valid rule file for domain with one key-only rule.
func domainFile(domain, key string) string {
	return "domain: " + domain + "\ndescriptors:\n  - key: " + key + "\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
}

func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/a.yaml", domainFile("a", "k"))
	writeFile(t, dir+"/b.YML", domainFile("b", "k"))
	writeFile(t, dir+"/sub/deeper/c.yaml", domainFile("c", "k"))
	writeFile(t, dir+"/README.md", "not rules: skipped with a warning")
	writeFile(t, dir+"/notes.txt", "- nor these")
	symlink(t, dir+"/sub/deeper", dir+"/linked")
	set, err := Load(dir, Options{MergeDomains: false})
	if err == nil {
		t.Fatalf("the linked directory loads c twice, want a duplicate-domain error")
	}
	if !strings.Contains(err.Error(), dir+"/sub/deeper/c.yaml:1:9: domain: duplicate domain \"c\", first declared at "+dir+"/linked/c.yaml:1:9") {
		t.Errorf("error = %v", err)
	}
	if err := os.Remove(dir + "/linked"); err != nil {
		t.Fatal(err)
	}
	set, err = Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := set.Domains(); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("Domains = %v", got)
	}
	var warned []string
	for _, w := range set.Warnings() {
		warned = append(warned, strings.TrimPrefix(w.Pos.File, dir+"/")+": "+w.Msg)
	}
	if want := []string{
		"README.md: skipped: not a rule file (no top-level domain); the reference server would refuse the whole load",
		"notes.txt: skipped: not a rule file (no top-level domain); the reference server would refuse the whole load",
	}; !reflect.DeepEqual(warned, want) {
		t.Errorf("warnings:\n%s\nwant\n%s", strings.Join(warned, "\n"), strings.Join(want, "\n"))
	}
	if set.Match("c", entries("k=1")).Pos.File != dir+"/sub/deeper/c.yaml" {
		t.Errorf("file name in positions: %v", set.Match("c", entries("k=1")).Pos)
	}
}

// TestLoadConfigMapLayout: Kubernetes mounts a ConfigMap as files that link
// through ..data into a timestamped directory; each file loads once.
func TestLoadConfigMapLayout(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/..2026_01_01_00_00_00.000000001/rules.yaml", domainFile("cm", "k"))
	symlink(t, "..2026_01_01_00_00_00.000000001", dir+"/..data")
	symlink(t, "..data/rules.yaml", dir+"/rules.yaml")
	set, err := Load(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := set.Match("cm", entries("k=x"))
	if r == nil || r.Pos.File != dir+"/rules.yaml" {
		t.Errorf("rule = %+v, want it from %s/rules.yaml", r, dir)
	}
}

func TestLoadPaths(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/one.conf", domainFile("single", "k"))
	set, err := Load(dir+"/one.conf", Options{})
	if err != nil {
		t.Fatalf("a file given by name loads whatever its extension: %v", err)
	}
	if !set.HasDomain("single") {
		t.Errorf("domain missing")
	}

	// Relative paths stay relative in messages.
	writeFile(t, dir+"/rules/bad.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: secnd}\n")
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	_, err = Load("rules", Options{})
	if err == nil || !strings.HasPrefix(err.Error(), "rules/bad.yaml:4:24: descriptors[0].rate_limit.unit: unknown unit") {
		t.Errorf("error = %v", err)
	}

	_, err = Load("nowhere", Options{})
	var le *LoadError
	if !errors.As(err, &le) || le.Errors[0].Error() != "nowhere: no such file or directory" {
		t.Errorf("missing path: %v", err)
	}

	empty := t.TempDir()
	set, err = Load(empty, Options{})
	if err != nil {
		t.Fatalf("an empty directory is a valid, empty set: %v", err)
	}
	if len(set.Domains()) != 0 || len(set.Warnings()) != 1 || !strings.Contains(set.Warnings()[0].Msg, "no rule files") {
		t.Errorf("empty directory: domains %v, warnings %v", set.Domains(), set.Warnings())
	}
}

func TestLoadUnreadableFile(t *testing.T) {
	if os.Geteuid() == 0 {
		// root reads any file; a dangling link is the unreadable case left.
		dir := t.TempDir()
		symlink(t, dir+"/gone.yaml", dir+"/dangling.yaml")
		writeFile(t, dir+"/ok.yaml", domainFile("ok", "k"))
		set, err := Load(dir, Options{})
		if err != nil || !set.HasDomain("ok") {
			t.Errorf("a dangling link (as mid-swap) must be skipped: %v", err)
		}
		return
	}
	dir := t.TempDir()
	writeFile(t, dir+"/secret.yaml", domainFile("s", "k"))
	if err := os.Chmod(dir+"/secret.yaml", 0); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir, Options{})
	if err == nil || !strings.Contains(err.Error(), dir+"/secret.yaml: permission denied") {
		t.Errorf("error = %v", err)
	}
}

// TestLoadReferenceFileNames: as the reference server, a rule file need not
// be named *.yaml: b.conf, a file without extension and rules.json are rule
// files when they are YAML declaring a domain. Names starting with "." are
// read, as the reference reads them unless RUNTIME_IGNOREDOTFILES=true
// (IgnoreDotFiles), but for Kubernetes' ..data entries, whose files are read
// once, through the links beside them.
func TestLoadReferenceFileNames(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir+"/a.yaml", domainFile("a", "k"))
	writeFile(t, dir+"/b.conf", domainFile("b", "k"))
	writeFile(t, dir+"/noext", domainFile("c", "k"))
	writeFile(t, dir+"/flow.conf", "{domain: f, descriptors: [{key: k}]}\n")
	writeFile(t, dir+"/rules.json", `{"domain": "j", "descriptors": [{"key": "k"}]}`)
	writeFile(t, dir+"/README", "rules for the shop")
	writeFile(t, dir+"/.d.yaml", domainFile("d", "k"))
	writeFile(t, dir+"/..x.yaml", domainFile("x", "k"))
	writeFile(t, dir+"/.hidden/e.yaml", domainFile("e", "k"))
	// A ConfigMap mounted with keys g.yaml and .h.yaml.
	writeFile(t, dir+"/cm/..2026_01_01_00_00_00.1/g.yaml", domainFile("g", "k"))
	writeFile(t, dir+"/cm/..2026_01_01_00_00_00.1/.h.yaml", domainFile("h", "k"))
	symlink(t, "..2026_01_01_00_00_00.1", dir+"/cm/..data")
	symlink(t, "..data/g.yaml", dir+"/cm/g.yaml")
	symlink(t, "..data/.h.yaml", dir+"/cm/.h.yaml")
	for _, tt := range []struct {
		opts    Options
		domains []string
	}{
		{Options{}, []string{"a", "b", "c", "d", "e", "f", "g", "h", "j", "x"}},
		{Options{IgnoreDotFiles: true}, []string{"a", "b", "c", "f", "g", "j"}},
	} {
		set, err := Load(dir, tt.opts)
		if err != nil {
			t.Fatalf("%+v: %v", tt.opts, err)
		}
		if got := set.Domains(); !reflect.DeepEqual(got, tt.domains) {
			t.Errorf("%+v: domains %v, want %v", tt.opts, got, tt.domains)
		}
		if r := set.Match("g", entries("k=v")); r == nil || r.Pos.File != dir+"/cm/g.yaml" {
			t.Errorf("%+v: rule %+v, want it from cm/g.yaml", tt.opts, r)
		}
		w := set.Warnings()
		if len(w) != 1 || w[0].Pos.File != dir+"/README" || !strings.Contains(w[0].Msg, "not a rule file") {
			t.Errorf("%+v: warnings %v, want one naming README", tt.opts, w)
		}
	}
}
