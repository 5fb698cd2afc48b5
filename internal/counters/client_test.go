package counters

import (
	"slices"
	"testing"

	"github.com/floodgate/floodgate/pkg/rules"
)

// The client's query reads back, through the handler's parser, as the
// domain and entries it was built from: in order, with the characters a
// query gives meaning to, and an entry named domain after the domain.
func TestQueryRoundTrip(t *testing.T) {
	entries := []Entry{{"k&1", "v=2"}, {"domain", "x y+z"}, {"ü", ""}, {"k&1", "%41"}}
	domain, got, err := parseQuery(query("d&=?", entries))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]rules.Entry, len(entries))
	for i, e := range entries {
		want[i] = rules.Entry{Key: e.Key, Value: e.Value}
	}
	if domain != "d&=?" || !slices.Equal(got, want) {
		t.Errorf("parseQuery(query(...)) = %q, %q; want %q, %q", domain, got, "d&=?", want)
	}
}
