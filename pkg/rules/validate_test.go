package rules

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// limitFile is a one-descriptor rule file whose rate_limit holds lines; the
// first of them is on line 5, indented to column 7.
func limitFile(lines ...string) string {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n")
	for _, l := range lines {
		b.WriteString("      " + l + "\n")
	}
	return b.String()
}

// wantErr is one expected error: its line:column, field path and a part of
// its message.
type wantErr struct {
	at, field, msg string
}

// loadErrors parses files and returns the load's errors, failing the test
// when the load succeeds or fails with another type.
func loadErrors(t *testing.T, files map[string]string, opts Options) []FieldError {
	t.Helper()
	in := map[string][]byte{}
	for name, src := range files {
		in[name] = []byte(src)
	}
	set, err := Parse(in, opts)
	if err == nil {
		t.Fatalf("Parse succeeded with %d rules, want an error", len(set.Rules()))
	}
	var le *LoadError
	if !errors.As(err, &le) {
		t.Fatalf("Parse error is %T (%v), want *LoadError", err, err)
	}
	if len(le.Errors) == 0 {
		t.Fatalf("LoadError without errors")
	}
	return le.Errors
}

// hasError reports whether errs holds w in file, by the error's text. An
// empty w.at matches any position and field.
func hasError(errs []FieldError, file string, w wantErr) bool {
	prefix := file + ":"
	if w.at != "" {
		prefix += w.at + ": "
		if w.field != "" {
			prefix += w.field + ": "
		}
	}
	for _, e := range errs {
		s := e.Error()
		if strings.HasPrefix(s, prefix) && strings.Contains(s[len(prefix):], w.msg) {
			return true
		}
	}
	return false
}

