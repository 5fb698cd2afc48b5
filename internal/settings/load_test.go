package settings

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/server"
	"github.com/floodgate/floodgate/internal/store"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/rules"
)

func envOf(kv ...string) Lookup {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   Lookup
		check func(t *testing.T, c *Config)
	}{
		{"defaults", nil, envOf(), func(t *testing.T, c *Config) {
			checks := []struct {
				name      string
				got, want any
			}{
				{"rules", c.Rules.Path, "config"},
				{"redis", c.Store.Redis, store.RedisOptions{Type: "single"}},
				{"per-second", c.Store.PerSecond, store.RedisOptions{Type: "single"}},
				{"grpc", c.Server.GRPCAddr, ":8081"}, {"http", c.Server.HTTPAddr, ":8080"}, {"debug", c.Server.DebugAddr, "127.0.0.1:6070"},
				{"level", c.Log.Level.Level(), slog.LevelInfo}, {"format", c.Log.Format, LogFormat("text")},
				{"ratio", c.Service.NearLimitRatio, 0.8}, {"failure mode", c.Service.FailureMode, rules.FailureAllow},
				{"deadline", c.Store.Deadline, limit.DefaultDeadline}, {"shutdown", c.Server.ShutdownTimeout, 15 * time.Second},
				{"header style", c.Service.Headers.Style, envoy.HeadersOff}, {"limit header", c.Service.Headers.LimitName, "RateLimit-Limit"},
				{"shadow", c.Service.ShadowMode, false}, {"merge", c.Rules.Options.MergeDomains, false},
				{"notes", len(c.Notes), 0},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
				}
			}
		}},
		{"the reference server's variables", nil, envOf(
			"RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit",
			"REDIS_URL", "redis.svc:6379", "REDIS_SOCKET_TYPE", "tcp", "REDIS_TYPE", "cluster", "REDIS_AUTH", "me:secret",
			"REDIS_TLS", "true", "REDIS_POOL_SIZE", "7", "REDIS_TIMEOUT", "2s", "CACHE_KEY_PREFIX", "rl_",
			"PORT", "9080", "GRPC_HOST", "127.0.0.1", "GRPC_PORT", "9081", "DEBUG_HOST", "127.0.0.1",
			"LOG_LEVEL", "WARNING", "LOG_FORMAT", "json", "SHADOW_MODE", "true", "NEAR_LIMIT_RATIO", "0.5",
			"MERGE_DOMAIN_CONFIG", "true", "LIMIT_RESPONSE_HEADERS_ENABLED", "true", "LIMIT_REMAINING_HEADER", "X-Left",
			"USE_PROMETHEUS", "true", "RUNTIME_WATCH_ROOT", "false",
		), func(t *testing.T, c *Config) {
			checks := []struct {
				name      string
				got, want any
			}{
				{"rules path", c.Rules.Path, filepath.Join("/srv/rt", "ratelimit", "config")},
				{"redis", c.Store.Redis.URL, "redis.svc:6379"},
				{"redis type", c.Store.Redis.Type, "cluster"},
				{"redis auth", c.Store.Redis.Auth, "me:secret"},
				{"redis tls", c.Store.Redis.TLS, true},
				{"pool", c.Store.Redis.PoolSize, 7},
				{"dial timeout", c.Store.Redis.DialTimeout, 2 * time.Second},
				{"deadline stays short", c.Store.Deadline, limit.DefaultDeadline},
				{"prefix", c.Store.KeyPrefix, "rl_"},
				{"http", c.Server.HTTPAddr, ":9080"},
				{"grpc", c.Server.GRPCAddr, "127.0.0.1:9081"},
				{"debug", c.Server.DebugAddr, "127.0.0.1:6070"},
				{"level", c.Log.Level.Level(), slog.LevelWarn},
				{"format", c.Log.Format, LogFormat("json")},
				{"shadow", c.Service.ShadowMode, true},
				{"ratio", c.Service.NearLimitRatio, 0.5},
				{"merge", c.Rules.Options.MergeDomains, true},
				{"header style", c.Service.Headers.Style, envoy.HeadersReference},
				{"remaining header", c.Service.Headers.RemainingName, "X-Left"},
				{"limit header default", c.Service.Headers.LimitName, "RateLimit-Limit"},
				{"prometheus", c.Server.PrometheusAddr, ":9090"},
				{"prometheus path", c.Server.PrometheusPath, "/metrics"},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
				}
			}
		}},
		{"ports read as the reference reads them: hexadecimal, octal, underscores", nil,
			envOf("PORT", "0x1f90", "GRPC_PORT", "010", "DEBUG_PORT", "6_071"), func(t *testing.T, c *Config) {
				for _, ch := range []struct{ name, got, want string }{
					{"http", c.Server.HTTPAddr, ":8080"}, {"grpc", c.Server.GRPCAddr, ":8"}, {"debug", c.Server.DebugAddr, "127.0.0.1:6071"},
				} {
					if ch.got != ch.want {
						t.Errorf("%s = %q, want %q", ch.name, ch.got, ch.want)
					}
				}
			}},
		{"flags win over variables, FLOODGATE_ variables over the reference's",
			[]string{"-config", "rules.yaml", "-grpc-addr", "127.0.0.1:1"},
			envOf("FLOODGATE_CONFIG", "x", "RUNTIME_ROOT", "/y", "GRPC_PORT", "2", "FLOODGATE_HTTP_ADDR", ":3", "PORT", "4",
				"FLOODGATE_REDIS", "redis://a:1", "REDIS_URL", "b:2"),
			func(t *testing.T, c *Config) {
				if c.Rules.Path != "rules.yaml" || c.Server.GRPCAddr != "127.0.0.1:1" || c.Server.HTTPAddr != ":3" || c.Store.Redis.URL != "redis://a:1" {
					t.Errorf("got config %s, grpc %s, http %s, redis %s", c.Rules.Path, c.Server.GRPCAddr, c.Server.HTTPAddr, c.Store.Redis.URL)
				}
			}},
		{"a unix socket", nil, envOf("REDIS_SOCKET_TYPE", "unix", "REDIS_URL", "/var/run/redis.sock", "REDIS_AUTH", "pw"),
			func(t *testing.T, c *Config) {
				if c.Store.Redis.URL != "unix:///var/run/redis.sock" {
					t.Errorf("redis = %q", c.Store.Redis.URL)
				}
				if c.Store.Redis.Auth != "pw" {
					t.Errorf("auth = %q", c.Store.Redis.Auth)
				}
			}},
		{"RUNTIME_APPDIRECTORY alone keeps the reference root", nil, envOf("RUNTIME_APPDIRECTORY", "rules"),
			func(t *testing.T, c *Config) {
				if want := filepath.Join("/srv/runtime_data/current", "rules"); c.Rules.Path != want {
					t.Errorf("rules path = %q, want %q", c.Rules.Path, want)
				}
			}},
		{"LIMIT_RESPONSE_HEADERS_ENABLED=false and -response-headers", []string{"-response-headers", "ietf"}, envOf("LIMIT_RESPONSE_HEADERS_ENABLED", "false"),
			func(t *testing.T, c *Config) {
				if c.Service.Headers.Style != envoy.HeadersIETF {
					t.Errorf("style = %v", c.Service.Headers.Style)
				}
			}},
		{"logrus level names", nil, envOf("LOG_LEVEL", "trace"), func(t *testing.T, c *Config) {
			if c.Log.Level.Level() != slog.LevelDebug {
				t.Errorf("level = %v", c.Log.Level.Level())
			}
		}},
		{"variables without effect are noted", nil, envOf("LOCAL_CACHE_SIZE_IN_BYTES", "1000"),
			func(t *testing.T, c *Config) {
				if len(c.Notes) != 1 || !strings.Contains(c.Notes[0], "LOCAL_CACHE_SIZE_IN_BYTES") {
					t.Errorf("notes = %q", c.Notes)
				}
			}},
		{"the reference server's TLS variables", nil, envOf("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/tls/cert.pem",
			"GRPC_SERVER_TLS_KEY", "/tls/key.pem", "GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"), func(t *testing.T, c *Config) {
			if !c.GRPCTLS.On || c.GRPCTLS.Files.CertFile != "/tls/cert.pem" || c.GRPCTLS.Files.KeyFile != "/tls/key.pem" || c.GRPCTLS.Files.ClientCAFile != "/tls/ca.pem" {
				t.Errorf("tls %v cert %q key %q ca %q", c.GRPCTLS.On, c.GRPCTLS.Files.CertFile, c.GRPCTLS.Files.KeyFile, c.GRPCTLS.Files.ClientCAFile)
			}
		}},
		{"a DEBUG_PORT alone stays on loopback", nil, envOf("DEBUG_PORT", "7070"), func(t *testing.T, c *Config) {
			if c.Server.DebugAddr != "127.0.0.1:7070" {
				t.Errorf("debug addr %q", c.Server.DebugAddr)
			}
		}},
		{"an empty DEBUG_HOST listens everywhere, as asked", nil, envOf("DEBUG_HOST", "", "DEBUG_PORT", "7070"), func(t *testing.T, c *Config) {
			if c.Server.DebugAddr != ":7070" {
				t.Errorf("debug addr %q", c.Server.DebugAddr)
			}
		}},
		{"request bounds", []string{"-max-entries", "8"}, envOf("FLOODGATE_MAX_DESCRIPTORS", "10", "FLOODGATE_MAX_KEY_BYTES", "64",
			"FLOODGATE_MAX_VALUE_BYTES", "128", "FLOODGATE_MAX_MESSAGE_BYTES", "65536", "FLOODGATE_METRIC_VALUE_SERIES", "5"), func(t *testing.T, c *Config) {
			want := envoy.RequestBounds{MaxDescriptors: 10, MaxEntries: 8, MaxKeyBytes: 64, MaxValueBytes: 128}
			if c.Service.Bounds != want || c.Server.MaxMessageBytes != 65536 || c.Metrics.MaxValueSeries != 5 {
				t.Errorf("bounds %+v message %d series %d", c.Service.Bounds, c.Server.MaxMessageBytes, c.Metrics.MaxValueSeries)
			}
		}},
		{"connection bounds and timeouts default", nil, envOf(), func(t *testing.T, c *Config) {
			want := server.ConnOptions{GRPCConnectionTimeout: server.DefaultGRPCConnectionTimeout,
				GRPCKeepaliveTime: server.DefaultGRPCKeepaliveTime, GRPCKeepaliveTimeout: server.DefaultGRPCKeepaliveTimeout,
				GRPCMinPingInterval: server.DefaultGRPCMinPingInterval, HTTPReadTimeout: server.DefaultHTTPReadTimeout,
				HTTPWriteTimeout: server.DefaultHTTPWriteTimeout, HTTPIdleTimeout: server.DefaultHTTPIdleTimeout}
			if c.Server.Conns != want {
				t.Errorf("got %+v\nwant %+v", c.Server.Conns, want)
			}
		}},
		{"connection bounds and timeouts from flags and the environment", []string{"-grpc-max-connections", "500", "-http-read-timeout", "2s"},
			envOf("FLOODGATE_HTTP_MAX_CONNECTIONS", "-1", "FLOODGATE_GRPC_CONNECTION_TIMEOUT", "3s", "FLOODGATE_GRPC_KEEPALIVE_TIME", "4s",
				"FLOODGATE_GRPC_KEEPALIVE_TIMEOUT", "5s", "FLOODGATE_GRPC_MAX_CONNECTION_IDLE", "6s", "FLOODGATE_GRPC_MIN_PING_INTERVAL", "7s",
				"FLOODGATE_HTTP_WRITE_TIMEOUT", "8s", "FLOODGATE_HTTP_IDLE_TIMEOUT", "9s", "GRPC_MAX_CONNECTION_AGE", "1h"), func(t *testing.T, c *Config) {
				want := server.ConnOptions{GRPCMaxConns: 500, HTTPMaxConns: -1, GRPCConnectionTimeout: 3 * time.Second,
					GRPCKeepaliveTime: 4 * time.Second, GRPCKeepaliveTimeout: 5 * time.Second, GRPCMaxConnectionIdle: 6 * time.Second,
					GRPCMinPingInterval: 7 * time.Second, HTTPReadTimeout: 2 * time.Second, HTTPWriteTimeout: 8 * time.Second, HTTPIdleTimeout: 9 * time.Second}
				if c.Server.Conns != want || c.Server.MaxConnectionAge != time.Hour {
					t.Errorf("got %+v, age %v\nwant %+v, 1h", c.Server.Conns, c.Server.MaxConnectionAge, want)
				}
			}},
		{"the deny cache is on by default", nil, envOf(), func(t *testing.T, c *Config) {
			if c.Store.DenyCache.Disabled || c.Store.DenyCache.MaxEntries != 0 || c.Store.DenyCache.MaxAge != time.Second {
				t.Errorf("deny cache disabled %v size %d", c.Store.DenyCache.Disabled, c.Store.DenyCache.MaxEntries)
			}
		}},
		{"the deny cache from the environment", nil, envOf("FLOODGATE_DENY_CACHE", "false", "FLOODGATE_DENY_CACHE_SIZE", "1000", "FLOODGATE_DENY_CACHE_MAX_AGE", "250ms"), func(t *testing.T, c *Config) {
			if !c.Store.DenyCache.Disabled || c.Store.DenyCache.MaxEntries != 1000 || c.Store.DenyCache.MaxAge != 250*time.Millisecond {
				t.Errorf("deny cache disabled %v size %d", c.Store.DenyCache.Disabled, c.Store.DenyCache.MaxEntries)
			}
		}},
		{"the per-second Redis from the reference's variables", nil, envOf(
			"REDIS_URL", "main:6379", "REDIS_PERSECOND", "True", "REDIS_PERSECOND_URL", "/run/ps.sock", "REDIS_PERSECOND_SOCKET_TYPE", "unix",
			"REDIS_PERSECOND_TYPE", "SINGLE", "REDIS_PERSECOND_AUTH", "u:p", "REDIS_PERSECOND_TLS", "false",
			"REDIS_PERSECOND_POOL_SIZE", "4", "REDIS_PERSECOND_TIMEOUT", "3s", "REDIS_TLS", "true", "REDIS_TLS_CACERT", "/ca.pem",
		), func(t *testing.T, c *Config) {
			want := store.RedisOptions{URL: "unix:///run/ps.sock", Type: "SINGLE", Auth: "u:p", PoolSize: 4, DialTimeout: 3 * time.Second}
			if c.Store.PerSecond != want {
				t.Errorf("per-second %+v\nwant %+v", c.Store.PerSecond, want)
			}
			if c.Store.Redis.URL != "main:6379" || !c.Store.Redis.TLS || c.Store.RedisTLSFiles.CAFile != "/ca.pem" {
				t.Errorf("main %+v, TLS files %+v", c.Store.Redis, c.Store.RedisTLSFiles)
			}
		}},
		{"REDIS_PERSECOND_* are read only with REDIS_PERSECOND=true, as in the reference", nil, envOf(
			"REDIS_URL", "main:6379", "REDIS_PERSECOND", "false", "REDIS_PERSECOND_URL", "ps:6379", "REDIS_PERSECOND_TYPE", "cluster",
			"REDIS_PERSECOND_AUTH", "pw", "REDIS_PERSECOND_TLS", "true", "REDIS_PERSECOND_POOL_SIZE", "4", "REDIS_PERSECOND_SOCKET_TYPE", "udp",
			"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "ERROR", "REDIS_PERSECOND_PIPELINE_WINDOW", "1ms",
		), func(t *testing.T, c *Config) {
			if c.Store.PerSecond != (store.RedisOptions{Type: "single"}) || len(c.Notes) != 0 {
				t.Errorf("per-second %+v, notes %q: want none", c.Store.PerSecond, c.Notes)
			}
		}},
		{"REDIS_* are ignored with BACKEND_TYPE=memcache, as in the reference, and named in a note", nil, envOf(
			"BACKEND_TYPE", "memcache", "MEMCACHE_HOST_PORT", "m:11211",
			"REDIS_URL", "redis.svc:6379", "REDIS_SOCKET_TYPE", "udp", "REDIS_POOL_SIZE", "7",
			"REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "ps:6379",
		), func(t *testing.T, c *Config) {
			if c.Store.Redis.URL != "" || c.Store.PerSecond.URL != "" || c.Store.Memcache.Servers != "m:11211" {
				t.Errorf("redis %q, per-second %q, memcache %q: want Memcached alone", c.Store.Redis.URL, c.Store.PerSecond.URL, c.Store.Memcache.Servers)
			}
			want := "BACKEND_TYPE=memcache: REDIS_SOCKET_TYPE, REDIS_URL, REDIS_POOL_SIZE, REDIS_PERSECOND, REDIS_PERSECOND_URL ignored"
			if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
				t.Errorf("notes %q: want one starting %q", c.Notes, want)
			}
		}},
		{"CONFIG_GRPC_XDS_NODE_METADATA drops entries without '=', as the reference, and names them", nil, envOf(
			"CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA", "zone:a,team=core,,solo",
		), func(t *testing.T, c *Config) {
			if got := c.Rules.XDSOptions.NodeMetadata; len(got) != 1 || got["team"] != "core" {
				t.Errorf("node metadata %v, want team=core alone", got)
			}
			want := `CONFIG_GRPC_XDS_NODE_METADATA: "zone:a", "solo" dropped`
			if !slices.ContainsFunc(c.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
				t.Errorf("notes %q: want one starting %q", c.Notes, want)
			}
		}},
		{"FLOODGATE_REDIS_PERSECOND* follow the flags' names", nil, envOf(
			"FLOODGATE_REDIS", "main:6379", "FLOODGATE_REDIS_PERSECOND", "rediss://ps:6380", "FLOODGATE_REDIS_PERSECOND_TYPE", "Sentinel",
			"FLOODGATE_REDIS_PERSECOND_SENTINEL_AUTH", "spw", "FLOODGATE_REDIS_PERSECOND_DIAL_TIMEOUT", "1s", "FLOODGATE_REDIS_TLS_CA", "/ca.pem",
		), func(t *testing.T, c *Config) {
			want := store.RedisOptions{URL: "rediss://ps:6380", Type: "Sentinel", SentinelAuth: "spw", DialTimeout: time.Second}
			if c.Store.PerSecond != want || c.Store.RedisTLSFiles.CAFile != "/ca.pem" {
				t.Errorf("per-second %+v\nwant %+v, with the shared TLS files", c.Store.PerSecond, want)
			}
		}},
		{"-explain takes a descriptor", []string{"-explain", "rl", "k=v"}, envOf(), func(t *testing.T, c *Config) {
			if !c.Command.Explain || len(c.Command.Args) != 2 {
				t.Errorf("explain %v args %q", c.Command.Explain, c.Command.Args)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  Lookup
		want string
	}{
		{"a bad variable names itself and the flag", nil, envOf("REDIS_POOL_SIZE", "many"), `REDIS_POOL_SIZE="many" (for -redis-pool-size)`},
		{"a bad boolean", nil, envOf("SHADOW_MODE", "maybe"), `SHADOW_MODE="maybe"`},
		{"a bad header switch", nil, envOf("LIMIT_RESPONSE_HEADERS_ENABLED", "yes please"), "LIMIT_RESPONSE_HEADERS_ENABLED (want true or false)"},
		{"gRPC TLS without a certificate", nil, envOf("GRPC_SERVER_USE_TLS", "true"), "-grpc-tls needs -grpc-tls-cert and -grpc-tls-key"},
		{"a client CA without TLS", []string{"-grpc-client-ca", "ca.pem"}, envOf(), "-grpc-client-ca (GRPC_CLIENT_TLS_CACERT) needs -grpc-tls"},
		{"a negative bound", nil, envOf("FLOODGATE_MAX_DESCRIPTORS", "-1"), "-max-descriptors -1: must not be negative (set by FLOODGATE_MAX_DESCRIPTORS)"},
		{"a negative message size", []string{"-max-message-bytes", "-1"}, envOf(), "-max-message-bytes -1: must not be negative"},
		{"memcache is refused", nil, envOf("BACKEND_TYPE", "memcache"), "BACKEND_TYPE=memcache: MEMCACHE_HOST_PORT or MEMCACHE_SRV is not set"},
		{"Prometheus beside DogStatsD, as the reference", nil, envOf("USE_PROMETHEUS", "true", "USE_DOG_STATSD", "true"), "USE_PROMETHEUS=true: USE_DOG_STATSD and USE_PROMETHEUS are both true, which the reference refuses too"},
		{"-dogstatsd beside -prometheus-addr", []string{"-dogstatsd", "-prometheus-addr", ":19001"}, envOf(), "-dogstatsd and -prometheus-addr: the Prometheus metrics map plain statsd names"},
		{"a Prometheus setting without the listener", []string{"-prometheus-mapper", "m.yaml"}, envOf(), "-prometheus-mapper set, but -prometheus-addr (USE_PROMETHEUS=true) is not"},
		{"a Prometheus path that is no path", nil, envOf("USE_PROMETHEUS", "true", "PROMETHEUS_PATH", "metrics"), `-prometheus-path "metrics": want a path starting with / (set by PROMETHEUS_PATH)`},
		{"a Prometheus port that is no port", nil, envOf("USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", ":prom"), `-prometheus-addr ":prom": port "prom"`},
		{"every refusal at once", nil, envOf("USE_STATSD", "true", "USE_DOG_STATSD", "true", "TRACING_ENABLED", "true"), "USE_DOG_STATSD=true: USE_STATSD and USE_DOG_STATSD are both true"},
		{"a Redis setting without Redis", nil, envOf("REDIS_TLS", "true"), "REDIS_TLS is set but REDIS_URL is not"},
		{"Redis TLS files without TLS", nil, envOf("REDIS_URL", "h:1", "REDIS_TLS_CACERT", "/ca.pem"), "need -redis-tls (REDIS_TLS=true) or -redis-persecond-tls"},
		{"a client SAN without mutual TLS", nil, envOf("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "c", "GRPC_SERVER_TLS_KEY", "k", "GRPC_CLIENT_TLS_SAN", "envoy"), "GRPC_CLIENT_TLS_SAN) needs -grpc-client-ca"},
		{"a sentinel password without Sentinel", nil, envOf("REDIS_URL", "h:1", "REDIS_SENTINEL_AUTH", "pw"), "needs -redis-type sentinel"},
		{"unknown redis type", []string{"-redis-type", "ring"}, envOf(), `-redis-type "ring"`},
		{"an xDS flag without xDS", []string{"-xds-server", "eg:18001"}, envOf(), "-xds-server set, but the rules come from files: xDS settings need -config-type grpc_xds_sotw"},
		{"an xDS variable under CONFIG_TYPE=FILE names itself first", nil, envOf("CONFIG_TYPE", "FILE", "FLOODGATE_XDS_SERVER", "x:1"), "(set by FLOODGATE_XDS_SERVER, CONFIG_TYPE)"},
		{"every xDS flag set is named", []string{"-xds-node-id", "n", "-xds-tls"}, envOf(), "-xds-node-id, -xds-tls set"},
		{"an http:// xDS URL", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "http://eg:18000"), `-xds-server "http://eg:18000": http:// is not a gRPC target; give host:port (or dns:///host:port) (set by CONFIG_GRPC_XDS_SERVER_URL)`},
		{"an xDS host without a port", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway"), `-xds-server "envoy-gateway": want host:port (or dns:///host:port): address envoy-gateway: missing port in address (set by CONFIG_GRPC_XDS_SERVER_URL)`},
		{"an xDS port out of range", []string{"-config-type", "grpc_xds_sotw", "-xds-server", "eg:99999"}, envOf(), `port "99999": want a number from 1 to 65535`},
		{"node metadata without '=' on the command line", []string{"-config-type", "grpc_xds_sotw", "-xds-node-metadata", "zone:a"}, envOf(), `entry "zone:a": want key=value`},
		{"a header without ':'", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "token"), `(for -xds-headers): entry "token": want key:value`},
		{"xDS TLS files without TLS", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "ca.pem"), "need -xds-tls (CONFIG_GRPC_XDS_SERVER_USE_TLS=true)"},
		{"an xDS backoff upside down", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2m"), "-xds-backoff-initial 2m0s: want at most -xds-backoff-max (1m0s) (set by XDS_CLIENT_BACKOFF_INITIAL_INTERVAL)"},
		{"REDIS_PERSECOND=true without its URL", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true"), "REDIS_PERSECOND=true: REDIS_PERSECOND_URL is not set"},
		{"REDIS_PERSECOND not a boolean", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "yes", "REDIS_PERSECOND_URL", "h:2"), "REDIS_PERSECOND=yes: want true or false"},
		{"a per-second Redis without the main one", nil, envOf("REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2"), "-redis-persecond (REDIS_PERSECOND_URL) needs -redis (REDIS_URL)"},
		{"per-second settings without the per-second Redis", []string{"-redis", "h:1", "-redis-persecond-pool-size", "5"}, envOf(), "-redis-persecond-pool-size needs -redis-persecond (REDIS_PERSECOND=true and REDIS_PERSECOND_URL)"},
		{"unknown per-second redis type", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_TYPE", "ring"), `-redis-persecond-type "ring"`},
		{"a per-second sentinel password without Sentinel", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_SENTINEL_AUTH", "pw"), "needs -redis-persecond-type sentinel"},
		{"a bad per-second socket type", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_SOCKET_TYPE", "udp"), "REDIS_PERSECOND_SOCKET_TYPE=udp: want tcp or unix"},
		{"unknown log format", nil, envOf("LOG_FORMAT", "xml"), `LOG_FORMAT="xml" (for -log-format): want text or json`},
		{"unknown log level", nil, envOf("LOG_LEVEL", "loud"), `unknown log level "loud"`},
		{"ratio out of range", []string{"-near-limit-ratio", "1.5"}, envOf(), "-near-limit-ratio 1.5"},
		{"a negative connection timeout", []string{"-grpc-connection-timeout", "-1s"}, envOf(), "-grpc-connection-timeout -1s: must not be negative"},
		{"a negative HTTP timeout", nil, envOf("FLOODGATE_HTTP_READ_TIMEOUT", "-2s"), "-http-read-timeout -2s: must not be negative"},
		{"unknown failure mode", []string{"-failure-mode", "maybe"}, envOf(), `unknown failure mode "maybe"`},
		{"stray arguments", []string{"config"}, envOf(), "unexpected arguments"},
		{"-explain without entries", []string{"-explain", "rl"}, envOf(), "-explain needs a domain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The rule path: -config, then FLOODGATE_CONFIG, then the reference's
// RUNTIME_* variables, then FLOODGATE_DEFAULT_CONFIG (the image's demo
// rules), then ./config; each override of a variable that is set is
// noted, naming the winner and the variable, credentials hidden.
func TestEnvironmentPrecedence(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		env       Lookup
		rules     string
		from      string
		notes     []string
		forbidden string // in no note
	}{
		{"the image alone", nil, envOf("FLOODGATE_DEFAULT_CONFIG", "/etc/floodgate/config"),
			"/etc/floodgate/config", "FLOODGATE_DEFAULT_CONFIG", nil, ""},
		{"the reference's variables over the image's default", nil, envOf("FLOODGATE_DEFAULT_CONFIG", "/etc/floodgate/config", "RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit"),
			filepath.Join("/srv/rt", "ratelimit", "config"), "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY", nil, ""},
		{"a flag over them, noted", []string{"-config", "mine"}, envOf("RUNTIME_ROOT", "/srv/rt", "FLOODGATE_CONFIG", "/x"),
			"mine", "-config", []string{"-config overrides FLOODGATE_CONFIG=/x", "-config overrides RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY=/srv/rt/config"}, ""},
		{"FLOODGATE_ over the reference's, noted", nil, envOf("FLOODGATE_CONFIG", "/x", "RUNTIME_APPDIRECTORY", "rules", "FLOODGATE_DEFAULT_CONFIG", "/etc/floodgate/config"),
			"/x", "FLOODGATE_CONFIG", []string{"FLOODGATE_CONFIG overrides RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY=/srv/runtime_data/current/rules"}, ""},
		{"nothing set", nil, envOf(), "config", "", nil, ""},
		{"a credential overridden is not shown", []string{"-redis", "h:1", "-redis-auth", "flagpass"}, envOf("REDIS_AUTH", "envS3cret", "REDIS_URL", "redis://u:urlS3cret@h:2"),
			"config", "", []string{"-redis overrides REDIS_URL=redis://***@h:2", "-redis-auth overrides REDIS_AUTH=***"}, "S3cret"},
		{"ports: one note for the pair", []string{"-http-addr", ":1"}, envOf("HOST", "0.0.0.0", "PORT", "9"),
			"config", "", []string{"-http-addr overrides HOST/PORT=0.0.0.0:9"}, ""},
		{"a retired flag is accepted and noted", []string{"-rlqs-store-deadline", "2s"}, envOf(),
			"config", "", []string{"-rlqs-store-deadline (FLOODGATE_RLQS_STORE_DEADLINE) is retired: 2s is ignored, -redis-deadline applies"}, ""},
		{"and so is its variable", nil, envOf("FLOODGATE_RLQS_STORE_DEADLINE", "3s"),
			"config", "", []string{"-rlqs-store-deadline (FLOODGATE_RLQS_STORE_DEADLINE) is retired: 3s is ignored, -redis-deadline applies"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.Rules.Path != tc.rules || c.Rules.PathFrom != tc.from {
				t.Errorf("rules %q from %q, want %q from %q", c.Rules.Path, c.Rules.PathFrom, tc.rules, tc.from)
			}
			if !slices.Equal(c.Notes, tc.notes) {
				t.Errorf("notes %q\nwant %q", c.Notes, tc.notes)
			}
			for _, n := range c.Notes {
				if tc.forbidden != "" && strings.Contains(n, tc.forbidden) {
					t.Errorf("note %q shows %q", n, tc.forbidden)
				}
			}
		})
	}
}

// Enumerated values are read as the reference reads them: without regard
// to case (LOG_FORMAT, LOG_LEVEL, REDIS_TYPE, BACKEND_TYPE, CONFIG_TYPE,
// REDIS_SOCKET_TYPE); other values are refused, naming what is accepted.
func TestReferenceSpellings(t *testing.T) {
	for _, kv := range [][]string{
		{"LOG_FORMAT", "JSON"}, {"LOG_FORMAT", "Text"}, {"LOG_LEVEL", "Warning"}, {"LOG_LEVEL", "TRACE"},
		{"REDIS_TYPE", "SINGLE", "REDIS_URL", "h:1"}, {"REDIS_TYPE", "Cluster", "REDIS_URL", "h:1,h:2"},
		{"REDIS_TYPE", "SENTINEL", "REDIS_URL", "m,h:1"}, {"BACKEND_TYPE", "Redis"}, {"CONFIG_TYPE", "file"}, {"CONFIG_TYPE", "grpc_xds_sotw"},
		{"REDIS_SOCKET_TYPE", "TCP", "REDIS_URL", "h:1"}, {"REDIS_SOCKET_TYPE", "unix", "REDIS_URL", "/run/r.sock"},
	} {
		if _, err := Load(nil, envOf(kv...)); err != nil {
			t.Errorf("%v: %v", kv, err)
		}
	}
	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"REDIS_SOCKET_TYPE", "udp", "REDIS_URL", "h:1"}, "want tcp or unix"},
		{[]string{"REDIS_TYPE", "ring", "REDIS_URL", "h:1"}, "want single, sentinel or cluster"},
		{[]string{"LOG_FORMAT", "logfmt"}, "want text or json"},
		{[]string{"BACKEND_TYPE", "etcd"}, "want redis or memcache"},
		{[]string{"CONFIG_TYPE", "GRPC_XDS_DELTA"}, `CONFIG_TYPE="GRPC_XDS_DELTA" (for -config-type): want file or grpc_xds_sotw`},
	} {
		if _, err := Load(nil, envOf(tc.kv...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.kv, err, tc.want)
		}
	}
}

// TestImageDefault checks the image's fallback rule path: the reference
// server's default directory when it exists (a reference manifest that
// mounts its rules there and sets no RUNTIME_*), else the demo rules.
func TestImageDefault(t *testing.T) {
	refDir := t.TempDir()
	missing := refDir + "/missing"
	for _, tc := range []struct {
		name, refDir, env string
		want, wantFrom    string
		wantOK            bool
	}{
		{"outside the image", refDir, "", "", "", false},
		{"image, reference directory mounted", refDir, "/etc/floodgate/config", refDir, ReferenceDefaultFrom, true},
		{"image, nothing mounted", missing, "/etc/floodgate/config", "/etc/floodgate/config", DefaultConfigVar, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) (string, bool) {
				if k == DefaultConfigVar && tc.env != "" {
					return tc.env, true
				}
				return "", false
			}
			got, from, ok := imageDefault(env, tc.refDir)
			if got != tc.want || from != tc.wantFrom || ok != tc.wantOK {
				t.Errorf("imageDefault = %q, %q, %v; want %q, %q, %v", got, from, ok, tc.want, tc.wantFrom, tc.wantOK)
			}
		})
	}
}

// TestEmptySubdirectoryNoted: with RUNTIME_SUBDIRECTORY empty and
// RUNTIME_WATCH_ROOT not false, the reference server serves no rules;
// floodgate loads RUNTIME_ROOT/RUNTIME_APPDIRECTORY and says so.
func TestEmptySubdirectoryNoted(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		note bool
	}{
		{[]string{"RUNTIME_ROOT", "/srv/rt"}, true},
		{[]string{"RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", ""}, true},
		{[]string{"RUNTIME_ROOT", "/srv/rt", "RUNTIME_WATCH_ROOT", "true"}, true},
		{[]string{"RUNTIME_ROOT", "/srv/rt", "RUNTIME_WATCH_ROOT", "false"}, false},
		{[]string{"RUNTIME_ROOT", "/srv/rt", "RUNTIME_SUBDIRECTORY", "ratelimit"}, false},
		{[]string{"FLOODGATE_CONFIG", "/srv/rt/config"}, false},
	} {
		c, err := Load(nil, envOf(tc.env...))
		if err != nil {
			t.Fatal(err)
		}
		noted := slices.ContainsFunc(c.Notes, func(n string) bool {
			return strings.Contains(n, "RUNTIME_SUBDIRECTORY is empty") && strings.Contains(n, "floodgate loads /srv/rt/config")
		})
		if noted != tc.note {
			t.Errorf("%q: noted %v, want %v (notes %q)", tc.env, noted, tc.note, c.Notes)
		}
	}
}

