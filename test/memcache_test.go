package test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
)

// TestMemcacheReferenceEnvironment starts the binary with only the
// reference server's Memcached variables: fixed windows are counted in the
// real memcached (a refused request charges nothing), /rlconfig names the
// store, and a rule with an algorithm Memcached cannot do atomically stops
// the start with its file:line and name.
func TestMemcacheReferenceEnvironment(t *testing.T) {
	mc := memcachedtest.Start(t)
	root := t.TempDir()
	dir := filepath.Join(root, "rl", "config")
	writeRules(t, dir, map[string]string{"rules.yaml": `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`})
	env := []string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl", "USE_STATSD=false",
		"BACKEND_TYPE=memcache", "MEMCACHE_HOST_PORT=" + mc.Addr, "CACHE_KEY_PREFIX=mc_"}
	p := start(t, options{env: env})
	var got []string
	for range 3 {
		got = append(got, summary(p.mustCall(request("shop", desc("user", "ann")))))
	}
	if want := []string{"OK OK:1", "OK OK:0", "OVER OVER:0"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
		t.Fatalf("answers %q, want %q", got, want)
	}
	if code, body := p.httpGet("/rlconfig"); code != 200 || !strings.Contains(body, "memcache") || !strings.Contains(body, mc.Addr) {
		t.Errorf("/rlconfig %d does not name the memcache store at %s:\n%s", code, mc.Addr, body)
	}

	writeRules(t, dir, map[string]string{"rules.yaml": `domain: shop
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: token_bucket}
`})
	out, code := harness.Run(t, harness.Options{Args: []string{"-check"}, Env: env})
	if code == 0 || !strings.Contains(out, "rules.yaml:4") || !strings.Contains(out, "token_bucket") {
		t.Errorf("-check with BACKEND_TYPE=memcache and a token bucket: exit code %d\n%s", code, out)
	}
}
