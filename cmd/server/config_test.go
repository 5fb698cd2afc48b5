package main

import (
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
)

func envOf(kv ...string) lookupFunc {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name  string
		args  []string
		env   lookupFunc
		check func(t *testing.T, c *config)
	}{
		{"defaults", nil, envOf(), func(t *testing.T, c *config) {
			want := config{rulesPath: "config", redis: redisSettings{typ: "single"}, perSecond: redisSettings{typ: "single"}, grpcAddr: ":8081", httpAddr: ":8080", debugAddr: "127.0.0.1:6070",
				logLevel: slog.LevelInfo, logFormat: "text", nearLimitRatio: 0.8, failureMode: rules.FailureAllow,
				redisDeadline: envoy.DefaultStoreTimeout, shutdownTimeout: 15 * time.Second}
			got := *c
			got.headers, got.args = envoy.Headers{}, nil
			if !equalConfig(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
			if c.headers.Style != envoy.HeadersOff || c.headers.LimitName != "RateLimit-Limit" {
				t.Errorf("headers = %+v", c.headers)
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
		), func(t *testing.T, c *config) {
			checks := []struct {
				name      string
				got, want any
			}{
				{"rules path", c.rulesPath, filepath.Join("/srv/rt", "ratelimit", "config")},
				{"redis", c.redis.url, "redis.svc:6379"},
				{"redis type", c.redis.typ, "cluster"},
				{"redis auth", c.redis.auth, "me:secret"},
				{"redis tls", c.redis.tls, true},
				{"pool", c.redis.poolSize, 7},
				{"dial timeout", c.redis.dialTimeout, 2 * time.Second},
				{"deadline stays short", c.redisDeadline, envoy.DefaultStoreTimeout},
				{"prefix", c.keyPrefix, "rl_"},
				{"http", c.httpAddr, ":9080"},
				{"grpc", c.grpcAddr, "127.0.0.1:9081"},
				{"debug", c.debugAddr, "127.0.0.1:6070"},
				{"level", c.logLevel, slog.LevelWarn},
				{"format", c.logFormat, "json"},
				{"shadow", c.shadowMode, true},
				{"ratio", c.nearLimitRatio, 0.5},
				{"merge", c.mergeDomains, true},
				{"header style", c.headers.Style, envoy.HeadersReference},
				{"remaining header", c.headers.RemainingName, "X-Left"},
				{"limit header default", c.headers.LimitName, "RateLimit-Limit"},
			}
			for _, ch := range checks {
				if ch.got != ch.want {
					t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
				}
			}
			if u, p := c.redis.credentials(); u != "me" || p != "secret" {
				t.Errorf("credentials = %q, %q", u, p)
			}
		}},
		{"flags win over variables, FLOODGATE_ variables over the reference's",
			[]string{"-config", "rules.yaml", "-grpc-addr", "127.0.0.1:1"},
			envOf("FLOODGATE_CONFIG", "x", "RUNTIME_ROOT", "/y", "GRPC_PORT", "2", "FLOODGATE_HTTP_ADDR", ":3", "PORT", "4",
				"FLOODGATE_REDIS", "redis://a:1", "REDIS_URL", "b:2"),
			func(t *testing.T, c *config) {
				if c.rulesPath != "rules.yaml" || c.grpcAddr != "127.0.0.1:1" || c.httpAddr != ":3" || c.redis.url != "redis://a:1" {
					t.Errorf("got config %s, grpc %s, http %s, redis %s", c.rulesPath, c.grpcAddr, c.httpAddr, c.redis.url)
				}
			}},
		{"a unix socket", nil, envOf("REDIS_SOCKET_TYPE", "unix", "REDIS_URL", "/var/run/redis.sock", "REDIS_AUTH", "pw"),
			func(t *testing.T, c *config) {
				if c.redis.url != "unix:///var/run/redis.sock" {
					t.Errorf("redis = %q", c.redis.url)
				}
				if u, p := c.redis.credentials(); u != "" || p != "pw" {
					t.Errorf("credentials = %q, %q", u, p)
				}
			}},
		{"RUNTIME_APPDIRECTORY alone keeps the reference root", nil, envOf("RUNTIME_APPDIRECTORY", "rules"),
			func(t *testing.T, c *config) {
				if want := filepath.Join("/srv/runtime_data/current", "rules"); c.rulesPath != want {
					t.Errorf("rules path = %q, want %q", c.rulesPath, want)
				}
			}},
		{"LIMIT_RESPONSE_HEADERS_ENABLED=false and -response-headers", []string{"-response-headers", "ietf"}, envOf("LIMIT_RESPONSE_HEADERS_ENABLED", "false"),
			func(t *testing.T, c *config) {
				if c.headers.Style != envoy.HeadersIETF {
					t.Errorf("style = %v", c.headers.Style)
				}
			}},
		{"logrus level names", nil, envOf("LOG_LEVEL", "trace"), func(t *testing.T, c *config) {
			if c.logLevel != slog.LevelDebug {
				t.Errorf("level = %v", c.logLevel)
			}
		}},
		{"variables without effect are noted", nil, envOf("LOCAL_CACHE_SIZE_IN_BYTES", "1000", "RUNTIME_IGNOREDOTFILES", "false"),
			func(t *testing.T, c *config) {
				if len(c.notes) != 2 || !strings.Contains(c.notes[1], "LOCAL_CACHE_SIZE_IN_BYTES") {
					t.Errorf("notes = %q", c.notes)
				}
			}},
		{"the reference server's TLS variables", nil, envOf("GRPC_SERVER_USE_TLS", "true", "GRPC_SERVER_TLS_CERT", "/tls/cert.pem",
			"GRPC_SERVER_TLS_KEY", "/tls/key.pem", "GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"), func(t *testing.T, c *config) {
			if !c.grpcTLS || c.grpcTLSCert != "/tls/cert.pem" || c.grpcTLSKey != "/tls/key.pem" || c.grpcClientCA != "/tls/ca.pem" {
				t.Errorf("tls %v cert %q key %q ca %q", c.grpcTLS, c.grpcTLSCert, c.grpcTLSKey, c.grpcClientCA)
			}
		}},
		{"a DEBUG_PORT alone stays on loopback", nil, envOf("DEBUG_PORT", "7070"), func(t *testing.T, c *config) {
			if c.debugAddr != "127.0.0.1:7070" {
				t.Errorf("debug addr %q", c.debugAddr)
			}
		}},
		{"an empty DEBUG_HOST listens everywhere, as asked", nil, envOf("DEBUG_HOST", "", "DEBUG_PORT", "7070"), func(t *testing.T, c *config) {
			if c.debugAddr != ":7070" {
				t.Errorf("debug addr %q", c.debugAddr)
			}
		}},
		{"request bounds", []string{"-max-entries", "8"}, envOf("FLOODGATE_MAX_DESCRIPTORS", "10", "FLOODGATE_MAX_KEY_BYTES", "64",
			"FLOODGATE_MAX_VALUE_BYTES", "128", "FLOODGATE_MAX_MESSAGE_BYTES", "65536", "FLOODGATE_METRIC_VALUE_SERIES", "5"), func(t *testing.T, c *config) {
			want := envoy.RequestBounds{MaxDescriptors: 10, MaxEntries: 8, MaxKeyBytes: 64, MaxValueBytes: 128}
			if c.bounds != want || c.maxMessageBytes != 65536 || c.metricValueSeries != 5 {
				t.Errorf("bounds %+v message %d series %d", c.bounds, c.maxMessageBytes, c.metricValueSeries)
			}
		}},
		{"connection bounds and timeouts default", nil, envOf(), func(t *testing.T, c *config) {
			want := server.ConnOptions{GRPCConnectionTimeout: server.DefaultGRPCConnectionTimeout,
				GRPCKeepaliveTime: server.DefaultGRPCKeepaliveTime, GRPCKeepaliveTimeout: server.DefaultGRPCKeepaliveTimeout,
				GRPCMinPingInterval: server.DefaultGRPCMinPingInterval, HTTPReadTimeout: server.DefaultHTTPReadTimeout,
				HTTPWriteTimeout: server.DefaultHTTPWriteTimeout, HTTPIdleTimeout: server.DefaultHTTPIdleTimeout}
			if c.conns != want {
				t.Errorf("got %+v\nwant %+v", c.conns, want)
			}
		}},
		{"connection bounds and timeouts from flags and the environment", []string{"-grpc-max-connections", "500", "-http-read-timeout", "2s"},
			envOf("FLOODGATE_HTTP_MAX_CONNECTIONS", "-1", "FLOODGATE_GRPC_CONNECTION_TIMEOUT", "3s", "FLOODGATE_GRPC_KEEPALIVE_TIME", "4s",
				"FLOODGATE_GRPC_KEEPALIVE_TIMEOUT", "5s", "FLOODGATE_GRPC_MAX_CONNECTION_IDLE", "6s", "FLOODGATE_GRPC_MIN_PING_INTERVAL", "7s",
				"FLOODGATE_HTTP_WRITE_TIMEOUT", "8s", "FLOODGATE_HTTP_IDLE_TIMEOUT", "9s", "GRPC_MAX_CONNECTION_AGE", "1h"), func(t *testing.T, c *config) {
				want := server.ConnOptions{GRPCMaxConns: 500, HTTPMaxConns: -1, GRPCConnectionTimeout: 3 * time.Second,
					GRPCKeepaliveTime: 4 * time.Second, GRPCKeepaliveTimeout: 5 * time.Second, GRPCMaxConnectionIdle: 6 * time.Second,
					GRPCMinPingInterval: 7 * time.Second, HTTPReadTimeout: 2 * time.Second, HTTPWriteTimeout: 8 * time.Second, HTTPIdleTimeout: 9 * time.Second}
				if c.conns != want || c.grpcMaxConnAge != time.Hour {
					t.Errorf("got %+v, age %v\nwant %+v, 1h", c.conns, c.grpcMaxConnAge, want)
				}
			}},
		{"the deny cache is on by default", nil, envOf(), func(t *testing.T, c *config) {
			if !c.denyCache || c.denyCacheSize != 0 || c.denyCacheMaxAge != time.Second {
				t.Errorf("deny cache %v size %d", c.denyCache, c.denyCacheSize)
			}
		}},
		{"the deny cache from the environment", nil, envOf("FLOODGATE_DENY_CACHE", "false", "FLOODGATE_DENY_CACHE_SIZE", "1000", "FLOODGATE_DENY_CACHE_MAX_AGE", "250ms"), func(t *testing.T, c *config) {
			if c.denyCache || c.denyCacheSize != 1000 || c.denyCacheMaxAge != 250*time.Millisecond {
				t.Errorf("deny cache %v size %d", c.denyCache, c.denyCacheSize)
			}
		}},
		{"the per-second Redis from the reference's variables", nil, envOf(
			"REDIS_URL", "main:6379", "REDIS_PERSECOND", "True", "REDIS_PERSECOND_URL", "/run/ps.sock", "REDIS_PERSECOND_SOCKET_TYPE", "unix",
			"REDIS_PERSECOND_TYPE", "SINGLE", "REDIS_PERSECOND_AUTH", "u:p", "REDIS_PERSECOND_TLS", "false",
			"REDIS_PERSECOND_POOL_SIZE", "4", "REDIS_PERSECOND_TIMEOUT", "3s", "REDIS_TLS", "true", "REDIS_TLS_CACERT", "/ca.pem",
		), func(t *testing.T, c *config) {
			want := redisSettings{url: "unix:///run/ps.sock", typ: "single", auth: "u:p", poolSize: 4, dialTimeout: 3 * time.Second}
			if c.perSecond != want {
				t.Errorf("per-second %+v\nwant %+v", c.perSecond, want)
			}
			if c.redis.url != "main:6379" || !c.redis.tls || c.redisTLSFiles.CAFile != "/ca.pem" {
				t.Errorf("main %+v, TLS files %+v", c.redis, c.redisTLSFiles)
			}
		}},
		{"REDIS_PERSECOND_* are read only with REDIS_PERSECOND=true, as in the reference", nil, envOf(
			"REDIS_URL", "main:6379", "REDIS_PERSECOND", "false", "REDIS_PERSECOND_URL", "ps:6379", "REDIS_PERSECOND_TYPE", "cluster",
			"REDIS_PERSECOND_AUTH", "pw", "REDIS_PERSECOND_TLS", "true", "REDIS_PERSECOND_POOL_SIZE", "4", "REDIS_PERSECOND_SOCKET_TYPE", "udp",
			"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "ERROR", "REDIS_PERSECOND_PIPELINE_WINDOW", "1ms",
		), func(t *testing.T, c *config) {
			if c.perSecond != (redisSettings{typ: "single"}) || len(c.notes) != 0 {
				t.Errorf("per-second %+v, notes %q: want none", c.perSecond, c.notes)
			}
		}},
		{"FLOODGATE_REDIS_PERSECOND* follow the flags' names", nil, envOf(
			"FLOODGATE_REDIS", "main:6379", "FLOODGATE_REDIS_PERSECOND", "rediss://ps:6380", "FLOODGATE_REDIS_PERSECOND_TYPE", "Sentinel",
			"FLOODGATE_REDIS_PERSECOND_SENTINEL_AUTH", "spw", "FLOODGATE_REDIS_PERSECOND_DIAL_TIMEOUT", "1s", "FLOODGATE_REDIS_TLS_CA", "/ca.pem",
		), func(t *testing.T, c *config) {
			want := redisSettings{url: "rediss://ps:6380", typ: "sentinel", sentinelAuth: "spw", dialTimeout: time.Second}
			if c.perSecond != want || !c.perSecond.tlsOn() || c.redis.tlsOn() {
				t.Errorf("per-second %+v\nwant %+v, with TLS and the main Redis without", c.perSecond, want)
			}
		}},
		{"-explain takes a descriptor", []string{"-explain", "rl", "k=v"}, envOf(), func(t *testing.T, c *config) {
			if !c.explain || len(c.args) != 2 {
				t.Errorf("explain %v args %q", c.explain, c.args)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func equalConfig(a, b config) bool {
	a.notes, b.notes = nil, nil
	return a.rulesPath == b.rulesPath && a.redis == b.redis && a.perSecond == b.perSecond && a.grpcAddr == b.grpcAddr &&
		a.httpAddr == b.httpAddr && a.debugAddr == b.debugAddr && a.logLevel == b.logLevel &&
		a.logFormat == b.logFormat && a.nearLimitRatio == b.nearLimitRatio && a.failureMode == b.failureMode &&
		a.redisDeadline == b.redisDeadline && a.shutdownTimeout == b.shutdownTimeout && a.redisTLSFiles == b.redisTLSFiles &&
		a.shadowMode == b.shadowMode && a.mergeDomains == b.mergeDomains
}

func TestParseConfigErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  lookupFunc
		want string
	}{
		{"a bad variable names itself and the flag", nil, envOf("REDIS_POOL_SIZE", "many"), `REDIS_POOL_SIZE="many" (for -redis-pool-size)`},
		{"a bad boolean", nil, envOf("SHADOW_MODE", "maybe"), `SHADOW_MODE="maybe"`},
		{"a bad header switch", nil, envOf("LIMIT_RESPONSE_HEADERS_ENABLED", "yes please"), "LIMIT_RESPONSE_HEADERS_ENABLED (want true or false)"},
		{"gRPC TLS without a certificate", nil, envOf("GRPC_SERVER_USE_TLS", "true"), "-grpc-tls needs -grpc-tls-cert and -grpc-tls-key"},
		{"a client CA without TLS", []string{"-grpc-client-ca", "ca.pem"}, envOf(), "-grpc-client-ca (GRPC_CLIENT_TLS_CACERT) needs -grpc-tls"},
		{"a zero bound", nil, envOf("FLOODGATE_MAX_DESCRIPTORS", "0"), "-max-descriptors 0: must be at least 1"},
		{"a negative message size", []string{"-max-message-bytes", "-1"}, envOf(), "-max-message-bytes -1: must be at least 1"},
		{"memcache is refused", nil, envOf("BACKEND_TYPE", "memcache"), "BACKEND_TYPE=memcache: MEMCACHE_HOST_PORT or MEMCACHE_SRV is not set"},
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
		{"node metadata without '='", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_NODE_METADATA", "zone:a"), `-xds-node-metadata: entry "zone:a": want key=value (set by CONFIG_GRPC_XDS_NODE_METADATA)`},
		{"a header without ':'", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "token"), `-xds-headers: entry "token": want key:value`},
		{"xDS TLS files without TLS", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "ca.pem"), "need -xds-tls (CONFIG_GRPC_XDS_SERVER_USE_TLS=true)"},
		{"an xDS backoff upside down", nil, envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2m"), "-xds-backoff-initial 2m0s and -xds-backoff-max 1m0s: want 0 < initial <= max"},
		{"REDIS_PERSECOND=true without its URL", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true"), "REDIS_PERSECOND=true: REDIS_PERSECOND_URL is not set"},
		{"REDIS_PERSECOND not a boolean", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "yes", "REDIS_PERSECOND_URL", "h:2"), "REDIS_PERSECOND=yes: want true or false"},
		{"a per-second Redis without the main one", nil, envOf("REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2"), "-redis-persecond (REDIS_PERSECOND_URL) needs -redis (REDIS_URL)"},
		{"per-second settings without the per-second Redis", []string{"-redis", "h:1", "-redis-persecond-pool-size", "5"}, envOf(), "-redis-persecond-* need -redis-persecond"},
		{"unknown per-second redis type", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_TYPE", "ring"), `-redis-persecond-type "ring"`},
		{"a per-second sentinel password without Sentinel", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_SENTINEL_AUTH", "pw"), "needs -redis-persecond-type sentinel"},
		{"a bad per-second socket type", nil, envOf("REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_SOCKET_TYPE", "udp"), "REDIS_PERSECOND_SOCKET_TYPE=udp: want tcp or unix"},
		{"unknown log format", nil, envOf("LOG_FORMAT", "xml"), `-log-format "xml"`},
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
			_, err := parseConfig(tc.args, tc.env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestRedactedAddr(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:pw@host:6379/0": "redis://***@host:6379/0",
		"host:6379":                   "host:6379",
		"master,s1:26379":             "master,s1:26379",
	} {
		if got := redactedAddr(in); got != want {
			t.Errorf("redactedAddr(%q) = %q, want %q", in, got, want)
		}
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
		env       lookupFunc
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseConfig(tc.args, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if c.rulesPath != tc.rules || c.rulesFrom != tc.from {
				t.Errorf("rules %q from %q, want %q from %q", c.rulesPath, c.rulesFrom, tc.rules, tc.from)
			}
			if !slices.Equal(c.notes, tc.notes) {
				t.Errorf("notes %q\nwant %q", c.notes, tc.notes)
			}
			for _, n := range c.notes {
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
		if _, err := parseConfig(nil, envOf(kv...)); err != nil {
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
		if _, err := parseConfig(nil, envOf(tc.kv...)); err == nil || !strings.Contains(err.Error(), tc.want) {
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
		{"image, reference directory mounted", refDir, "/etc/floodgate/config", refDir, referenceDefaultFrom, true},
		{"image, nothing mounted", missing, "/etc/floodgate/config", "/etc/floodgate/config", defaultConfigVar, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := func(k string) (string, bool) {
				if k == defaultConfigVar && tc.env != "" {
					return tc.env, true
				}
				return "", false
			}
			got, from, ok := imageDefault(tc.refDir)(env)
			if got != tc.want || from != tc.wantFrom || ok != tc.wantOK {
				t.Errorf("imageDefault = %q, %q, %v; want %q, %q, %v", got, from, ok, tc.want, tc.wantFrom, tc.wantOK)
			}
		})
	}
}

// TestValidationNamesTheVariable checks that a value refused after parsing
// names the variable that set it, and nothing when a flag did.
func TestValidationNamesTheVariable(t *testing.T) {
	tests := []struct {
		args []string
		env  []string
		want string // the error's suffix
	}{
		{nil, []string{"NEAR_LIMIT_RATIO", "2"}, "want a number between 0 and 1 (set by NEAR_LIMIT_RATIO)"},
		{nil, []string{"REDIS_URL", "h:1", "REDIS_TYPE", "bogus"}, "want single, sentinel or cluster (set by REDIS_TYPE)"},
		{nil, []string{"REDIS_URL", "h:1", "FLOODGATE_REDIS_POOL_SIZE", "-3"}, "must not be negative (set by FLOODGATE_REDIS_POOL_SIZE)"},
		{nil, []string{"REDIS_URL", "h:1", "REDIS_PIPELINE_WINDOW", "-150us"}, "-redis-pipeline-window -150µs: must not be negative (set by REDIS_PIPELINE_WINDOW)"},
		{[]string{"-redis", "h:1", "-redis-pipeline-limit", "-1"}, nil, "-redis-pipeline-limit -1: must not be negative"},
		{nil, []string{"REDIS_URL", "h:1", "REDIS_PERSECOND", "true", "REDIS_PERSECOND_URL", "h:2", "REDIS_PERSECOND_PIPELINE_LIMIT", "-2"}, "-redis-persecond-pipeline-limit -2: must not be negative (set by REDIS_PERSECOND_PIPELINE_LIMIT)"},
		{[]string{"-near-limit-ratio", "3"}, nil, "want a number between 0 and 1"},
		{nil, []string{"PORT", "abc"}, `-http-addr ":abc": port "abc": want a number from 0 to 65535 (set by HOST/PORT)`},
		{nil, []string{"GRPC_PORT", "99999"}, `port "99999": want a number from 0 to 65535 (set by GRPC_HOST/GRPC_PORT)`},
		{[]string{"-debug-addr", "localhost"}, nil, `-debug-addr "localhost": want host:port`},
	}
	for _, tc := range tests {
		_, err := parseConfig(tc.args, envOf(tc.env...))
		if err == nil || !strings.HasSuffix(err.Error(), tc.want) {
			t.Errorf("args %q env %q: err = %v, want it to end with %q", tc.args, tc.env, err, tc.want)
		}
	}
}
