package rules

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
)

// Options.Supports sees every limit but the unlimited ones, each once with
// its Spec; a refusal is a problem at the limit's position naming its
// rule, and the load fails as with any other problem.
func TestSupportsSeesEachLimit(t *testing.T) {
	var seen []string
	refuseMinutes := func(sp limit.Spec) error {
		seen = append(seen, fmt.Sprintf("%v/%v", sp.Algorithm, sp.Window))
		if sp.Window == time.Minute {
			return errors.New("no minutes here")
		}
		return nil
	}
	_, err := Parse(map[string][]byte{"d.yaml": []byte(`domain: d
descriptors:
  - key: open
    rate_limit: {unlimited: true}
  - key: k
    rate_limits:
      - {unit: second, requests_per_unit: 5, algorithm: gcra}
      - {unit: minute, requests_per_unit: 50}
`)}, Options{Supports: refuseMinutes})
	const want = "d.yaml:8:9: rule d.k: no minutes here"
	var le *LoadError
	if !errors.As(err, &le) || len(le.Errors) != 1 || le.Errors[0].Error() != want {
		t.Fatalf("Parse: %v, want the one problem %q", err, want)
	}
	if fmt.Sprint(seen) != "[gcra/1s fixed_window/1m0s]" {
		t.Errorf("Supports saw %v, want the two limited limits in file order", seen)
	}
}
