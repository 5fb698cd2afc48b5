package main

import (
	"fmt"
	"strconv"
	"strings"
)

// refVar is one environment variable of envoyproxy/ratelimit (every one its
// settings.go reads) and what floodgate does with it. A variable is
// honoured (it sets flag, with the reference's meaning), accepted (floodgate
// already behaves as the value asks, or the reference itself ignores it in
// the configuration it comes with), or refused at start, with an error
// naming it and what to use instead, for each value floodgate cannot
// honour. No variable a user set is ignored in silence: where floodgate
// differs in a way worth knowing, a note is logged at start.
// docs/migrating.md holds the same table for people.
type refVar struct {
	name string
	// flag is the flag the variable sets; "" when it sets none.
	flag string
	// value derives the flag's value from the environment; nil reads the
	// variable alone.
	value envSource
	// refuse returns why floodgate cannot honour the value v (set, not
	// empty) and what to use instead, or "" when it can; nil refuses
	// nothing.
	refuse func(v string, env lookupFunc) string
	// note returns a remark to log at start about the value v, or "".
	note func(v string, env lookupFunc) string
	// redis marks variables that mean something only with Redis: set
	// without REDIS_URL, they are refused (the reference server would use
	// its default socket; floodgate would keep counters in memory).
	redis bool
}

// source returns where r's flag value comes from.
func (r *refVar) source() envSource {
	if r.value != nil {
		return r.value
	}
	return envVar(r.name)
}

