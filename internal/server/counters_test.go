package server

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/counters"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// /counters is served on the debug listener, listed in its index, and
// refused on the public HTTP listener with 403 naming the debug one, for
// a look and a reset alike; without the option neither serves it.
func TestCountersOnlyOnDebug(t *testing.T) {
	set, err := rules.Parse(map[string][]byte{"srv.yaml": []byte(testRules)}, rules.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := limit.NewMemory(limit.MemoryOptions{})
	h, err := counters.New(counters.Options{Rules: func() *rules.Set { return set }, Limiter: m, Resetter: m})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := running(t, Options{Counters: h})
	debug, public := "http://"+s.Addrs().Debug.String(), "http://"+s.Addrs().HTTP.String()
	for _, r := range []struct{ method, path string }{{"GET", "/counters"}, {"POST", "/counters/reset"}} {
		q := r.path + "?domain=srv&user=x"
		if code, body := do(t, r.method, debug+q, ""); code != http.StatusOK || !strings.Contains(body, `"rule": "srv.user"`) {
			t.Errorf("debug listener, %s %s: %d %s", r.method, q, code, body)
		}
		code, body := do(t, r.method, public+q, "")
		if code != http.StatusForbidden || !strings.Contains(body, "debug listener only") || !strings.Contains(body, s.Addrs().Debug.String()) {
			t.Errorf("HTTP listener, %s %s: %d %s, want 403 naming the debug listener", r.method, q, code, body)
		}
	}
	_, index := do(t, "GET", debug+"/", "")
	lines := strings.Split(strings.TrimSpace(index), "\n")
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "/counters: GET ?domain=d&key=value") }) ||
		!slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "/counters/reset: POST") }) {
		t.Errorf("the debug index does not list /counters and /counters/reset:\n%s", index)
	}

	plain, _ := running(t, Options{})
	for _, addr := range []string{plain.Addrs().Debug.String(), plain.Addrs().HTTP.String()} {
		if code, _ := do(t, "GET", "http://"+addr+"/counters?domain=srv&user=x", ""); code != http.StatusNotFound {
			t.Errorf("without Options.Counters, %s/counters: %d, want 404", addr, code)
		}
	}
}