func TestValidationErrors(t *testing.T) {
	const file = "rules/api.yaml"
	tests := []struct {
		name string
		src  string
		want []wantErr
	}{
		// Unknown keys, at every level, with a suggestion for typos.
		{"unknown top-level key", "domian: d\n", []wantErr{
			{"1:1", "domian", `unknown field (did you mean "domain"?)`},
			{"1:1", "domain", "missing"},
		}},
		{"unknown descriptor key", "domain: d\ndescriptors:\n  - key: k\n    rate_limt: {unit: second}\n", []wantErr{
			{"4:5", "descriptors[0].rate_limt", `unknown field (did you mean "rate_limit"?)`},
		}},
		{"unknown rate_limit key", limitFile("unit: second", "requests_per_unti: 1"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.requests_per_unti", `did you mean "requests_per_unit"?`},
		}},
		{"unknown key lists valid ones", limitFile("unit: second", "colour: red"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.colour", "unknown field (want unit, requests_per_unit, unlimited, name, replaces, algorithm, burst, precision, unit_multiplier, calendar or timezone)"},
		}},
		{"unknown replaces key", limitFile("unit: second", "replaces: [{nam: x}]"), []wantErr{
			{"6:19", "descriptors[0].rate_limit.replaces[0].nam", `did you mean "name"?`},
		}},
		{"unknown nested descriptor key", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        shadow: true\n", []wantErr{
			{"6:9", "descriptors[0].descriptors[0].shadow", "unknown field"},
		}},
		{"floodgate's field at the wrong level", limitFile("unit: second", "failure_mode: deny"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.failure_mode", "unknown field here (failure_mode belongs to a descriptor)"},
		}},
		{"the reference's field at the wrong level, holding an unknown field", "domain: d\nreplaces: [{name: x, nme: y}]\n", []wantErr{
			{"2:22", "replaces[0].nme", "unknown field, in an ignored field"},
		}},
		{"the reference's field at the wrong level, holding a list of strings", "domain: d\ndescriptors:\n  - key: k\n    replaces: [x]\n", []wantErr{
			{"4:16", "descriptors[0].replaces[0]", `want a mapping, not "x"`},
		}},
		{"the reference's field at the wrong level, holding a fraction", "domain: d\nrequests_per_unit: 1.5\n", []wantErr{
			{"2:20", "requests_per_unit", "not the number 1.5 (the reference server refuses it)"},
		}},
		{"a field given twice, the last of the wrong type", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n    rate_limit: 5\n", []wantErr{
			{"5:17", "descriptors[0].rate_limit", "want a rate limit (a mapping), not the number 5"},
		}},
		{"a field given twice, the first of a mapping unknown", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, colour: red}\n    rate_limit: {requests_per_unit: 1}\n", []wantErr{
			{"4:32", "descriptors[0].rate_limit.colour", "unknown field"},
		}},

		// Wrong types.
		{"descriptors not a list", "domain: d\ndescriptors: abc\n", []wantErr{
			{"2:14", "descriptors", `want a list of descriptors, not "abc"`},
		}},
		{"descriptor not a mapping", "domain: d\ndescriptors:\n  - abc\n", []wantErr{
			{"3:5", "descriptors[0]", `want a descriptor (a mapping), not "abc"`},
		}},
		{"key not a string", "domain: d\ndescriptors:\n  - key: [a]\n", []wantErr{
			{"3:10", "descriptors[0].key", "want a string, not a list"},
		}},
		{"field name not a string", "domain: d\ndescriptors:\n  - key: a\n    ? [x]\n    : 1\n", []wantErr{
			{"4:7", "descriptors[0]", "a field name must be a string, not a list"},
		}},
		{"rate_limit not a mapping", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: 5\n", []wantErr{
			{"4:17", "descriptors[0].rate_limit", "want a rate limit (a mapping), not the number 5"},
		}},
		{"requests_per_unit a word", limitFile("unit: second", "requests_per_unit: ten"), []wantErr{
			{"6:26", "descriptors[0].rate_limit.requests_per_unit", `want a whole number, not "ten"`},
		}},
		{"requests_per_unit quoted", limitFile("unit: second", `requests_per_unit: "10"`), []wantErr{
			{"6:26", "descriptors[0].rate_limit.requests_per_unit", `want a whole number, not "10"`},
		}},
		{"bool not a bool", "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: 3\n", []wantErr{
			{"4:18", "descriptors[0].shadow_mode", "want true or false, not the number 3"},
		}},
		{"quoted bool", "domain: d\ndescriptors:\n  - key: k\n    detailed_metric: \"true\"\n", []wantErr{
			{"4:22", "descriptors[0].detailed_metric", `want true or false, not "true"`},
		}},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n", []wantErr{
			{"4:15", "descriptors[0].metadata", "want a mapping of names to values, not a list"},
		}},
		{"metadata name not a string", "domain: d\ndescriptors:\n  - key: k\n    metadata: {team: {? [a] : 1}}\n", []wantErr{
			{"4:25", "descriptors[0].metadata.team", "a metadata name must be a string, not a list"},
		}},
		{"replaces not a list", limitFile("unit: second", "replaces: x"), []wantErr{
			{"6:17", "descriptors[0].rate_limit.replaces", `want a list such as [{name: other_limit}], not "x"`},
		}},
		{"rate_limits not a list", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: {unit: second}\n", []wantErr{
			{"4:18", "descriptors[0].rate_limits", "want a list of rate limits, not a mapping"},
		}},
		{"file not a mapping", "- a\n- b\n", []wantErr{
			{"1:1", "", "want a rule file (a mapping), not a list"},
		}},

		// Required and empty values.
		{"empty domain", "domain: \"\"\ndescriptors: []\n", []wantErr{
			{"1:9", "domain", "empty"},
		}},
		{"missing domain", "descriptors:\n  - key: k\n", []wantErr{
			{"1:1", "domain", "missing"},
		}},
		{"empty file", "", []wantErr{
			{"1:1", "domain", "missing: the file is empty"},
		}},
		{"empty key", "domain: d\ndescriptors:\n  - key: \"\"\n", []wantErr{
			{"3:10", "descriptors[0].key", "empty"},
		}},
		{"missing key", "domain: d\ndescriptors:\n  - value: v\n", []wantErr{
			{"3:5", "descriptors[0].key", "missing"},
		}},
		{"missing unit", limitFile("requests_per_unit: 1"), []wantErr{
			{"5:7", "descriptors[0].rate_limit.unit", "missing (want second, minute, hour, day, week, month or year, or unlimited: true)"},
		}},

		// Duplicates.
		{"same key and value twice", "domain: d\ndescriptors:\n  - key: k\n    value: v\n  - key: k\n    value: v\n", []wantErr{
			{"5:5", "descriptors[1]", `duplicate descriptor key "k" value "v" at this level, first at rules/api.yaml:3:5`},
		}},
		{"same key-only twice, nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n      - key: k\n", []wantErr{
			{"6:9", "descriptors[0].descriptors[1]", `duplicate descriptor key "k" (no value) at this level, first at rules/api.yaml:5:9`},
		}},
		{"same wildcard twice", "domain: d\ndescriptors:\n  - key: k\n    value: a*\n  - key: k\n    value: a*\n", []wantErr{
			{"5:5", "descriptors[1]", `duplicate descriptor key "k" value "a*"`},
		}},

		// Numbers.
		{"negative requests_per_unit", limitFile("unit: second", "requests_per_unit: -1"), []wantErr{
			{"6:26", "descriptors[0].rate_limit.requests_per_unit", "-1 is negative (want 0 to 4294967295)"},
		}},
		{"fractional requests_per_unit", limitFile("unit: second", "requests_per_unit: 1.5"), []wantErr{
			{"6:26", "descriptors[0].rate_limit.requests_per_unit", "want a whole number, not the number 1.5"},
		}},
		{"requests_per_unit above uint32", limitFile("unit: second", "requests_per_unit: 4294967296"), []wantErr{
			{"6:26", "descriptors[0].rate_limit.requests_per_unit", "4294967296 is too large (want at most 4294967295)"},
		}},
		{"requests_per_unit above int64", limitFile("unit: second", "requests_per_unit: 99999999999999999999"), []wantErr{
			{"6:26", "descriptors[0].rate_limit.requests_per_unit", "is too large (want at most 4294967295)"},
		}},
		{"burst zero", limitFile("unit: second", "algorithm: token_bucket", "burst: 0"), []wantErr{
			{"7:14", "descriptors[0].rate_limit.burst", "0 is too small (want at least 1)"},
		}},
		{"burst on fixed_window", limitFile("unit: second", "burst: 5"), []wantErr{
			{"6:14", "descriptors[0].rate_limit.burst", "fixed_window has no burst (burst applies to token_bucket, leaky_bucket and gcra)"},
		}},
		{"burst on sliding_log", limitFile("unit: second", "algorithm: sliding_log", "burst: 5"), []wantErr{
			{"7:14", "descriptors[0].rate_limit.burst", "sliding_log has no burst"},
		}},
		{"precision zero", limitFile("unit: second", "algorithm: sliding_window", "precision: 0"), []wantErr{
			{"7:18", "descriptors[0].rate_limit.precision", "0 is too small (want at least 1)"},
		}},
		{"precision on token_bucket", limitFile("unit: second", "algorithm: token_bucket", "precision: 4"), []wantErr{
			{"7:18", "descriptors[0].rate_limit.precision", "token_bucket has no precision (precision applies to sliding_window)"},
		}},
		{"precision above the window's milliseconds", limitFile("unit: second", "algorithm: sliding_window", "precision: 1001"), []wantErr{
			{"7:18", "descriptors[0].rate_limit.precision", "1001 sub-windows of a 1s window are shorter than 1ms (want at most 1000)"},
		}},
		{"unit_multiplier zero", limitFile("unit: second", "unit_multiplier: 0"), []wantErr{
			{"6:24", "descriptors[0].rate_limit.unit_multiplier", "0 is too small (want at least 1)"},
		}},
		{"unit_multiplier too long a window", limitFile("unit: year", "unit_multiplier: 1000"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.unit_multiplier", "1000 years is too long a window (want at most 292)"},
		}},

		// Values.
		{"unknown unit", limitFile("unit: secnd", "requests_per_unit: 1"), []wantErr{
			{"5:13", "descriptors[0].rate_limit.unit", `unknown unit "secnd" (want second, minute, hour, day, week, month or year)`},
		}},
		{"unknown algorithm", limitFile("unit: second", "algorithm: token-bucket"), []wantErr{
			{"6:18", "descriptors[0].rate_limit.algorithm", `unknown algorithm "token-bucket" (want fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or gcra)`},
		}},
		{"unknown time zone", limitFile("unit: month", "calendar: true", "timezone: America/Gotham"), []wantErr{
			{"7:17", "descriptors[0].rate_limit.timezone", `unknown time zone "America/Gotham" (want an IANA name such as America/New_York, or UTC)`},
		}},
		{"Local time zone", limitFile("unit: day", "calendar: true", "timezone: Local"), []wantErr{
			{"7:17", "descriptors[0].rate_limit.timezone", `unknown time zone "Local"`},
		}},
		{"unknown failure mode", "domain: d\ndescriptors:\n  - key: k\n    failure_mode: open\n", []wantErr{
			{"4:19", "descriptors[0].failure_mode", `unknown failure mode "open" (want allow, deny or unavailable)`},
		}},

		// Combinations.
		{"unlimited with a unit", limitFile("unlimited: true", "unit: second"), []wantErr{
			{"6:13", "descriptors[0].rate_limit.unit", "given with unlimited: true (an unlimited limit has no unit"},
		}},
		{"unlimited with an algorithm", limitFile("unlimited: true", "algorithm: gcra"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.algorithm", "given with unlimited: true"},
		}},
		{"empty replaces entry", limitFile("unit: second", "replaces: [{name: \"\"}]"), []wantErr{
			{"6:18", "descriptors[0].rate_limit.replaces[0].name", "empty (want the name of the limit to replace)"},
		}},
		{"replaces entry without name", limitFile("unit: second", "replaces: [{}]"), []wantErr{
			{"6:18", "descriptors[0].rate_limit.replaces[0].name", "empty"},
		}},
		{"replaces itself", limitFile("unit: second", "name: me", "replaces: [{name: me}]"), []wantErr{
			{"7:7", "descriptors[0].rate_limit.replaces", `replaces its own name "me"`},
		}},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n", []wantErr{
			{"5:22", "descriptors[0].share_threshold", `needs a wildcard value containing * (value "v" has none)`},
		}},
		{"share_threshold on key-only", "domain: d\ndescriptors:\n  - key: k\n    share_threshold: true\n", []wantErr{
			{"4:22", "descriptors[0].share_threshold", "needs a wildcard value containing * (this descriptor has no value)"},
		}},
		{"calendar with hours", limitFile("unit: hour", "calendar: true"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.calendar", "needs unit day, week, month or year, not hour"},
		}},
		{"calendar with seconds", limitFile("unit: second", "calendar: true"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.calendar", "not second"},
		}},
		{"calendar with minutes", limitFile("unit: minute", "calendar: true"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.calendar", "not minute"},
		}},
		{"calendar with sliding_window", limitFile("unit: day", "algorithm: sliding_window", "calendar: true"), []wantErr{
			{"7:7", "descriptors[0].rate_limit.calendar", "needs algorithm fixed_window, not sliding_window"},
		}},
		{"calendar with a multiplier", limitFile("unit: day", "unit_multiplier: 2", "calendar: true"), []wantErr{
			{"7:7", "descriptors[0].rate_limit.calendar", "needs unit_multiplier 1, not 2"},
		}},
		{"timezone without calendar", limitFile("unit: day", "timezone: UTC"), []wantErr{
			{"6:7", "descriptors[0].rate_limit.timezone", "given without calendar: true"},
		}},
		{"rate_limit and rate_limits", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n    rate_limits: [{unit: day}]\n", []wantErr{
			{"5:5", "descriptors[0].rate_limits", "given together with rate_limit"},
		}},
		{"rate_limits empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limits: []\n", []wantErr{
			{"4:18", "descriptors[0].rate_limits", "empty (want at least one rate limit"},
		}},
		{"rate_limits with the same window twice", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: second, requests_per_unit: 1}\n      - {unit: second, requests_per_unit: 2}\n", []wantErr{
			{"6:9", "descriptors[0].rate_limits[1]", "same algorithm and window as descriptors[0].rate_limits[0]"},
		}},
		{"rate_limits with the same window spelt differently", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unit: minute, requests_per_unit: 1}\n      - {unit: second, unit_multiplier: 60, requests_per_unit: 2}\n", []wantErr{
			{"6:9", "descriptors[0].rate_limits[1]", "same algorithm and window"},
		}},
		{"rate_limits with unlimited and a limit", "domain: d\ndescriptors:\n  - key: k\n    rate_limits:\n      - {unlimited: true}\n      - {unit: second, requests_per_unit: 2}\n", []wantErr{
			{"5:7", "descriptors[0].rate_limits", "unlimited: true together with other limits"},
		}},

		// YAML itself.
		{"syntax error", "domain: d\ndescriptors:\n  - key: k\n   value: v\n", []wantErr{
			{"4:4", "", "YAML syntax: did not find expected '-' indicator (in the block from line 2)"},
		}},
		{"tab indentation", "domain: d\ndescriptors:\n\t- key: k\n", []wantErr{
			{"3:1", "", "YAML syntax:"},
		}},
		{"control character", "domain: d\x01\n", []wantErr{
			{"1:10", "", "YAML syntax:"},
		}},
		{"two documents", "domain: d\n---\ndomain: e\n", []wantErr{
			{"2:1", "", "a rule file holds one YAML document"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := loadErrors(t, map[string]string{file: tt.src}, Options{})
			for _, w := range tt.want {
				if !hasError(errs, file, w) {
					t.Errorf("no error %s:%s: %s: ...%s...; got:\n%v", file, w.at, w.field, w.msg, (&LoadError{errs}).Error())
				}
			}
		})
	}
}