// referenceVars is the table, in the order of the reference's settings.go.
var referenceVars = []refVar{
	{name: "HOST", flag: "http-addr", value: hostPort("HOST", "PORT", "8080")},
	{name: "PORT", flag: "http-addr", value: hostPort("HOST", "PORT", "8080")},
	{name: "DEBUG_HOST", flag: "debug-addr", value: hostPortOn("DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", "6070")},
	{name: "DEBUG_PORT", flag: "debug-addr", value: hostPortOn("DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", "6070")},
	// GRPC_UDS comes first: in the reference it wins over GRPC_HOST/PORT.
	{name: "GRPC_UDS", flag: "grpc-addr", value: prefixed("GRPC_UDS", "unix:")},
	{name: "GRPC_HOST", flag: "grpc-addr", value: hostPort("GRPC_HOST", "GRPC_PORT", "8081")},
	{name: "GRPC_PORT", flag: "grpc-addr", value: hostPort("GRPC_HOST", "GRPC_PORT", "8081")},
	{name: "GRPC_MAX_CONNECTION_AGE", flag: "grpc-max-connection-age"},
	{name: "GRPC_MAX_CONNECTION_AGE_GRACE", flag: "grpc-max-connection-age-grace"},
	{name: "GRPC_SERVER_USE_TLS", flag: "grpc-tls"},
	{name: "GRPC_SERVER_TLS_CERT", flag: "grpc-tls-cert"},
	{name: "GRPC_SERVER_TLS_KEY", flag: "grpc-tls-key"},
	{name: "GRPC_CLIENT_TLS_CACERT", flag: "grpc-client-ca"},
	{name: "GRPC_CLIENT_TLS_SAN", flag: "grpc-client-san"},
	{name: "LOG_LEVEL", flag: "log-level"},
	{name: "LOG_FORMAT", flag: "log-format"},

	// FILE or GRPC_XDS_SOTW, in any case; -config-type refuses others.
	{name: "CONFIG_TYPE", flag: "config-type"},
	// The xDS settings, read only with CONFIG_TYPE=GRPC_XDS_SOTW, as in
	// the reference.
	{name: "FORCE_START_WITHOUT_INITIAL_CONFIG", flag: "xds-force-start", value: whileXDS(envVar("FORCE_START_WITHOUT_INITIAL_CONFIG"))},
	{name: "CONFIG_GRPC_XDS_NODE_ID", flag: "xds-node-id", value: whileXDS(envVar("CONFIG_GRPC_XDS_NODE_ID"))},
	{name: "CONFIG_GRPC_XDS_NODE_METADATA", flag: "xds-node-metadata", value: whileXDS(envVar("CONFIG_GRPC_XDS_NODE_METADATA"))},
	{name: "CONFIG_GRPC_XDS_SERVER_URL", flag: "xds-server", value: whileXDS(envVar("CONFIG_GRPC_XDS_SERVER_URL"))},
	{name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", flag: "xds-retry-interval", value: whileXDS(envVar("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"))},
	{name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", flag: "xds-headers", value: whileXDS(envVar("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS"))},
	{name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", flag: "xds-tls", value: whileXDS(envVar("CONFIG_GRPC_XDS_SERVER_USE_TLS"))},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", flag: "xds-tls-cert", value: whileXDS(envVar("CONFIG_GRPC_XDS_CLIENT_TLS_CERT"))},
	{name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", flag: "xds-tls-key", value: whileXDS(envVar("CONFIG_GRPC_XDS_CLIENT_TLS_KEY"))},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", flag: "xds-tls-ca", value: whileXDS(envVar("CONFIG_GRPC_XDS_SERVER_TLS_CACERT"))},
	{name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", flag: "xds-tls-san", value: whileXDS(envVar("CONFIG_GRPC_XDS_SERVER_TLS_SAN"))},
	{name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", flag: "xds-backoff-initial", value: whileXDS(envVar("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"))},
	{name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", flag: "xds-backoff-max", value: whileXDS(envVar("XDS_CLIENT_BACKOFF_MAX_INTERVAL"))},
	{name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", flag: "xds-backoff-random-factor", value: whileXDS(envVar("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"))},
	{name: "XDS_CLIENT_BACKOFF_JITTER", flag: "xds-backoff-jitter", value: whileXDS(envVar("XDS_CLIENT_BACKOFF_JITTER"))},
	{name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", flag: "xds-max-message-bytes", value: whileXDS(envVar("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"))},

	{name: "USE_DOG_STATSD", flag: "dogstatsd", refuse: func(v string, env lookupFunc) string {
		if isSetTrue(env, "USE_STATSD") && isSetTrue(env, "USE_DOG_STATSD") {
			return "USE_STATSD and USE_DOG_STATSD are both true, which the reference refuses too: keep one"
		}
		return ""
	}},
	{name: "USE_DOG_STATSD_MOGRIFIERS", flag: "dogstatsd-mogrifiers"},
	{name: "USE_STATSD", flag: "statsd", value: statsdOn},
	{name: "STATSD_HOST", flag: "statsd-addr", value: hostPortOn("STATSD_HOST", "STATSD_PORT", "localhost", "8125")},
	{name: "STATSD_PORT", flag: "statsd-addr", value: hostPortOn("STATSD_HOST", "STATSD_PORT", "localhost", "8125")},
	{name: "STATSD_PROTOCOL", flag: "statsd-protocol"},
	{name: "EXTRA_TAGS", flag: "statsd-tags"},
	{name: "STATS_FLUSH_INTERVAL", flag: "statsd-flush-interval"},
	{name: "DISABLE_STATS", flag: "statsd", value: statsdOn},
	{name: "USE_PROMETHEUS", note: noteWhenTrue("USE_PROMETHEUS=true: metrics are served on the HTTP port's /metrics (-http-addr, PORT), not on PROMETHEUS_ADDR; their names are floodgate_* (see docs/operations.md)")},
	{name: "PROMETHEUS_ADDR", refuse: whenPrometheus("metrics are served on the HTTP port's /metrics (-http-addr, PORT): scrape that port, and unset PROMETHEUS_ADDR")},
	{name: "PROMETHEUS_PATH", refuse: whenPrometheus("metrics are served on the HTTP port's /metrics: scrape that path, and unset PROMETHEUS_PATH")},
	{name: "PROMETHEUS_MAPPER_YAML", refuse: whenPrometheus("metric names are fixed (floodgate_*, labelled by domain and rule): rename them in recording rules, and unset PROMETHEUS_MAPPER_YAML")},

	{name: "RUNTIME_ROOT", flag: "config", value: runtimePath},
	{name: "RUNTIME_SUBDIRECTORY", flag: "config", value: runtimePath},
	{name: "RUNTIME_APPDIRECTORY", flag: "config", value: runtimePath},
	{name: "RUNTIME_IGNOREDOTFILES", note: func(v string, _ lookupFunc) string {
		if b, err := strconv.ParseBool(v); err == nil && !b {
			return "RUNTIME_IGNOREDOTFILES=false: rule files whose names start with '.' are skipped all the same (ConfigMaps' ..data entries are read once, through their links)"
		}
		return ""
	}},
	// Both values are honoured without a flag: the reference watches
	// RUNTIME_ROOT's directory for the swap of the current link (true) or
	// the rule directory for edits (false); floodgate watches every link
	// along the rule path and the directories of its tree, so it reloads on
	// either, and on ConfigMap swaps (pkg/rules Watcher.Run).
	{name: "RUNTIME_WATCH_ROOT", refuse: unlessBool},

	{name: "EXPIRATION_JITTER_MAX_SECONDS", note: noteAlways("EXPIRATION_JITTER_MAX_SECONDS has no effect: each counter expires when its state no longer matters")},
	{name: "LOCAL_CACHE_SIZE_IN_BYTES", note: func(v string, _ lookupFunc) string {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return "LOCAL_CACHE_SIZE_IN_BYTES: the deny cache (-deny-cache, on by default with Redis) answers over-limit requests without Redis; its size is -deny-cache-size, in denials"
		}
		return ""
	}},
	{name: "NEAR_LIMIT_RATIO", flag: "near-limit-ratio"},
	{name: "CACHE_KEY_PREFIX", flag: "key-prefix", refuse: func(_ string, env lookupFunc) string {
		if u, _ := env("REDIS_URL"); u != "" || memcacheOn(env) {
			return ""
		}
		return "set but neither REDIS_URL nor BACKEND_TYPE=memcache is: counters kept in memory have no key prefix"
	}},
	{name: "BACKEND_TYPE", refuse: func(v string, env lookupFunc) string {
		switch strings.ToLower(v) {
		case "redis":
			return ""
		case "memcache":
			if a, _ := env("MEMCACHE_HOST_PORT"); a != "" {
				return ""
			}
			if a, _ := env("MEMCACHE_SRV"); a != "" {
				return ""
			}
			return "MEMCACHE_HOST_PORT or MEMCACHE_SRV is not set"
		}
		return "unknown backend: want redis or memcache"
	}},
	{name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT"}, // a rejected request never charges a counter

	{name: "LIMIT_RESPONSE_HEADERS_ENABLED", flag: "response-headers", value: headersEnabled},
	{name: "LIMIT_LIMIT_HEADER", flag: "limit-header"},
	{name: "LIMIT_REMAINING_HEADER", flag: "remaining-header"},
	{name: "LIMIT_RESET_HEADER", flag: "reset-header"},

	{name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", flag: "health-requires-rules"},

	{name: "REDIS_SOCKET_TYPE", refuse: unlessIn("want tcp or unix", "tcp", "unix"), redis: true},
	{name: "REDIS_TYPE", flag: "redis-type", redis: true},
	{name: "REDIS_URL", flag: "redis", value: socketURL("REDIS_URL", "REDIS_SOCKET_TYPE")},
	{name: "REDIS_POOL_SIZE", flag: "redis-pool-size", redis: true},
	{name: "REDIS_AUTH", flag: "redis-auth", redis: true},
	{name: "REDIS_SENTINEL_AUTH", flag: "redis-sentinel-auth", redis: true},
	{name: "REDIS_TLS", flag: "redis-tls", redis: true},
	{name: "REDIS_TLS_CLIENT_CERT", flag: "redis-tls-cert", redis: true},
	{name: "REDIS_TLS_CLIENT_KEY", flag: "redis-tls-key", redis: true},
	{name: "REDIS_TLS_CACERT", flag: "redis-tls-ca", redis: true},
	{name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", flag: "redis-tls-skip-hostname-verification", redis: true},
	{name: "REDIS_PIPELINE_WINDOW", flag: "redis-pipeline-window", redis: true},
	{name: "REDIS_PIPELINE_LIMIT", flag: "redis-pipeline-limit", redis: true},
	{name: "REDIS_TIMEOUT", flag: "redis-dial-timeout", redis: true},
	{name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", flag: "health-requires-store", redis: true},
	{name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", redis: true, refuse: unlessIn("a request waits for a free connection, and never past -redis-deadline (then the failure policy answers): for more connections raise REDIS_POOL_SIZE, and unset REDIS_POOL_ON_EMPTY_BEHAVIOR or set it to WAIT", "WAIT")},
	{name: "REDIS_POOL_ON_EMPTY_WAIT_DURATION", redis: true, note: noteAlways("REDIS_POOL_ON_EMPTY_WAIT_DURATION: a request waits for a free connection at most -redis-deadline (FLOODGATE_REDIS_DEADLINE)")},
	// The per-second Redis: with REDIS_PERSECOND=true, the limits whose
	// window is shorter than a minute (redislimit.PerSecond) are kept in
	// REDIS_PERSECOND_URL's Redis. Its other variables are read only then,
	// as in the reference; its TLS files are REDIS_TLS_*'s.
	{name: "REDIS_PERSECOND", flag: "redis-persecond", value: perSecondURL, refuse: perSecondNeedsURL},
	{name: "REDIS_PERSECOND_SOCKET_TYPE", refuse: whenPerSecond(unlessIn("want tcp or unix", "tcp", "unix"))},
	{name: "REDIS_PERSECOND_TYPE", flag: "redis-persecond-type", value: whilePerSecond(envVar("REDIS_PERSECOND_TYPE"))},
	{name: "REDIS_PERSECOND_URL", flag: "redis-persecond", value: perSecondURL},
	{name: "REDIS_PERSECOND_POOL_SIZE", flag: "redis-persecond-pool-size", value: whilePerSecond(envVar("REDIS_PERSECOND_POOL_SIZE"))},
	{name: "REDIS_PERSECOND_AUTH", flag: "redis-persecond-auth", value: whilePerSecond(envVar("REDIS_PERSECOND_AUTH"))},
	{name: "REDIS_PERSECOND_SENTINEL_AUTH", flag: "redis-persecond-sentinel-auth", value: whilePerSecond(envVar("REDIS_PERSECOND_SENTINEL_AUTH"))},
	{name: "REDIS_PERSECOND_TLS", flag: "redis-persecond-tls", value: whilePerSecond(envVar("REDIS_PERSECOND_TLS"))},
	{name: "REDIS_PERSECOND_PIPELINE_WINDOW", flag: "redis-persecond-pipeline-window", value: whilePerSecond(envVar("REDIS_PERSECOND_PIPELINE_WINDOW"))},
	{name: "REDIS_PERSECOND_PIPELINE_LIMIT", flag: "redis-persecond-pipeline-limit", value: whilePerSecond(envVar("REDIS_PERSECOND_PIPELINE_LIMIT"))},
	{name: "REDIS_PERSECOND_TIMEOUT", flag: "redis-persecond-dial-timeout", value: whilePerSecond(envVar("REDIS_PERSECOND_TIMEOUT"))},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", refuse: whenPerSecond(unlessIn("a request waits for a free connection, and never past -redis-deadline (then the failure policy answers): for more connections raise REDIS_PERSECOND_POOL_SIZE, and unset REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR or set it to WAIT", "WAIT"))},
	{name: "REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION", note: whenPerSecond(noteAlways("REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION: a request waits for a free connection at most -redis-deadline (FLOODGATE_REDIS_DEADLINE)"))},

	// Memcached's settings, read only with BACKEND_TYPE=memcache as in the
	// reference.
	{name: "MEMCACHE_HOST_PORT", flag: "memcache", value: whileMemcache(envVar("MEMCACHE_HOST_PORT"))},
	{name: "MEMCACHE_MAX_IDLE_CONNS", flag: "memcache-max-idle-conns", value: whileMemcache(envVar("MEMCACHE_MAX_IDLE_CONNS"))},
	{name: "MEMCACHE_SRV", flag: "memcache-srv", value: whileMemcache(envVar("MEMCACHE_SRV"))},
	{name: "MEMCACHE_SRV_REFRESH", flag: "memcache-srv-refresh", value: whileMemcache(envVar("MEMCACHE_SRV_REFRESH"))},
	{name: "MEMCACHE_TLS", flag: "memcache-tls", value: whileMemcache(envVar("MEMCACHE_TLS"))},
	{name: "MEMCACHE_TLS_CLIENT_CERT", flag: "memcache-tls-cert", value: whileMemcache(envVar("MEMCACHE_TLS_CLIENT_CERT"))},
	{name: "MEMCACHE_TLS_CLIENT_KEY", flag: "memcache-tls-key", value: whileMemcache(envVar("MEMCACHE_TLS_CLIENT_KEY"))},
	{name: "MEMCACHE_TLS_CACERT", flag: "memcache-tls-ca", value: whileMemcache(envVar("MEMCACHE_TLS_CACERT"))},
	{name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", flag: "memcache-tls-skip-hostname-verification", value: whileMemcache(envVar("MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION"))},

	{name: "SHADOW_MODE", flag: "shadow-mode"},
	{name: "RESPONSE_DYNAMIC_METADATA", flag: "response-dynamic-metadata"},
	{name: "MERGE_DOMAIN_CONFIG", flag: "merge-domains"},

	// The reference reads the TRACING_SERVICE_* and other settings only
	// with TRACING_ENABLED=true; floodgate sets its flags from them all
	// the same, and uses them only with -tracing too.
	{name: "TRACING_ENABLED", flag: "tracing"},
	{name: "TRACING_SERVICE_NAME", flag: "tracing-service-name"},
	{name: "TRACING_SERVICE_NAMESPACE", flag: "tracing-service-namespace"},
	{name: "TRACING_SERVICE_INSTANCE_ID", flag: "tracing-service-instance-id"},
	{name: "TRACING_EXPORTER_PROTOCOL", flag: "tracing-protocol"},
	{name: "TRACING_SAMPLING_RATE", flag: "tracing-sampling-rate"},
}

// prefixed reads a variable and prepends prefix to its value.
func prefixed(name, prefix string) envSource {
	return func(env lookupFunc) (string, string, bool) {
		v, ok := env(name)
		return prefix + v, name, ok && v != ""
	}
}

// perSecondURL is REDIS_PERSECOND_URL, with REDIS_PERSECOND_SOCKET_TYPE,
// while REDIS_PERSECOND=true.
var perSecondURL = whilePerSecond(socketURL("REDIS_PERSECOND_URL", "REDIS_PERSECOND_SOCKET_TYPE"))

// perSecondNeedsURL refuses REDIS_PERSECOND=true without
// REDIS_PERSECOND_URL, and what is not a boolean: the reference would use
// its default socket, and floodgate would have nowhere to keep those limits.
func perSecondNeedsURL(v string, env lookupFunc) string {
	why := "REDIS_PERSECOND_URL is not set: set it to the per-second Redis (host:port, redis://..., as REDIS_URL), or unset REDIS_PERSECOND to keep every counter in REDIS_URL's Redis"
	if u, _ := env("REDIS_PERSECOND_URL"); u != "" {
		why = "" // true is honoured
	}
	return whenTrue(why)(v, env)
}

// whenPerSecond applies f (a refusal or a note) only while
// REDIS_PERSECOND=true: the reference ignores the per-second Redis's
// variables otherwise.
func whenPerSecond(f func(string, lookupFunc) string) func(string, lookupFunc) string {
	return func(v string, env lookupFunc) string {
		if !perSecondOn(env) {
			return ""
		}
		return f(v, env)
	}
}

// always refuses every value.
func always(why string) func(string, lookupFunc) string {
	return func(string, lookupFunc) string { return why }
}

// whenTrue refuses true, and what is not a boolean.
func whenTrue(why string) func(string, lookupFunc) string {
	return func(v string, _ lookupFunc) string {
		b, err := strconv.ParseBool(v)
		switch {
		case err != nil:
			return "want true or false"
		case b:
			return why
		}
		return ""
	}
}

// unlessBool refuses what is not a boolean, as the reference does at start.
func unlessBool(v string, _ lookupFunc) string {
	if _, err := strconv.ParseBool(v); err != nil {
		return "want true or false"
	}
	return ""
}

// unlessIn refuses values other than those listed (in any case).
func unlessIn(why string, ok ...string) func(string, lookupFunc) string {
	return func(v string, _ lookupFunc) string {
		for _, o := range ok {
			if strings.EqualFold(v, o) {
				return ""
			}
		}
		return why
	}
}

// whenPrometheus refuses a value while the reference would serve
// Prometheus metrics (USE_PROMETHEUS=true).
func whenPrometheus(why string) func(string, lookupFunc) string {
	return func(_ string, env lookupFunc) string {
		if isSetTrue(env, "USE_PROMETHEUS") {
			return why
		}
		return ""
	}
}

func noteAlways(note string) func(string, lookupFunc) string {
	return func(string, lookupFunc) string { return note }
}

func noteWhenTrue(note string) func(string, lookupFunc) string {
	return func(v string, _ lookupFunc) string {
		if b, _ := strconv.ParseBool(v); b {
			return note
		}
		return ""
	}
}

// isSetTrue reports whether the variable name is set to true.
func isSetTrue(env lookupFunc, name string) bool {
	v, _ := env(name)
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

// isFalse reports whether the variable name is set to false.
func isFalse(env lookupFunc, name string) bool {
	v, _ := env(name)
	b, err := strconv.ParseBool(v)
	return err == nil && !b
}

// checkReference refuses the reference variables set to values floodgate
// cannot honour, all at once, and returns the notes to log about the
// others. withRedis says whether Redis is configured.
func checkReference(env lookupFunc, withRedis bool) (notes []string, err error) {
	var refused []string
	for i := range referenceVars {
		r := &referenceVars[i]
		v, ok := env(r.name)
		if !ok || v == "" {
			continue
		}
		if r.refuse != nil {
			if why := r.refuse(v, env); why != "" {
				refused = append(refused, fmt.Sprintf("%s=%s: %s", r.name, v, why))
				continue
			}
		}
		if r.redis && !withRedis {
			refused = append(refused, fmt.Sprintf("%s is set but REDIS_URL is not: the reference server would use its default socket, /var/run/nutcracker/ratelimit.sock, and floodgate would keep the counters in memory; set REDIS_URL", r.name))
			continue
		}
		if r.note != nil {
			if n := r.note(v, env); n != "" {
				notes = append(notes, n)
			}
		}
	}
	if len(refused) == 1 {
		return nil, fmt.Errorf("this envoyproxy/ratelimit setting cannot be honoured (see docs/migrating.md): %s", refused[0])
	}
	if len(refused) > 0 {
		return nil, fmt.Errorf("refusing to start: these envoyproxy/ratelimit settings cannot be honoured (see docs/migrating.md):\n  %s", strings.Join(refused, "\n  "))
	}
	return notes, nil
}
