package test

import (
	"net"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/statsdtest"
)

// TestStatsdReferenceNames starts the binary with only the reference
// server's statsd variables and checks, on a real UDP socket, that its
// dashboards' stat names arrive with the counts of a known sequence: three
// requests to a limit of two per minute, one of them over, and a config
// load. The last counts are sent when the server stops.
func TestStatsdReferenceNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		line func(name, value string) string // a stat line as the reference writes it
	}{
		{"statsd with EXTRA_TAGS", []string{"USE_STATSD=true", "EXTRA_TAGS=env:prod"},
			func(name, value string) string { return name + ".__env=prod:" + value }},
		{"DogStatsD with EXTRA_TAGS", []string{"USE_DOG_STATSD=true", "EXTRA_TAGS=env:prod"},
			func(name, value string) string { return name + ":" + value + "|#env:prod" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sink := statsdtest.Listen(t)
			host, port, _ := net.SplitHostPort(sink.Addr())
			root := t.TempDir()
			writeRules(t, filepath.Join(root, "rl", "config"), map[string]string{"rules.yaml": `domain: shop
descriptors:
  - key: user
    value: alice
    rate_limit: {unit: minute, requests_per_unit: 2}
`})
			env := append([]string{"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=rl",
				"STATSD_HOST=" + host, "STATSD_PORT=" + port, "STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=1h"}, tc.env...)
			p := start(t, options{env: env})
			for range 3 {
				p.mustCall(request("shop", desc("user", "alice")))
			}
			p.signal(syscall.SIGTERM)
			if code := p.wait(30 * time.Second); code != 0 {
				t.Fatalf("exit %d:\n%s", code, p.Logs)
			}
			rule := "ratelimit.service.rate_limit.shop.user_alice."
			want := []string{tc.line(rule+"total_hits", "3|c"), tc.line(rule+"within_limit", "2|c"),
				tc.line(rule+"near_limit", "1|c"), tc.line(rule+"over_limit", "1|c"),
				tc.line("ratelimit_server.ShouldRateLimit.total_requests", "3|c")}
			var lines []string
			deadline := time.Now().Add(5 * time.Second)
			for time.Now().Before(deadline) && !slices.Contains(lines, want[0]) {
				lines = append(lines, sink.Lines(t)...)
			}
			for _, w := range want {
				if !slices.Contains(lines, w) {
					t.Errorf("no line %q among:\n%s", w, strings.Join(lines, "\n"))
				}
			}
			// The first load counts (a reload that found nothing new may too).
			if !slices.ContainsFunc(lines, func(l string) bool {
				return strings.HasPrefix(l, "ratelimit.service.config_load_success") && !strings.Contains(l, ":0|")
			}) {
				t.Errorf("no config_load_success among:\n%s", strings.Join(lines, "\n"))
			}
		})
	}
}
