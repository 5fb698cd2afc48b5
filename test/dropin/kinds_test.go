package dropin

import (
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/settings"
)

// kindSentinel is the last variable of the reference's settings struct
// that it parses as other than a string: set to a value nothing parses,
// it stops the reference at start, after every variable before it.
const kindSentinel = "TRACING_SAMPLING_RATE"

// TestVariableKinds: each variable of the reference's settings.go that the
// reference refuses to start with when its value does not parse (a bool,
// number, duration or map: it parses them all at start, whatever the
// mode), floodgate refuses too, naming it, and settings.References says
// so (Kind); one the reference takes as a string has no Kind. The
// reference decides: it runs with the variable and kindSentinel both set
// to a value nothing parses, and names the first it cannot parse.
func TestVariableKinds(t *testing.T) {
	ref := harness.Require(t, harness.Reference)
	const bad = "x y"
	if out, _ := harness.Run(t, harness.Options{Bin: ref, Env: []string{kindSentinel + "=" + bad}}); !strings.Contains(out, "assigning "+kindSentinel+" to ") {
		t.Fatalf("%s=%q alone does not stop the reference:\n%s", kindSentinel, bad, out)
	}
	for _, r := range settings.References {
		if r.Source != "" {
			continue // not read by its settings.go
		}
		out, _ := harness.Run(t, harness.Options{Bin: ref, Env: []string{r.Name + "=" + bad, kindSentinel + "=" + bad}})
		parsed := strings.Contains(out, "assigning "+r.Name+" to ")
		if !parsed && !strings.Contains(out, "assigning "+kindSentinel+" to ") {
			t.Fatalf("%s=%q: the reference stopped neither on it nor on %s:\n%s", r.Name, bad, kindSentinel, out)
		}
		if parsed != (r.Kind != "") {
			t.Errorf("%s: the reference parses it (refuses %q): %v; settings.References gives it the kind %q", r.Name, bad, parsed, r.Kind)
		}
		if !parsed {
			continue
		}
		for _, with := range [][]string{{"REDIS_URL=127.0.0.1:6379"}, {"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=127.0.0.1:11211"}} {
			env := append([]string{r.Name + "=" + bad}, with...)
			if _, err := settings.Load(nil, lookup(env)); err == nil || !strings.Contains(err.Error(), r.Name) {
				t.Errorf("%q: floodgate %v, where the reference refuses to start", env, err)
			}
		}
		// Set, but empty or blank: the reference parses that too, and
		// an empty map is the one such value it takes.
		for _, v := range []string{"", " "} {
			out, _ = harness.Run(t, harness.Options{Bin: ref, Env: []string{r.Name + "=" + v, kindSentinel + "=" + bad}})
			refuses := strings.Contains(out, "assigning "+r.Name+" to ")
			_, err := settings.Load(nil, lookup([]string{r.Name + "=" + v, "REDIS_URL=127.0.0.1:6379"}))
			if floodgate := err != nil && strings.Contains(err.Error(), r.Name); floodgate != refuses {
				t.Errorf("%s=%q: the reference refuses to start: %v; floodgate: %v", r.Name, v, refuses, err)
			}
		}
	}
}

// lookup reads an environment given as NAME=value lines.
func lookup(env []string) settings.Lookup {
	return func(name string) (string, bool) {
		for _, kv := range env {
			if n, v, ok := strings.Cut(kv, "="); ok && n == name {
				return v, true
			}
		}
		return "", false
	}
}
