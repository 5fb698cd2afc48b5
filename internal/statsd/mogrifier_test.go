package statsd_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/statsd"
	"github.com/floodgate/floodgate/internal/statsdtest"
)

// TestMogrifiers: with DogStatsD, the first mogrifier whose pattern matches
// renames a stat and tags it after the extra tags; $n are the submatches,
// and a stat no pattern matches keeps its name.
func TestMogrifiers(t *testing.T) {
	ms, err := statsd.MogrifiersFromEnv("rules,total", env(map[string]string{
		"DOG_STATSD_MOGRIFIER_RULES_PATTERN": `^ratelimit\.service\.rate_limit\.([^.]*)\.(.*)\.([^.]*)$`,
		"DOG_STATSD_MOGRIFIER_RULES_NAME":    "ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_RULES_TAGS":    "domain:$1,descriptor:$2,keep:$9",
		"DOG_STATSD_MOGRIFIER_TOTAL_PATTERN": `^ratelimit\.(.*)$`,
		"DOG_STATSD_MOGRIFIER_TOTAL_NAME":    "rl.$1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	srv := statsdtest.Listen(t)
	c := newClient(t, srv, statsd.Options{DogStatsD: true, Mogrifiers: ms, Tags: []statsd.Tag{{Key: "env", Value: "prod"}}})
	c.Counter("ratelimit.service.rate_limit.shop.path_/api/*.method_GET.total_hits").Add(2)
	c.Counter("ratelimit.service.global_shadow_mode").Inc()
	c.Counter("ratelimit_server.ShouldRateLimit.total_requests").Inc()
	flush(t, c)
	want := []string{
		"ratelimit.service.rate_limit.total_hits:2|c|#env:prod,domain:shop,descriptor:path_/api/*.method_GET,keep:$9",
		"rl.service.global_shadow_mode:1|c|#env:prod",
		"ratelimit_server.ShouldRateLimit.total_requests:1|c|#env:prod",
	}
	if got := srv.Lines(t); !slices.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := vars[k]
		return v, ok
	}
}

func TestMogrifiersFromEnvRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		err  string
	}{
		{"no pattern", map[string]string{"DOG_STATSD_MOGRIFIER_M_NAME": "x"}, "DOG_STATSD_MOGRIFIER_M_PATTERN is not set"},
		{"a pattern that does not compile", map[string]string{"DOG_STATSD_MOGRIFIER_M_PATTERN": "(", "DOG_STATSD_MOGRIFIER_M_NAME": "x"}, "DOG_STATSD_MOGRIFIER_M_PATTERN: error parsing regexp"},
		{"no name", map[string]string{"DOG_STATSD_MOGRIFIER_M_PATTERN": "x"}, "DOG_STATSD_MOGRIFIER_M_NAME is not set"},
		{"a tag without a value", map[string]string{"DOG_STATSD_MOGRIFIER_M_PATTERN": "x", "DOG_STATSD_MOGRIFIER_M_NAME": "x", "DOG_STATSD_MOGRIFIER_M_TAGS": "a:"}, `TAGS: tag "a:" needs a key and a value`},
		{"a tag that is not key:value", map[string]string{"DOG_STATSD_MOGRIFIER_M_PATTERN": "x", "DOG_STATSD_MOGRIFIER_M_NAME": "x", "DOG_STATSD_MOGRIFIER_M_TAGS": "a"}, `TAGS: statsd: tag "a": want key:value`},
	} {
		if _, err := statsd.MogrifiersFromEnv("m", env(tc.vars)); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.err)
		}
	}
	if ms, err := statsd.MogrifiersFromEnv("", env(nil)); ms != nil || err != nil {
		t.Errorf("no list: %v, %v", ms, err)
	}
	_, err := statsd.New(statsd.Options{Mogrifiers: []statsd.Mogrifier{{Pattern: regexp.MustCompile("x"), Name: "y"}}})
	if err == nil || !strings.Contains(err.Error(), "need statsd.Options.DogStatsD") {
		t.Errorf("mogrifiers without DogStatsD: %v", err)
	}
}