// TestPrometheusAsTheReference: USE_PROMETHEUS=true serves Prometheus on
// PROMETHEUS_ADDR (:9090 unset) with its path and mapping; DISABLE_STATS
// turns it off, as in the reference; where the reference would refuse to
// start (USE_STATSD=true beside it) or not read a variable, a note says
// what floodgate does.
func TestPrometheusAsTheReference(t *testing.T) {
	for _, tc := range []struct {
		name             string
		env              []string
		addr, path, file string
		statsd           bool
		note             string
	}{
		{"Envoy Gateway's", []string{"USE_STATSD", "false", "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", ":19001", "PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml"},
			":19001", "/metrics", "/etc/statsd-exporter/conf.yaml", false, ""},
		{"the reference's defaults", []string{"USE_PROMETHEUS", "true"}, ":9090", "/metrics", "", false, ""},
		{"a path", []string{"USE_PROMETHEUS", "true", "PROMETHEUS_PATH", "/stats"}, ":9090", "/stats", "", false, ""},
		{"statsd too", []string{"USE_STATSD", "true", "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", ":19001"}, ":19001", "/metrics", "", true,
			"USE_STATSD and USE_PROMETHEUS are both true, which the reference refuses to start with"},
		{"stats disabled", []string{"DISABLE_STATS", "true", "USE_PROMETHEUS", "true", "PROMETHEUS_ADDR", ":19001"}, "", "/metrics", "", false,
			"USE_PROMETHEUS=true with DISABLE_STATS=true: no Prometheus listener"},
		{"not asked for", []string{"PROMETHEUS_ADDR", ":19001", "PROMETHEUS_MAPPER_YAML", "/m.yaml"}, "", "/metrics", "", false,
			"PROMETHEUS_* variables are set but USE_PROMETHEUS is not true"},
	} {
		c, err := Load(nil, envOf(tc.env...))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Server.PrometheusAddr != tc.addr || c.Server.PrometheusPath != tc.path || c.Prometheus.MapperFile != tc.file || c.Statsd.On != tc.statsd {
			t.Errorf("%s: addr %q path %q mapper %q statsd %v, want %q %q %q %v", tc.name, c.Server.PrometheusAddr,
				c.Server.PrometheusPath, c.Prometheus.MapperFile, c.Statsd.On, tc.addr, tc.path, tc.file, tc.statsd)
		}
		noted := slices.ContainsFunc(c.Notes, func(n string) bool { return tc.note != "" && strings.Contains(n, tc.note) })
		if tc.note != "" && !noted {
			t.Errorf("%s: no note %q in %q", tc.name, tc.note, c.Notes)
		}
		if tc.note == "" && len(c.Notes) > 0 {
			t.Errorf("%s: notes %q, want none", tc.name, c.Notes)
		}
	}
}

