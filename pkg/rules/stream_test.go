package rules

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// parsed is a fileSink that keeps what it is given.
type parsed struct {
	domains []string
	descs   []*descDoc
}

func (p *parsed) domain(name string, _ Position) { p.domains = append(p.domains, name) }
func (p *parsed) descriptor(d *descDoc)          { p.descs = append(p.descs, d) }

// describeLoad writes down everything a load gives: the error, or the
// warnings, domains and every rule and limit with their positions, so that
// two loads can be compared as text.
func describeLoad(set *Set, err error) string {
	if err != nil {
		return "error:\n" + err.Error() + "\n"
	}
	var b strings.Builder
	for _, w := range set.warnings {
		fmt.Fprintf(&b, "warning %s\n", w)
	}
	fmt.Fprintf(&b, "domains %q, %d files, digest %x\n", set.Domains(), set.files, set.digest)
	for _, r := range set.rules {
		fmt.Fprintf(&b, "rule %s %s at %v shadow=%v detailed=%v quota=%v v2m=%v failure=%v metadata=%v levels=%v\n",
			r.Domain, r.Path, r.Pos, r.ShadowMode, r.DetailedMetric, r.QuotaMode, r.ValueToMetric, r.FailureMode, r.Metadata, r.levels)
		for _, l := range r.Limits {
			loc := ""
			if l.Spec.Calendar != nil {
				loc = l.Spec.Calendar.String()
			}
			fmt.Fprintf(&b, "  limit %s name=%q %d per %d %s unlimited=%v replaces=%q spec=%v/%d/%v/%d/%d@%s at %v\n",
				l.ID, l.Name, l.RequestsPerUnit, l.UnitMultiplier, l.Unit, l.Unlimited, l.Replaces,
				l.Spec.Algorithm, l.Spec.Limit, l.Spec.Window, l.Spec.Burst, l.Spec.Precision, loc, l.Pos)
		}
	}
	return b.String()
}

// loadWith loads files (name -> content) as Parse does, in slices of slice
// bytes (0: whole).
func loadWith(files map[string]string, opts Options, slice int) (*Set, error) {
	list := make([]ruleFile, 0, len(files))
	for name, data := range files {
		list = append(list, ruleFile{name: name, data: []byte(data)})
	}
	return build(list, opts, &problems{}, slice)
}

// sliceSizes are the slice sizes the comparisons run: every item a slice
// of its own, a few items per slice, and the loader's own.
var sliceSizes = []int{1, 200, sliceBytes}

// checkSlicedIsWhole fails t unless loading files in slices of each of
// sliceSizes gives exactly what loading them whole gives.
func checkSlicedIsWhole(t *testing.T, files map[string]string, opts Options) {
	t.Helper()
	want := describeLoad(loadWith(files, opts, 0))
	for _, size := range sliceSizes {
		if got := describeLoad(loadWith(files, opts, size)); got != want {
			t.Fatalf("in slices of %d bytes the load gives\n%s\nparsed whole\n%s", size, got, want)
		}
	}
}

// How a file is parsed with slices of one item.
const (
	sliced   = "sliced"   // in slices
	fellBack = "fellBack" // cut, but a slice did not parse alone: parsed whole
	notCut   = "notCut"   // its layout left doubt: parsed whole
)

// parseMode returns how parseFile parses data in slices of one item.
func parseMode(data string) string {
	if _, ok := cutItems([]byte(data), 1); !ok {
		return notCut
	}
	if parseFile("f.yaml", []byte(data), &problems{}, &parsed{}, 1) {
		return sliced
	}
	return fellBack
}