func TestAliasBombIsRefused(t *testing.T) {
	// Level i is a list of ten distinct descriptors whose children are
	// level i-1: a short file that would expand to 10^8 descriptors.
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for lvl := 0; lvl < 8; lvl++ {
		fmt.Fprintf(&b, "  - key: level%d\n    descriptors: &l%d [", lvl, lvl)
		for k := 0; k < 10; k++ {
			if k > 0 {
				b.WriteString(", ")
			}
			if lvl == 0 {
				fmt.Fprintf(&b, "{key: k%d}", k)
			} else {
				fmt.Fprintf(&b, "{key: k%d, descriptors: *l%d}", k, lvl-1)
			}
		}
		b.WriteString("]\n")
	}
	errs := loadErrors(t, map[string]string{"bomb.yaml": b.String()}, Options{})
	if !hasError(errs, "bomb.yaml", wantErr{"", "", "the file expands to too many YAML nodes"}) {
		t.Errorf("want a too-many-nodes error, got %v", (&LoadError{errs}).Error())
	}
}

func TestDuplicateDomain(t *testing.T) {
	files := map[string]string{
		"rules/a.yaml": "domain: shop\ndescriptors:\n  - key: k\n",
		"rules/b.yaml": "# second file\ndomain: shop\ndescriptors:\n  - key: j\n",
	}
	errs := loadErrors(t, files, Options{})
	w := wantErr{"2:9", "domain", `duplicate domain "shop", first declared at rules/a.yaml:1:9`}
	if !hasError(errs, "rules/b.yaml", w) {
		t.Errorf("want %+v, got %v", w, (&LoadError{errs}).Error())
	}

	set, err := Parse(bytesMap(files), Options{MergeDomains: true})
	if err != nil {
		t.Fatalf("with MergeDomains: %v", err)
	}
	for _, key := range []string{"k", "j"} {
		if set.Match("shop", []Entry{{key, "x"}}) == nil {
			t.Errorf("merged domain lacks the rule for %q", key)
		}
	}

	// Merging still refuses the same descriptor twice.
	files["rules/b.yaml"] = "domain: shop\ndescriptors:\n  - key: k\n"
	errs = loadErrors(t, files, Options{MergeDomains: true})
	w = wantErr{"3:5", "descriptors[0]", `duplicate descriptor key "k" (no value) at this level, first at rules/a.yaml:3:5`}
	if !hasError(errs, "rules/b.yaml", w) {
		t.Errorf("want %+v, got %v", w, (&LoadError{errs}).Error())
	}
}

