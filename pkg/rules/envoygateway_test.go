package rules

import (
	"fmt"
	"testing"

	"github.com/floodgate/floodgate/internal/xdstest"
)

// TestEnvoyGatewayRuleFiles: every RateLimitConfig Envoy Gateway's
// translator writes in its test data loads as a rule file of its own. Its
// top-level name, which the reference server accepts and ignores, is
// ignored with a warning naming its line; nothing else warns.
func TestEnvoyGatewayRuleFiles(t *testing.T) {
	docs, limits := 0, 0
	for _, c := range xdstest.GatewayCases(t) {
		for i, doc := range c.Docs {
			name := fmt.Sprintf("%s-%d.yaml", c.Name, i)
			set, err := Parse(map[string][]byte{name: []byte(doc)}, Options{})
			if err != nil {
				t.Errorf("%v", err)
				continue
			}
			want := name + ":1:1: name: ignored here, as the reference server ignores it (name belongs to a rate_limit)"
			if w := set.Warnings(); len(w) != 1 || w[0].Error() != want {
				t.Errorf("%s: warnings %v, want\n%s", name, w, want)
			}
			for _, r := range set.Rules() {
				limits += len(r.Limits)
			}
			docs++
		}
	}
	// The commit's data: 26 files of 33 documents, holding 44 limits.
	if docs != 33 || limits != 44 {
		t.Errorf("%d documents, %d limits, want 33 and 44 (Envoy Gateway's test data at %s)", docs, limits, xdstest.GatewayCommit)
	}
}