// TestSlicedIsWhole loads files in slices and whole and requires the same
// rules, errors and warnings, positions included, for every layout a rule
// file may have: the slices must mean what the whole file means, and
// where they could not (an anchor used in another slice, a quoted value
// running over items, a syntax error), the file must be parsed whole.
func TestSlicedIsWhole(t *testing.T) {
	const item = "  - key: k%d\n    rate_limit: {unit: second, requests_per_unit: %d}\n"
	items := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, item, i, i+1)
		}
		return b.String()
	}
	tests := []struct {
		name, file, mode string
	}{
		{"plain", "domain: d\ndescriptors:\n" + items(5), sliced},
		{"items at column 0", "domain: d\ndescriptors:\n- key: a\n  value: x\n- key: b\n  rate_limit:\n    unit: minute\n    requests_per_unit: 3\n", sliced},
		{"domain after the items", "descriptors:\n" + items(3) + "domain: d\n", sliced},
		{"document start and end", "---\ndomain: d\ndescriptors:\n" + items(2) + "...\n", sliced},
		{"CRLF", strings.ReplaceAll("domain: d\ndescriptors:\n"+items(3)+"  - key: bad\n    rate_limit: {unit: fortnight}\n", "\n", "\r\n"), sliced},
		{"comments and blank lines", "domain: d\ndescriptors: # the list\n\n# top\n  - key: a # one\n    # inside\n\n# between, at column 0\n  - key: b\n      # deeper\n  # at the list's column\n  - key: c\n# after\n", sliced},
		{"block scalar in metadata", "domain: d\ndescriptors:\n  - key: a\n    metadata:\n      note: |\n        - key: not an item\n        # not a comment\n      more: >\n        folded\n  - key: b\n", sliced},
		{"nested descriptors", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        value: \"x*\"\n        rate_limit: {unit: hour, requests_per_unit: 1}\n      - key: b\n  - key: c\n    value: v\n", sliced},
		{"problems in items", "domain: d\ndescriptors:\n  - key: a\n    vaule: x\n  - key: a\n  - key: b\n    key: c\n  - rate_limit: {unit: second}\n  - key: e\n    rate_limit: {unit: second, requests_per_unit: 1, burst: 0}\n  - []\n  -\n", sliced},
		{"duplicates across items and warnings", "domain: d\ndescriptors:\n  - key: a\n    value: \"*\"\n  - key: a\n    value: \"x*\"\n  - key: a\n    value: \"*\"\n  - key: r\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: nobody}]}\n", sliced},
		{"merge key inside an item", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      <<: &base {unit: second, requests_per_unit: 4}\n      name: n\n    descriptors:\n      - key: b\n        rate_limit: *base\n", sliced},
		{"unknown top-level field after the items", "domain: d\ndescriptors:\n" + items(2) + "extra: 1\n", sliced},
		{"anchor used in a later item", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &std {unit: second, requests_per_unit: 10}\n  - key: b\n    rate_limit: *std\n", fellBack},
		{"anchor of the header used in an item", "domain: &d d\ndescriptors:\n  - key: *d\n", fellBack},
		{"anchor of an item used in the header", "descriptors:\n  - key: &k a\ndomain: *k\n", fellBack},
		{"quoted value running over items", "domain: d\ndescriptors:\n  - key: \"a\n  - b\"\n", fellBack},
		{"flow value running over items", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second,\n  - requests_per_unit: 1}\n", fellBack},
		{"syntax error in an item", "domain: d\ndescriptors:\n" + items(3) + "  - key: [\n" + items(2), fellBack},
		{"second document", "domain: d\ndescriptors:\n" + items(2) + "---\ndomain: e\n", fellBack},
		// The last of a field given twice is read: the cut's list when it
		// is last, another when not.
		{"descriptors twice", "domain: d\ndescriptors:\n" + items(2) + "descriptors:\n  - key: z\n", fellBack},
		{"quoted key first", "domain: d\n\"descriptors\": [{key: q}]\ndescriptors:\n" + items(2), sliced},
		{"descriptors inside a quoted domain", "domain: \"x\ndescriptors:\n  - key: a\n\"\n", fellBack},
		{"flow list", "domain: d\ndescriptors: [{key: a}, {key: b}]\n", notCut},
		{"tab before an item", "domain: d\ndescriptors:\n\t- key: a\n", notCut},
		{"lesser indentation inside the list", "domain: d\ndescriptors:\n    - key: a\n  - key: b\n", notCut},
		{"lone CR", "domain: d\rdescriptors:\n  - key: a\n", notCut},
		{"NEL", "domain: d\ndescriptors:\n  - key: a\u0085  - key: b\n", notCut},
		{"no items", "domain: d\ndescriptors:\n", notCut},
		{"descriptors:x is not the key", "domain: d\ndescriptors:x\n  - key: a\n", notCut},
		{"empty file", "", notCut},
		{"not YAML", "\x00\xff", notCut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseMode(tt.file); got != tt.mode {
				t.Errorf("parsed %s, want %s", got, tt.mode)
			}
			checkSlicedIsWhole(t, map[string]string{"f.yaml": tt.file}, Options{})
		})
	}
}

// TestSlicedIsWholeAcrossFiles compares slices and whole over several
// files: domains merged or repeated, and a file that falls back to being
// parsed whole between files that are sliced.
func TestSlicedIsWholeAcrossFiles(t *testing.T) {
	files := map[string]string{
		"a.yaml": "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: x\n",
		"b.yaml": "domain: d\ndescriptors:\n  - key: b\n    rate_limit: &l {unit: second, requests_per_unit: 2}\n  - key: c\n    rate_limit: *l\n  - key: a\n",
		"c.yaml": "domain: e\ndescriptors:\n  - key: a\n",
		"d.yaml": "domain: d\ndescriptors:\n  - key: z\n",
	}
	for _, opts := range []Options{{}, {MergeDomains: true}} {
		t.Run(fmt.Sprintf("merge=%v", opts.MergeDomains), func(t *testing.T) {
			checkSlicedIsWhole(t, files, opts)
		})
	}
}

// TestSlicedIsWholeReference compares slices and whole on the reference
// server's example files.
func TestSlicedIsWholeReference(t *testing.T) {
	paths, err := filepath.Glob("testdata/reference/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no reference files: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(filepath.Base(p), func(t *testing.T) {
			if mode := parseMode(string(data)); mode != sliced {
				t.Errorf("parsed %s, want %s", mode, sliced)
			}
			checkSlicedIsWhole(t, map[string]string{"f.yaml": string(data)}, Options{})
		})
	}
}

// TestSlicedAliasBudget checks that the node budget that refuses alias
// bombs counts the same nodes in slices as whole: an item expanding past
// it is refused at the same place either way.
func TestSlicedAliasBudget(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a: &a [x, x, x, x, x, x, x, x, x, x]\n")
	prev := "a"
	for i := range 6 {
		name := fmt.Sprintf("b%d", i)
		fmt.Fprintf(&b, "      %s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	b.WriteString("  - key: after\n")
	file := b.String()
	if mode := parseMode(file); mode != sliced {
		t.Errorf("parsed %s, want %s", mode, sliced)
	}
	start := time.Now()
	checkSlicedIsWhole(t, map[string]string{"f.yaml": file}, Options{})
	_, err := Parse(map[string][]byte{"f.yaml": []byte(file)}, Options{})
	if err == nil || !strings.Contains(err.Error(), "too many YAML nodes") {
		t.Errorf("error %v; want the node budget spent", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("took %v", d)
	}
}