func TestAllErrorsOfALoadAreReported(t *testing.T) {
	files := map[string]string{
		"a.yaml": limitFile("unit: secnd", "requests_per_unit: -3", "algorithm: gcra", "burst: 0"),
		"b.yaml": "domain: e\ndescriptors:\n  - key: \"\"\n  - key: x\n    rate_limit: {unit: day, calendar: true, timezone: Mars/Base}\n",
		"c.yaml": "domain: ok\ndescriptors:\n  - key: fine\n",
	}
	errs := loadErrors(t, files, Options{})
	want := []struct {
		file string
		w    wantErr
	}{
		{"a.yaml", wantErr{"5:13", "descriptors[0].rate_limit.unit", "unknown unit"}},
		{"a.yaml", wantErr{"6:26", "descriptors[0].rate_limit.requests_per_unit", "negative"}},
		{"a.yaml", wantErr{"8:14", "descriptors[0].rate_limit.burst", "too small"}},
		{"b.yaml", wantErr{"3:10", "descriptors[0].key", "empty"}},
		{"b.yaml", wantErr{"5:55", "descriptors[1].rate_limit.timezone", "unknown time zone"}},
	}
	for _, w := range want {
		if !hasError(errs, w.file, w.w) {
			t.Errorf("missing %s:%s %s", w.file, w.w.at, w.w.field)
		}
	}
	if len(errs) != len(want) {
		t.Errorf("%d errors, want %d:\n%v", len(errs), len(want), (&LoadError{errs}).Error())
	}
	// Sorted by file and position.
	for i := 1; i < len(errs); i++ {
		a, b := errs[i-1].Pos, errs[i].Pos
		if a.File > b.File || a.File == b.File && a.Line > b.Line {
			t.Errorf("errors out of order: %v before %v", a, b)
		}
	}
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want wantErr
	}{
		{"costly sliding log", limitFile("unit: minute", "requests_per_unit: 1001", "algorithm: sliding_log"),
			wantErr{"5:7", "descriptors[0].rate_limit", "sliding_log keeps one entry per admitted hit: 1001 per window"}},
		{"costly precision", limitFile("unit: hour", "requests_per_unit: 10", "algorithm: sliding_window", "precision: 3600"),
			wantErr{"8:18", "descriptors[0].rate_limit.precision", "3600 sub-window counters"}},
		{"missing requests_per_unit", limitFile("unit: minute"),
			wantErr{"5:7", "descriptors[0].rate_limit.requests_per_unit", "missing, so 0: every request is denied"}},
		{"requests_per_unit with unlimited", limitFile("unlimited: true", "requests_per_unit: 5"),
			wantErr{"6:26", "descriptors[0].rate_limit.requests_per_unit", "ignored"}},
		{"replaces an unknown name", limitFile("unit: minute", "requests_per_unit: 5", "replaces: [{name: nobody}]"),
			wantErr{"5:7", "descriptors[0].rate_limit.replaces", `no limit of domain "d" is named "nobody"`}},
		{"rules after a catch-all wildcard", "domain: d\ndescriptors:\n  - key: k\n    value: \"*\"\n  - key: k\n    value: a*\n  - key: k\n",
			wantErr{"5:5", "descriptors[1]", `never matched: the wildcard "*" at w.yaml:3:5 matches every value first`}},
		{"key-only after a catch-all wildcard, nested", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: k\n        value: \"**\"\n      - key: k\n",
			wantErr{"7:9", "descriptors[0].descriptors[1]", `never matched: the wildcard "**" at w.yaml:5:9`}},
		{"a wildcard in a key", "domain: d\ndescriptors:\n  - key: k*\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
			wantErr{"3:10", "descriptors[0].key", `"k*" matches only a key written so: wildcards are for values`}},
		// The reference server checks names against one list, wherever
		// they stand, and ignores those that mean nothing there.
		{"a rate_limit's field on a descriptor", "domain: d\ndescriptors:\n  - key: k\n    unit: second\n",
			wantErr{"4:5", "descriptors[0].unit", "ignored here, as the reference server ignores it (unit belongs to a rate_limit)"}},
		{"a descriptor's field in a rate_limit", limitFile("unit: second", "requests_per_unit: 1", "shadow_mode: true"),
			wantErr{"7:7", "descriptors[0].rate_limit.shadow_mode", "ignored here, as the reference server ignores it (shadow_mode belongs to a descriptor)"}},
		{"a descriptor's field at the top", "domain: d\nkey: k\n",
			wantErr{"2:1", "key", "ignored here, as the reference server ignores it (key belongs to a descriptor)"}},
		{"a RateLimitConfig's name, as Envoy Gateway writes it", "name: first-listener\ndomain: d\n",
			wantErr{"1:1", "name", "ignored here, as the reference server ignores it"}},
		{"a field given twice", "domain: d\ndomain: e\n",
			wantErr{"2:1", "domain", "given twice, at lines 1 and 2: the last is read, as the reference server reads it"}},
		{"a rate_limit given twice", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    rate_limit: {unit: minute}\n",
			wantErr{"5:5", "descriptors[0].rate_limit", "given twice, at lines 4 and 5: the fields of both are read, the later's winning"}},
		{"a field given twice within a rate_limit", limitFile("unit: second", "requests_per_unit: 1", "unit: minute"),
			wantErr{"7:7", "descriptors[0].rate_limit.unit", "given twice, at lines 5 and 7"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse(map[string][]byte{"w.yaml": []byte(tt.src)}, Options{})
			if err != nil {
				t.Fatalf("a warning must not fail the load: %v", err)
			}
			warns := set.Warnings()
			var got []FieldError
			for _, w := range warns {
				got = append(got, FieldError(w))
			}
			if !hasError(got, "w.yaml", tt.want) {
				t.Errorf("no warning %+v; got %v", tt.want, warns)
			}
		})
	}
}

