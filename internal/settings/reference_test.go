package settings

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
)

// honouredSamples give, for each honoured variable, a value that differs
// from the flag's default, and the variables it needs beside it.
var honouredSamples = map[string][]string{
	"HOST":                          {"HOST", "127.0.0.2"},
	"PORT":                          {"PORT", "9080"},
	"DEBUG_HOST":                    {"DEBUG_HOST", "0.0.0.0"},
	"DEBUG_PORT":                    {"DEBUG_PORT", "7070"},
	"GRPC_UDS":                      {"GRPC_UDS", "/run/ratelimit.sock"},
	"GRPC_HOST":                     {"GRPC_HOST", "127.0.0.2"},
	"GRPC_PORT":                     {"GRPC_PORT", "9081"},
	"GRPC_MAX_CONNECTION_AGE":       {"GRPC_MAX_CONNECTION_AGE", "24h"},
	"GRPC_MAX_CONNECTION_AGE_GRACE": {"GRPC_MAX_CONNECTION_AGE_GRACE", "1h"},
	"GRPC_SERVER_USE_TLS":           {"GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c.pem", "GRPC_SERVER_TLS_KEY", "k.pem"},
	"GRPC_SERVER_TLS_CERT":          {"GRPC_SERVER_TLS_CERT", "c.pem"},
	"GRPC_SERVER_TLS_KEY":           {"GRPC_SERVER_TLS_KEY", "k.pem"},
	"GRPC_CLIENT_TLS_CACERT":        {"GRPC_CLIENT_TLS_CACERT", "ca.pem", "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c.pem", "GRPC_SERVER_TLS_KEY", "k.pem"},
	"GRPC_CLIENT_TLS_SAN":           {"GRPC_CLIENT_TLS_SAN", "envoy.svc", "GRPC_CLIENT_TLS_CACERT", "ca.pem", "GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c.pem", "GRPC_SERVER_TLS_KEY", "k.pem"},
	"LOG_LEVEL":                     {"LOG_LEVEL", "WARN"},
	"LOG_FORMAT":                    {"LOG_FORMAT", "json"},
	"CONFIG_TYPE":                   {"CONFIG_TYPE", "GRPC_XDS_SOTW"},
	// The xDS variables count only with CONFIG_TYPE=GRPC_XDS_SOTW.
	"FORCE_START_WITHOUT_INITIAL_CONFIG":            {"FORCE_START_WITHOUT_INITIAL_CONFIG", "true", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_NODE_ID":                       {"CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_NODE_METADATA":                 {"CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,team=core", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_SERVER_URL":                    {"CONFIG_GRPC_XDS_SERVER_URL", "eg.svc:18001", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL": {"CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1s", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS":     {"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "authorization:Bearer t", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_SERVER_USE_TLS":                {"CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT":               {"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "c.pem", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_CLIENT_TLS_KEY":                {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "k.pem", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT":             {"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "ca.pem", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"CONFIG_GRPC_XDS_SERVER_TLS_SAN":                {"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "eg.svc", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "true", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL":           {"XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "1s", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL":               {"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "2m", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"XDS_CLIENT_BACKOFF_RANDOM_FACTOR":              {"XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.2", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"XDS_CLIENT_BACKOFF_JITTER":                     {"XDS_CLIENT_BACKOFF_JITTER", "false", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES":              {"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "16777216", "CONFIG_TYPE", "GRPC_XDS_SOTW"},
	"RUNTIME_ROOT":                                  {"RUNTIME_ROOT", "/srv/rt"},
	"RUNTIME_SUBDIRECTORY":                          {"RUNTIME_SUBDIRECTORY", "ratelimit"},
	"RUNTIME_APPDIRECTORY":                          {"RUNTIME_APPDIRECTORY", "rules"},
	"NEAR_LIMIT_RATIO":                              {"NEAR_LIMIT_RATIO", "0.9"},
	"CACHE_KEY_PREFIX":                              {"CACHE_KEY_PREFIX", "rl_", "REDIS_URL", "h:1"},
	"LIMIT_RESPONSE_HEADERS_ENABLED":                {"LIMIT_RESPONSE_HEADERS_ENABLED", "true"},
	"LIMIT_LIMIT_HEADER":                            {"LIMIT_LIMIT_HEADER", "X-Limit"},
	"LIMIT_REMAINING_HEADER":                        {"LIMIT_REMAINING_HEADER", "X-Left"},
	"LIMIT_RESET_HEADER":                            {"LIMIT_RESET_HEADER", "X-Reset"},
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED":       {"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"},
	"REDIS_TYPE":                                    {"REDIS_TYPE", "CLUSTER", "REDIS_URL", "h:1,h:2"},
	"REDIS_URL":                                     {"REDIS_URL", "h:1"},
	"REDIS_POOL_SIZE":                               {"REDIS_POOL_SIZE", "3", "REDIS_URL", "h:1"},
	"REDIS_AUTH":                                    {"REDIS_AUTH", "pw", "REDIS_URL", "h:1"},
	"REDIS_SENTINEL_AUTH":                           {"REDIS_SENTINEL_AUTH", "spw", "REDIS_TYPE", "SENTINEL", "REDIS_URL", "m,h:1"},
	"REDIS_TLS":                                     {"REDIS_TLS", "true", "REDIS_URL", "h:1"},
	"REDIS_TLS_CLIENT_CERT":                         {"REDIS_TLS_CLIENT_CERT", "c.pem", "REDIS_TLS", "true", "REDIS_URL", "h:1"},
	"REDIS_TLS_CLIENT_KEY":                          {"REDIS_TLS_CLIENT_KEY", "k.pem", "REDIS_TLS", "true", "REDIS_URL", "h:1"},
	"REDIS_TLS_CACERT":                              {"REDIS_TLS_CACERT", "ca.pem", "REDIS_TLS", "true", "REDIS_URL", "h:1"},
	"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION":          {"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true", "REDIS_TLS", "true", "REDIS_URL", "h:1"},
	"REDIS_TIMEOUT":                                 {"REDIS_TIMEOUT", "2s", "REDIS_URL", "h:1"},
	"REDIS_PIPELINE_WINDOW":                         {"REDIS_PIPELINE_WINDOW", "150us", "REDIS_URL", "h:1"},
	"REDIS_PIPELINE_LIMIT":                          {"REDIS_PIPELINE_LIMIT", "8", "REDIS_URL", "h:1"},
	"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION":          {"REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND":                               {"REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	// Without it, REDIS_PERSECOND=true is refused, naming it.
	"REDIS_PERSECOND_URL":                      {"REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND", "true", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_TYPE":                     {"REDIS_PERSECOND_TYPE", "CLUSTER", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2,h:3", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_POOL_SIZE":                {"REDIS_PERSECOND_POOL_SIZE", "3", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_AUTH":                     {"REDIS_PERSECOND_AUTH", "pw", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_SENTINEL_AUTH":            {"REDIS_PERSECOND_SENTINEL_AUTH", "spw", "REDIS_PERSECOND_TYPE", "SENTINEL", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "m,h:2", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_TLS":                      {"REDIS_PERSECOND_TLS", "true", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_TIMEOUT":                  {"REDIS_PERSECOND_TIMEOUT", "2s", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_PIPELINE_WINDOW":          {"REDIS_PERSECOND_PIPELINE_WINDOW", "150us", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	"REDIS_PERSECOND_PIPELINE_LIMIT":           {"REDIS_PERSECOND_PIPELINE_LIMIT", "8", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"},
	"SHADOW_MODE":                              {"SHADOW_MODE", "true"},
	"QUOTA_MODE":                               {"QUOTA_MODE", "true"},
	"RESPONSE_DYNAMIC_METADATA":                {"RESPONSE_DYNAMIC_METADATA", "true"},
	"MERGE_DOMAIN_CONFIG":                      {"MERGE_DOMAIN_CONFIG", "true"},
	"RUNTIME_IGNOREDOTFILES":                   {"RUNTIME_IGNOREDOTFILES", "true"},
	"MEMCACHE_HOST_PORT":                       {"MEMCACHE_HOST_PORT", "m:11211", "BACKEND_TYPE", "memcache"},
	"MEMCACHE_MAX_IDLE_CONNS":                  {"MEMCACHE_MAX_IDLE_CONNS", "4", "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211"},
	"MEMCACHE_SRV":                             {"MEMCACHE_SRV", "_mc._tcp.example", "BACKEND_TYPE", "memcache"},
	"MEMCACHE_SRV_REFRESH":                     {"MEMCACHE_SRV_REFRESH", "1m", "BACKEND_TYPE", "memcache", "MEMCACHE_SRV", "_mc._tcp.example"},
	"MEMCACHE_TLS":                             {"MEMCACHE_TLS", "true", "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211"},
	"MEMCACHE_TLS_CLIENT_CERT":                 {"MEMCACHE_TLS_CLIENT_CERT", "c.pem", "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211", "MEMCACHE_TLS", "true"},
	"MEMCACHE_TLS_CLIENT_KEY":                  {"MEMCACHE_TLS_CLIENT_KEY", "k.pem", "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211", "MEMCACHE_TLS", "true"},
	"MEMCACHE_TLS_CACERT":                      {"MEMCACHE_TLS_CACERT", "ca.pem", "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211", "MEMCACHE_TLS", "true"},
	"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION":  {"MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "true", "BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211", "MEMCACHE_TLS", "true"},
	"USE_STATSD":                               {"USE_STATSD", "true"},
	"USE_DOG_STATSD":                           {"USE_DOG_STATSD", "true"},
	"USE_DOG_STATSD_MOGRIFIERS":                {"USE_DOG_STATSD_MOGRIFIERS", "m", "DOG_STATSD_MOGRIFIER_M_PATTERN", "^a$", "DOG_STATSD_MOGRIFIER_M_NAME", "b"},
	"STATSD_HOST":                              {"STATSD_HOST", "statsd.svc"},
	"STATSD_PORT":                              {"STATSD_PORT", "9125"},
	"STATSD_PROTOCOL":                          {"STATSD_PROTOCOL", "udp"},
	"EXTRA_TAGS":                               {"EXTRA_TAGS", "team:core"},
	"STATS_FLUSH_INTERVAL":                     {"STATS_FLUSH_INTERVAL", "3s"},
	"DISABLE_STATS":                            {"DISABLE_STATS", "true", "USE_STATSD", "true"},
	"USE_PROMETHEUS":                           {"USE_PROMETHEUS", "true"},
	"PROMETHEUS_ADDR":                          {"PROMETHEUS_ADDR", ":19001", "USE_PROMETHEUS", "true"},
	"PROMETHEUS_PATH":                          {"PROMETHEUS_PATH", "/stats", "USE_PROMETHEUS", "true"},
	"PROMETHEUS_MAPPER_YAML":                   {"PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml", "USE_PROMETHEUS", "true"},
	"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS": {"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "true", "USE_PROMETHEUS", "true"},
	"TRACING_ENABLED":                          {"TRACING_ENABLED", "true"},
	"TRACING_SERVICE_NAME":                     {"TRACING_SERVICE_NAME", "rl-edge"},
	"TRACING_SERVICE_NAMESPACE":                {"TRACING_SERVICE_NAMESPACE", "edge"},
	"TRACING_SERVICE_INSTANCE_ID":              {"TRACING_SERVICE_INSTANCE_ID", "rl-0"},
	"TRACING_EXPORTER_PROTOCOL":                {"TRACING_EXPORTER_PROTOCOL", "grpc"},
	"TRACING_SAMPLING_RATE":                    {"TRACING_SAMPLING_RATE", "0.25"},
}

// refusedSamples give, for each variable with values floodgate refuses, one
// such value and, where there is one, a value it accepts (the variables
// after them are set in both cases).
var refusedSamples = map[string]struct {
	bad, good string
	with      []string
}{
	"RUNTIME_WATCH_ROOT":                           {"sometimes", "false", nil},
	"USE_DOG_STATSD":                               {"true", "false", []string{"USE_STATSD", "true"}},
	"BACKEND_TYPE":                                 {"memcache", "redis", nil},
	"CACHE_KEY_PREFIX":                             {"p_", "", nil},
	"REDIS_SOCKET_TYPE":                            {"udp", "tcp", []string{"REDIS_URL", "h:1"}},
	"REDIS_POOL_ON_EMPTY_BEHAVIOR":                 {"CREATE", "WAIT", []string{"REDIS_URL", "h:1"}},
	"REDIS_PERSECOND_SOCKET_TYPE":                  {"udp", "unix", []string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "/run/redis.sock", "REDIS_URL", "h:1"}},
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR":       {"ERROR", "WAIT", []string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"}},
	"REDIS_CLUSTER_PIPELINE_PARALLELISM":           {"-1", "4", []string{"REDIS_URL", "h:1"}},
	"REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM": {"many", "0", []string{"REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_URL", "h:1"}},
	"REDIS_STARTUP_INITIAL_INTERVAL":               {"soon", "1s", []string{"REDIS_URL", "h:1"}},
	"REDIS_STARTUP_MAX_INTERVAL":                   {"30", "30s", []string{"REDIS_URL", "h:1"}},
	"REDIS_STARTUP_MAX_ELAPSED_TIME":               {"never", "0", []string{"REDIS_URL", "h:1"}},
}

// TestReferenceTable walks every variable of the reference server and
// shows it honoured (it changes the configuration), refused at start with
// an error naming it, or accepted without changing anything floodgate
// does, as the table says, so that no variable is ignored in silence.
func TestReferenceTable(t *testing.T) {
	parse := func(t *testing.T, kv ...string) (*Config, error) {
		t.Helper()
		return Load(nil, envOf(kv...))
	}
	defaults, err := parse(t)
	if err != nil {
		t.Fatal(err)
	}
	same := func(a, b *Config) bool {
		x, y := *a, *b
		x.Notes, y.Notes, x.From, y.From = nil, nil, nil, nil
		// A func is never equal; it is the store's, compared in Store.
		x.Rules.Options.Supports, y.Rules.Options.Supports = nil, nil
		return reflect.DeepEqual(x, y)
	}
	seen := map[string]bool{}
	honoured, refused, accepted := 0, 0, 0
	for _, r := range References {
		if seen[r.Name] {
			t.Errorf("%s is in the table twice", r.Name)
		}
		seen[r.Name] = true
		t.Run(r.Name, func(t *testing.T) {
			switch {
			case r.Flag != "":
				honoured++
				kv, ok := honouredSamples[r.Name]
				if !ok {
					t.Fatalf("honoured, but no sample value: add one to honouredSamples")
				}
				c, err := parse(t, kv...)
				if err != nil {
					t.Fatalf("%v", err)
				}
				// The companions alone must leave the change to the
				// variable itself, or be refused for want of it.
				base, err := parse(t, kv[2:]...)
				if err != nil {
					if !strings.Contains(err.Error(), kv[0]) {
						t.Fatalf("the companions alone: %v", err)
					}
					return
				}
				if same(c, base) {
					t.Errorf("%s=%s changed nothing", kv[0], kv[1])
				}
			case r.Refuse != nil:
				refused++
				s, ok := refusedSamples[r.Name]
				if !ok {
					t.Fatalf("refusable, but no sample: add one to refusedSamples")
				}
				_, err := parse(t, append([]string{r.Name, s.bad}, s.with...)...)
				if err == nil || !strings.Contains(err.Error(), r.Name+"="+s.bad+": ") {
					t.Errorf("%s=%s: %v, want a refusal naming it", r.Name, s.bad, err)
				}
				if s.good != "" {
					if _, err := parse(t, append([]string{r.Name, s.good}, s.with...)...); err != nil {
						t.Errorf("%s=%s refused: %v", r.Name, s.good, err)
					}
				}
			default:
				accepted++
				values := []string{"true", "x"}
				if r.Kind != "" {
					values = kindSamples[r.Kind]
				}
				for _, v := range values {
					kv := []string{r.Name, v}
					if r.Redis {
						kv = append(kv, "REDIS_URL", "h:1")
					}
					c, err := parse(t, kv...)
					if err != nil {
						t.Fatalf("%s=%s: %v", r.Name, v, err)
					}
					base := defaults
					if r.Redis {
						base, _ = parse(t, "REDIS_URL", "h:1")
					}
					if !same(c, base) {
						t.Errorf("%s=%s, accepted as without effect, changed the configuration", r.Name, v)
					}
				}
			}
		})
	}
	for name := range honouredSamples {
		if !seen[name] {
			t.Errorf("honouredSamples has %s, which the table lacks", name)
		}
	}
	for name := range refusedSamples {
		if !seen[name] {
			t.Errorf("refusedSamples has %s, which the table lacks", name)
		}
	}
	t.Logf("%d variables: %d honoured, %d with refused values, %d accepted", len(References), honoured, refused, accepted)
}

// TestReferenceVariablesBothWays: the table has a row for every variable
// the reference server reads (testdata/reference-variables.txt, from its
// settings.go and the libraries that read the environment, at the commit
// docs/migrating.md names) and for no other, each with where it is read;
// the variables the reference reads and floodgate would not know are the
// ones a migration trips over.
func TestReferenceVariablesBothWays(t *testing.T) {
	b, err := os.ReadFile("testdata/reference-variables.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if name, source, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			want[name] = source
		}
	}
	for _, r := range References {
		source := r.Source
		if source == "" {
			source = "settings.go"
		}
		switch w, ok := want[r.Name]; {
		case !ok:
			t.Errorf("%s is in the table but the reference does not read it", r.Name)
		case w != source:
			t.Errorf("%s: the table says it is read by %s, the reference reads it in %s", r.Name, source, w)
		}
		delete(want, r.Name)
	}
	for name, source := range want {
		t.Errorf("the reference reads %s (%s), which the table lacks: honour it, refuse it or note it", name, source)
	}
}

// TestDogStatsdTags: with DogStatsD, DD_ENV, DD_SERVICE, DD_VERSION and
// DD_ENTITY_ID tag every stat, as the reference's DogStatsD client does;
// without it they change nothing.
func TestDogStatsdTags(t *testing.T) {
	env := []string{"DD_ENV", "prod", "DD_SERVICE", "rl", "DD_VERSION", "1.2", "DD_ENTITY_ID", "pod-1", "EXTRA_TAGS", "team:core"}
	c, err := Load(nil, envOf(append(env, "USE_DOG_STATSD", "true")...))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(c.Statsd.Options.Tags)
	if want := "[{team core} {env prod} {service rl} {version 1.2} {dd.internal.entity_id pod-1}]"; got != want {
		t.Errorf("tags %s, want %s", got, want)
	}
	c, err = Load(nil, envOf(env...))
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.Statsd.Options.Tags); got != "[{team core}]" {
		t.Errorf("without DogStatsD: tags %s, want only EXTRA_TAGS'", got)
	}
}

// kindSamples are values that parse as each kind.
var kindSamples = map[kind][]string{
	kindBool: {"true", "false"}, kindInt: {"7", "0x10"}, kindFloat: {"0.5"}, kindDuration: {"3s"}, kindMap: {"a:b,c:d"},
}

// TestReferenceKinds: a value that does not parse as the reference parses
// its variable (a bool, number, duration or map) is refused naming it,
// whatever the mode, as the reference refuses to start with it: with
// Memcached off, per-second Redis off, xDS off, for a REDIS_* variable
// with Memcached on, which the reference ignores but parses all the same,
// and set empty.
func TestReferenceKinds(t *testing.T) {
	for _, r := range References {
		if r.Kind == "" {
			continue
		}
		for _, with := range [][]string{{"REDIS_URL", "h:1"}, {"BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "h:1"}} {
			_, err := Load(nil, envOf(append([]string{r.Name, "x y"}, with...)...))
			if err == nil || !strings.Contains(err.Error(), r.Name) {
				t.Errorf("%s=x y with %q: %v, want a refusal naming it", r.Name, with, err)
			}
		}
		// Set empty, it is parsed all the same; an empty map is a map.
		_, err := Load(nil, envOf(r.Name, "", "REDIS_URL", "h:1"))
		if refused := err != nil && strings.Contains(err.Error(), r.Name+`="": `); refused != (r.Kind != kindMap) {
			t.Errorf("%s set empty: %v", r.Name, err)
		}
	}
}

// unlessWhole takes the integers the reference's envconfig reads (base 0:
// hexadecimal, octal, underscores), 0 or more.
func TestUnlessWhole(t *testing.T) {
	for v, refused := range map[string]bool{"0": false, "4": false, "0x10": false, "010": false, "1_000": false, "+2": false,
		"-1": true, "abc": true, "1.5": true, " 4": true} {
		if got := unlessWhole(v, nil) != ""; got != refused {
			t.Errorf("unlessWhole(%q) refuses: %v, want %v", v, got, refused)
		}
	}
}
