package rules

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// benchRules writes a domain of exactly n rules (descriptors) in which a
// five-entry descriptor passes through every kind of level: an exact value
// among hundreds, a wildcard after nine that fail, a key-only rule beside
// exact values, an exact value, and a shared wildcard.
func benchRules(n int) string {
	var b strings.Builder
	count := 0
	rl := func(indent string) {
		fmt.Fprintf(&b, "%srate_limit: {unit: second, requests_per_unit: 100, algorithm: token_bucket}\n", indent)
	}
	desc := func(indent, key, value string) {
		count++
		fmt.Fprintf(&b, "%s- key: %s\n", indent, key)
		if value != "" {
			fmt.Fprintf(&b, "%s  value: %q\n", indent, value)
		}
	}
	b.WriteString("domain: bench\ndescriptors:\n")
	// The path the benchmark's descriptor takes, with decoys at each level.
	desc("  ", "tenant", "acme")
	b.WriteString("    descriptors:\n")
	for i := 0; i < 9; i++ {
		desc("      ", "path", fmt.Sprintf("/v%d/*/items", i))
		rl("        ")
	}
	desc("      ", "path", "/api/*/orders/*")
	b.WriteString("        descriptors:\n")
	for i := 0; i < 20; i++ {
		desc("          ", "user", fmt.Sprintf("user-%d", i))
		rl("            ")
	}
	desc("          ", "user", "")
	b.WriteString("            descriptors:\n")
	for _, m := range []string{"GET", "PUT", "DELETE"} {
		desc("              ", "method", m)
		rl("                ")
	}
	desc("              ", "method", "POST")
	b.WriteString("                descriptors:\n")
	for i := 0; i < 5; i++ {
		desc("                  ", "region", fmt.Sprintf("ap-%d*", i))
		rl("                    ")
	}
	desc("                  ", "region", "eu-*")
	b.WriteString("                    share_threshold: true\n")
	b.WriteString("                    rate_limits:\n")
	b.WriteString("                      - {unit: second, requests_per_unit: 10, algorithm: sliding_window}\n")
	b.WriteString("                      - {unit: day, requests_per_unit: 10000, algorithm: gcra, burst: 100}\n")
	// Fill up to n with exact values beside the path's first level.
	for i := 0; count < n; i++ {
		desc("  ", "tenant", fmt.Sprintf("tenant-%d", i))
		rl("    ")
	}
	return b.String()
}

var benchEntries = []Entry{
	{"tenant", "acme"},
	{"path", "/api/v2/orders/1234"},
	{"user", "alice@example.com"},
	{"method", "POST"},
	{"region", "eu-west-1"},
}

func benchSet(b *testing.B) *Set {
	set, err := Parse(map[string][]byte{"bench.yaml": []byte(benchRules(1000))}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if n := len(set.Rules()); n != 1000 {
		b.Fatalf("%d rules, want 1000", n)
	}
	if r := set.Match("bench", benchEntries); r == nil || len(r.Limits) != 2 {
		b.Fatalf("the benchmark descriptor does not match its rule")
	}
	return set
}

// BenchmarkMatch matches a five-entry descriptor against 1,000 rules.
func BenchmarkMatch(b *testing.B) {
	set := benchSet(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if set.Match("bench", benchEntries) == nil {
			b.Fatal("no match")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
}

// BenchmarkMatchAndCounterKeys also builds the counter key of every limit,
// which is what a request does before asking the store.
func BenchmarkMatchAndCounterKeys(b *testing.B) {
	set := benchSet(b)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r := set.Match("bench", benchEntries)
		for _, l := range r.Limits {
			buf = r.appendIdentity(buf[:0], l, benchEntries)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "matches/s")
}

// BenchmarkParse compiles the example rule set: the cost of a reload.
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile(exampleConfig + "/demo.yaml")
	if err != nil {
		b.Fatal(err)
	}
	files := map[string][]byte{"demo.yaml": data}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(files, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResolve resolves a request of three descriptors, one matching a
// rule, one with an override and one matching nothing, reusing its
// Resolution as the service does.
func BenchmarkResolve(b *testing.B) {
	set := benchSet(b)
	descs := []Descriptor{
		{Entries: benchEntries},
		{Entries: benchEntries[:1], Override: Override{RequestsPerUnit: 5, Unit: second, UnitMultiplier: 1}},
		{Entries: []Entry{{Key: "none", Value: "x"}}},
	}
	var res Resolution
	b.ReportAllocs()
	for b.Loop() {
		if err := set.Resolve(&res, "bench", descs); err != nil {
			b.Fatal(err)
		}
	}
}