func TestErrorFormat(t *testing.T) {
	e := FieldError{Pos: Position{File: "rules/api.yaml", Line: 14, Column: 7}, Field: "descriptors[2].rate_limit.unit",
		Msg: `unknown unit "secnd" (want second, minute, hour, day, week, month or year)`}
	want := `rules/api.yaml:14:7: descriptors[2].rate_limit.unit: unknown unit "secnd" (want second, minute, hour, day, week, month or year)`
	if e.Error() != want {
		t.Errorf("got  %s\nwant %s", e.Error(), want)
	}
	le := &LoadError{Errors: []FieldError{e, {Pos: Position{File: "x.yaml"}, Msg: "permission denied"}}}
	if got := le.Error(); got != want+"\nx.yaml: permission denied" {
		t.Errorf("LoadError: %q", got)
	}
	if got := (FieldError{Pos: Position{File: "f", Line: 1, Column: 2}, Field: "a", Msg: "b"}).Error(); got != "f:1:2: a: b" {
		t.Errorf("warning: %q", got)
	}
}

func bytesMap(files map[string]string) map[string][]byte {
	out := map[string][]byte{}
	for k, v := range files {
		out[k] = []byte(v)
	}
	return out
}

// TestRepeatedFields: a field given twice means what the reference
// server's decoder makes of it: the last value, and for two mappings the
// later's fields over the earlier's.
func TestRepeatedFields(t *testing.T) {
	tests := []struct {
		name, src string
		want      string // the limit of k=v: name, requests_per_unit/unit
	}{
		{"unit twice", limitFile("unit: second", "requests_per_unit: 3", "unit: minute"), "/3/minute"},
		{"rate_limit twice, overlaid", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: n, unit: second, requests_per_unit: 5}\n    rate_limit: {unit: minute}\n", "n/5/minute"},
		{"rate_limit twice, the last null", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    rate_limit: null\n", "none"},
		{"value twice", "domain: d\ndescriptors:\n  - key: k\n    value: x\n    value: v\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", "/1/hour"},
		{"descriptors twice, the last replacing", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 9}\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n", "/2/hour"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse(map[string][]byte{"r.yaml": []byte(tt.src)}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(set.Warnings()) == 0 || !strings.Contains(set.Warnings()[0].Msg, "given twice") {
				t.Errorf("warnings %v, want one for the field given twice", set.Warnings())
			}
			got := "none"
			if r := set.Match("d", entries("k=v")); r != nil && len(r.Limits) == 1 {
				l := r.Limits[0]
				got = fmt.Sprintf("%s/%d/%s", l.Name, l.RequestsPerUnit, l.Unit)
			}
			if got != tt.want {
				t.Errorf("limit %s, want %s", got, tt.want)
			}
		})
	}
}
