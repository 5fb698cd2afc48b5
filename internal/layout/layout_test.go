package layout

import (
	"bytes"
	"fmt"
	"maps"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// module is floodgate's module path; the table names packages without it.
const module = "github.com/floodgate/floodgate/"

// mayImport is what each package of the module may import of floodgate,
// directly, in non-test code. A package missing from it, or an import
// it does not list, fails TestImportsPointDown: add a new package with
// what it needs, and before listing a new import, check that it points
// down (docs/architecture.md).
var mayImport = map[string][]string{
	// The library: the contract and the rules at the bottom, the stores and
	// the services on them.
	"pkg/option":        nil,
	"pkg/internal/twin": nil,
	"pkg/limit":         {"pkg/internal/twin"},
	"pkg/rules":         {"pkg/limit"},
	"pkg/redislimit":    {"pkg/internal/twin", "pkg/limit", "pkg/option"},
	"pkg/envoy":         {"pkg/limit", "pkg/option", "pkg/rules"},

	// The binary's parts.
	"internal/statsd":        {"pkg/option"},
	"internal/tracing":       {"pkg/option"},
	"internal/denycache":     {"pkg/limit"},
	"internal/memcachelimit": {"pkg/limit", "pkg/option"},
	"internal/rlqs":          {"pkg/limit", "pkg/option", "pkg/rules"},
	"internal/health":        nil,
	"internal/tlsclient":     nil,
	"internal/promsink":      {"internal/statsd", "pkg/option"},
	"internal/counters":      {"pkg/limit", "pkg/option", "pkg/rules"},
	"internal/xds":           {"pkg/option", "pkg/rules"},
	"internal/buildinfo":     nil,
	"internal/capture":       {"pkg/option"},
	"internal/replay":        {"internal/capture", "pkg/envoy", "pkg/limit", "pkg/option", "pkg/rules"},
	"internal/rlsmetrics":    {"internal/statsd", "pkg/envoy", "pkg/limit", "pkg/rules"},
	"internal/store":         {"internal/denycache", "internal/health", "internal/memcachelimit", "internal/tlsclient", "pkg/limit", "pkg/option", "pkg/redislimit"},
	"internal/ui":            {"internal/health", "internal/rlsmetrics", "pkg/option", "pkg/rules"},
	"internal/server":        {"internal/health", "pkg/envoy", "pkg/option", "pkg/rules"},
	"internal/settings":      {"internal/capture", "internal/denycache", "internal/promsink", "internal/rlqs", "internal/rlsmetrics", "internal/server", "internal/statsd", "internal/store", "internal/tlsclient", "internal/tracing", "internal/xds", "pkg/envoy", "pkg/limit", "pkg/option", "pkg/rules"},
	"internal/layout":        nil,

	// The binaries, on top.
	"cmd/server": {"internal/buildinfo", "internal/capture", "internal/counters", "internal/health", "internal/promsink", "internal/rlqs", "internal/rlsmetrics", "internal/server", "internal/settings", "internal/statsd", "internal/store", "internal/tracing", "internal/ui", "internal/xds", "pkg/envoy", "pkg/rules"},
	"cmd/replay": {"internal/buildinfo", "internal/replay"},
	"cmd/bench":  {"internal/harness", "internal/harness/envoytest", "internal/harness/redistest", "internal/rlqs", "internal/server", "internal/testlog", "pkg/limit", "pkg/redislimit", "pkg/rules"},

	// What tests use: real programs, certificates, logs, receivers.
	"internal/testlog":               nil,
	"internal/testcert":              nil,
	"internal/racebuild":             nil,
	"internal/statsdtest":            nil,
	"internal/otlptest":              nil,
	"internal/xdstest":               nil,
	"internal/harness":               {"internal/testlog"},
	"internal/harness/envoytest":     {"internal/harness"},
	"internal/harness/memcachedtest": {"internal/harness"},
	"internal/harness/redistest":     {"internal/harness", "internal/testcert"},
	"internal/harness/rlstest":       {},
	"internal/demo":                  {"internal/harness"},
	"test":                           nil,
	"test/dropin":                    nil,
}

// pkgInfo is what go list says of one package: its direct imports and
// every package it depends on, of floodgate only, without the module
// path.
type pkgInfo struct {
	imports, deps []string
}

// listPackages runs go list on the whole module, as the Makefile builds
// it (its tags), and returns each package's imports and dependencies.
func listPackages(t *testing.T) map[string]pkgInfo {
	t.Helper()
	pkgs, err := goList()
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < len(mayImport)/2 {
		t.Fatalf("go list found %d packages: %v", len(pkgs), pkgs)
	}
	return pkgs
}

// goList is listPackages' go list, run once for the tests of the package.
var goList = sync.OnceValues(func() (map[string]pkgInfo, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-tags", "vtprotobuf processes",
		"-f", `{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}`, module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	own := func(list string) []string {
		var ps []string
		for _, p := range strings.Fields(list) {
			if rest, ok := strings.CutPrefix(p, module); ok {
				ps = append(ps, rest)
			}
		}
		return ps
	}
	pkgs := map[string]pkgInfo{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, rest, _ := strings.Cut(line, "|")
		imports, deps, _ := strings.Cut(rest, "|")
		pkgs[strings.TrimPrefix(path, module)] = pkgInfo{imports: own(imports), deps: own(deps)}
	}
	return pkgs, nil
})

// through names the direct import of p by which p depends on dep.
func through(pkgs map[string]pkgInfo, p, dep string) string {
	for _, i := range pkgs[p].imports {
		if i == dep {
			return "directly"
		}
	}
	for _, i := range pkgs[p].imports {
		if slices.Contains(pkgs[i].deps, dep) {
			return "through " + i
		}
	}
	return ""
}

// TestLibraryImportsNoInternal: no package under pkg/ depends on a
// package under internal/, directly or not: a program embedding pkg/
// could not build it.
func TestLibraryImportsNoInternal(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		if !strings.HasPrefix(p, "pkg/") {
			continue
		}
		for _, d := range pkgs[p].deps {
			if strings.HasPrefix(d, "internal/") {
				t.Errorf("%s imports %s (%s): pkg/ is a library, and internal/ is the binary's", p, d, through(pkgs, p, d))
			}
		}
	}
}