// TestServerCANoted: GRPC_SERVER_TLS_CA_CERT, which Envoy Gateway sets
// and nothing reads, is noted while no client CA is set, since the gRPC
// port then checks no client certificate; with GRPC_CLIENT_TLS_CACERT it
// is not.
func TestServerCANoted(t *testing.T) {
	tls := []string{"GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/certs/tls.crt", "GRPC_SERVER_TLS_KEY", "/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT", "/certs/ca.crt"}
	for _, tc := range []struct {
		env  []string
		note bool
	}{
		{tls, true},
		{append(slices.Clone(tls), "GRPC_CLIENT_TLS_CACERT", "/certs/ca.crt"), false},
		{tls[:6], false},
	} {
		c, err := Load(nil, envOf(tc.env...))
		if err != nil {
			t.Fatal(err)
		}
		noted := slices.ContainsFunc(c.Notes, func(n string) bool {
			return strings.HasPrefix(n, "GRPC_SERVER_TLS_CA_CERT is not read") && strings.Contains(n, "asks for no client certificate")
		})
		if noted != tc.note {
			t.Errorf("%q: noted %v, want %v: %q", tc.env, noted, tc.note, c.Notes)
		}
		if c.GRPCTLS.Files.ClientCAFile != "" && !slices.Contains(tc.env, "GRPC_CLIENT_TLS_CACERT") {
			t.Errorf("%q: a client CA %q set by GRPC_SERVER_TLS_CA_CERT", tc.env, c.GRPCTLS.Files.ClientCAFile)
		}
	}
}