// TestLayers holds the rules the table must keep, whatever it lists: the
// store and the live page do not depend on the listeners; pkg/limit
// depends on nothing of floodgate but the constants it shares with the
// Lua scripts (pkg/internal/twin), pkg/rules on pkg/limit alone.
func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range []string{"internal/store", "internal/ui"} {
		if slices.Contains(pkgs[p].deps, "internal/server") {
			t.Errorf("%s imports internal/server (%s): the listeners take the store and the page, not the other way", p, through(pkgs, p, "internal/server"))
		}
	}
	for _, l := range []struct {
		pkg     string
		allowed []string
	}{{"pkg/limit", []string{"pkg/internal/twin"}}, {"pkg/rules", []string{"pkg/internal/twin", "pkg/limit"}}} {
		for _, d := range pkgs[l.pkg].deps {
			if !slices.Contains(l.allowed, d) {
				t.Errorf("%s imports %s (%s): of floodgate, it may depend on %v only", l.pkg, d, through(pkgs, l.pkg, d), l.allowed)
			}
		}
	}
}

// TestImportsPointDown: every import of floodgate by one of its packages
// is one the table allows, and the table lists every package there is.
func TestImportsPointDown(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range slices.Sorted(maps.Keys(pkgs)) {
		allowed, known := mayImport[p]
		if !known {
			t.Errorf("%s is a new package: add it to mayImport in internal/layout/layout_test.go with what it may import (%v today)", p, pkgs[p].imports)
			continue
		}
		for _, i := range pkgs[p].imports {
			if !slices.Contains(allowed, i) {
				t.Errorf("%s imports %s, which mayImport does not allow: an import pointing back up? Depend on a lower package, or move the code down (docs/architecture.md)", p, i)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(mayImport)) {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("mayImport lists %s, which is no package of the module: remove it, or rename it where it moved", p)
		}
	}
}
