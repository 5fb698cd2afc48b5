package settings

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/statsd"
)

// Reference is one environment variable of envoyproxy/ratelimit and what
// floodgate does with it: honoured (it sets Flag), accepted (floodgate
// already behaves as it asks), or refused at start for the values
// floodgate cannot honour. None is ignored in silence: a difference worth
// knowing is a note at start. docs/migrating.md shows the table.
type Reference struct {
	Name string
	// Flag is the flag the variable sets; "" when it sets none.
	Flag string
	// Value derives the flag's value from the environment; nil reads the
	// variable alone.
	Value envSource
	// While, when set, reads the flag's value only while it reports true,
	// as the reference reads its xDS, Prometheus, per-second and Memcached
	// variables only when they are on.
	While func(Lookup) bool
	// Refuse returns why floodgate cannot honour the value v (set, not
	// empty) and what to use instead, or "" when it can; nil refuses
	// nothing.
	Refuse func(v string, env Lookup) string
	// Note returns a remark to log at start about the value v, or "".
	Note func(v string, env Lookup) string
	// Kind is how the reference parses the value at start, whatever else
	// is set (envconfig reads its whole settings struct): a value that
	// does not parse stops it, and floodgate refuses it as well. The zero
	// value is a string, which takes anything.
	Kind kind
	// Redis marks variables that mean something only with Redis: without
	// REDIS_URL they are refused.
	Redis bool
	// Source is where the reference reads the variable: "" for its
	// settings.go, else the library that does ("gostats", "datadog-go"),
	// or "readme" for one only its README documents.
	Source string
	// Tag, with DogStatsD on, makes the variable's value a tag of every
	// stat, as the reference's DogStatsD client (datadog-go) does.
	Tag string
	// In is what floodgate does with it in docs/migrating.md; empty means
	// "honoured: `-flag`".
	In string
	// Doc is the note docs/migrating.md's table gives it (Markdown).
	Doc string
}

// from returns where r's flag value comes from: nowhere while While
// reports false, nor for a Redis variable while BACKEND_TYPE=memcache
// (see redisBackend).
func (r *Reference) from() envSource {
	src := r.Value
	if src == nil {
		src = envVar(r.Name)
	}
	return func(env Lookup) (string, string, bool) {
		if r.While != nil && !r.While(env) || r.redisBackend() && memcacheOn(env) {
			return "", "", false
		}
		return src(env)
	}
}

// redisBackend reports whether r is a REDIS_* variable, which the
// reference ignores with BACKEND_TYPE=memcache, and so does floodgate.
func (r *Reference) redisBackend() bool {
	return strings.HasPrefix(r.Name, "REDIS_")
}

// References is the table, in the order of the reference's settings.go.
var References = []Reference{
	{Name: "HOST", Flag: "http-addr", Value: hostPort("HOST", "PORT", "", "8080"), Doc: "with `PORT`; the HTTP port (`/healthcheck`, `/json`, `/rlconfig`, `/metrics`)"},
	{Name: "PORT", Kind: kindInt, Flag: "http-addr", Value: hostPort("HOST", "PORT", "", "8080"), Doc: "8080 by default"},
	{Name: "DEBUG_HOST", Flag: "debug-addr", Value: hostPort("DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", "6070"), Doc: "default `127.0.0.1`, not `0.0.0.0`: see below"},
	{Name: "DEBUG_PORT", Kind: kindInt, Flag: "debug-addr", Value: hostPort("DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", "6070"), Doc: "6070 by default; alone it stays on loopback"},
	// GRPC_UDS comes first: in the reference it wins over GRPC_HOST/PORT.
	{Name: "GRPC_UDS", Flag: "grpc-addr", Value: prefixed("GRPC_UDS", "unix:"), Doc: "`unix:PATH`: gRPC on a unix socket, winning over `GRPC_HOST`/`GRPC_PORT` as in the reference"},
	{Name: "GRPC_HOST", Flag: "grpc-addr", Value: hostPort("GRPC_HOST", "GRPC_PORT", "", "8081"), Doc: "with `GRPC_PORT`"},
	{Name: "GRPC_PORT", Kind: kindInt, Flag: "grpc-addr", Value: hostPort("GRPC_HOST", "GRPC_PORT", "", "8081"), Doc: "8081 by default"},
	{Name: "GRPC_MAX_CONNECTION_AGE", Kind: kindDuration, Flag: "grpc-max-connection-age", Doc: "unset, connections are never aged (the reference: 24h)"},
	{Name: "GRPC_MAX_CONNECTION_AGE_GRACE", Kind: kindDuration, Flag: "grpc-max-connection-age-grace", Doc: "unset, no bound (the reference: 1h)"},
	{Name: "GRPC_SERVER_USE_TLS", Kind: kindBool, Flag: "grpc-tls", Doc: "TLS 1.2 or later"},
	{Name: "GRPC_SERVER_TLS_CERT", Flag: "grpc-tls-cert", Doc: "reloaded when the file changes"},
	{Name: "GRPC_SERVER_TLS_KEY", Flag: "grpc-tls-key", Doc: "reloaded when the file changes"},
	{Name: "GRPC_CLIENT_TLS_CACERT", Flag: "grpc-client-ca", Doc: "mutual TLS; without `GRPC_SERVER_USE_TLS=true` refused at start"},
	{Name: "GRPC_CLIENT_TLS_SAN", Flag: "grpc-client-san", Doc: "the client certificate must be valid for this DNS name or IP address (its SANs, as hostname verification reads them); without `GRPC_CLIENT_TLS_CACERT`, or as a URI, refused at start"},
	{Name: "LOG_LEVEL", Flag: "log-level", Doc: "any case, as logrus; its names accepted (`trace`, `warning`, `fatal`, `panic`)"},
	{Name: "LOG_FORMAT", Flag: "log-format", Doc: "`text` or `json`, any case; another value is refused (the reference falls back to text)"},

	{Name: "CONFIG_TYPE", Flag: "config-type", Doc: "`FILE` (the default) or `GRPC_XDS_SOTW`, any case: the rules come from an xDS management server such as Envoy Gateway's ([xds.md](xds.md)); another value is refused"},
	{Name: "FORCE_START_WITHOUT_INITIAL_CONFIG", Kind: kindBool, Flag: "xds-force-start", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: serve before the first rules arrive, every request allowed until then; unset, the listeners open once they have"},
	{Name: "CONFIG_GRPC_XDS_NODE_ID", Flag: "xds-node-id", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`; `default` by default, as in the reference"},
	{Name: "CONFIG_GRPC_XDS_NODE_METADATA", Flag: "xds-node-metadata", Value: pairedOnly("CONFIG_GRPC_XDS_NODE_METADATA"), While: xdsOn, Note: noteUnpaired, Doc: "with `GRPC_XDS_SOTW`: `k1=v1,k2=v2`; an entry without `=` (`k1:v1`, as the reference's own comment shows) is dropped, as the reference drops it, with a note at start naming it"},
	{Name: "CONFIG_GRPC_XDS_SERVER_URL", Flag: "xds-server", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`; `localhost:18000` by default"},
	{Name: "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", Kind: kindDuration, Flag: "xds-retry-interval", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: pause, ±50 %, before subscribing again after the stream ended; 3s by default"},
	{Name: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", Kind: kindMap, Flag: "xds-headers", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: `k1:v1,k2:v2`, sent as gRPC metadata on the stream"},
	{Name: "CONFIG_GRPC_XDS_SERVER_USE_TLS", Kind: kindBool, Flag: "xds-tls", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: TLS 1.2 or later to the management server"},
	{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT", Flag: "xds-tls-cert", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: mutual TLS, with the key; without `CONFIG_GRPC_XDS_SERVER_USE_TLS=true` refused at start"},
	{Name: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", Flag: "xds-tls-key", While: xdsOn, Doc: "as the certificate"},
	{Name: "CONFIG_GRPC_XDS_SERVER_TLS_CACERT", Flag: "xds-tls-ca", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: CA certificates besides the system's roots; without `CONFIG_GRPC_XDS_SERVER_USE_TLS=true` refused at start"},
	{Name: "CONFIG_GRPC_XDS_SERVER_TLS_SAN", Flag: "xds-tls-san", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: the name the server's certificate must hold; without `CONFIG_GRPC_XDS_SERVER_USE_TLS=true` refused at start"},
	{Name: "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", Kind: kindDuration, Flag: "xds-backoff-initial", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: first wait between attempts to reach the server, each next 1.6 times longer; 10s by default"},
	{Name: "XDS_CLIENT_BACKOFF_MAX_INTERVAL", Kind: kindDuration, Flag: "xds-backoff-max", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: longest wait; 60s by default"},
	{Name: "XDS_CLIENT_BACKOFF_RANDOM_FACTOR", Kind: kindFloat, Flag: "xds-backoff-random-factor", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: each wait randomised by this share; 0.5 by default"},
	{Name: "XDS_CLIENT_BACKOFF_JITTER", Kind: kindBool, Flag: "xds-backoff-jitter", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: `false` waits exactly"},
	{Name: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", Kind: kindInt, Flag: "xds-max-message-bytes", While: xdsOn, Doc: "with `GRPC_XDS_SOTW`: largest response accepted; unset, gRPC's 4 MiB"},

	{Name: "USE_DOG_STATSD", Kind: kindBool, Flag: "dogstatsd", Doc: "DogStatsD over UDP, tags as `\\|#k:v`; refused together with `USE_STATSD=true`, as the reference refuses it", Refuse: func(v string, env Lookup) string {
		if isSetTrue(env, "USE_STATSD") && isSetTrue(env, "USE_DOG_STATSD") {
			return "USE_STATSD and USE_DOG_STATSD are both true, which the reference refuses too: keep one"
		}
		return ""
	}},
	{Name: "USE_DOG_STATSD_MOGRIFIERS", Flag: "dogstatsd-mogrifiers", Doc: "with its `DOG_STATSD_MOGRIFIER_<NAME>_{PATTERN,NAME,TAGS}` variables; needs DogStatsD"},
	{Name: "DD_ENV", Source: "datadog-go", Tag: "env", In: "honoured with `USE_DOG_STATSD=true`", Doc: "a tag `env:<value>` on every stat, as the reference's DogStatsD client adds it"},
	{Name: "DD_SERVICE", Source: "datadog-go", Tag: "service", In: "honoured with `USE_DOG_STATSD=true`", Doc: "a tag `service:<value>` on every stat"},
	{Name: "DD_VERSION", Source: "datadog-go", Tag: "version", In: "honoured with `USE_DOG_STATSD=true`", Doc: "a tag `version:<value>` on every stat"},
	{Name: "DD_ENTITY_ID", Source: "datadog-go", Tag: "dd.internal.entity_id", In: "honoured with `USE_DOG_STATSD=true`", Doc: "a tag `dd.internal.entity_id:<value>` on every stat"},
	{Name: "USE_STATSD", Kind: kindBool, Flag: "statsd", Value: statsdOn, Doc: "the reference's stat names (see [operations](operations.md)) besides Prometheus. The reference defaults to `true`; floodgate sends statsd when `USE_STATSD=true`, or when it is unset and `STATSD_HOST` or `STATSD_PORT` is set; with nothing set it keeps to Prometheus"},
	{Name: "STATSD_HOST", Flag: "statsd-addr", Value: hostPort("STATSD_HOST", "STATSD_PORT", "localhost", "8125"), Doc: "with `STATSD_PORT` (default `localhost:8125`)"},
	{Name: "STATSD_PORT", Kind: kindInt, Flag: "statsd-addr", Value: hostPort("STATSD_HOST", "STATSD_PORT", "localhost", "8125"), Doc: "likewise"},
	{Name: "STATSD_PROTOCOL", Flag: "statsd-protocol", Source: "gostats", Doc: "`tcp` by default for statsd and `udp` for DogStatsD, as the reference (its statsd library, lyft/gostats, reads it)"},
	{Name: "EXTRA_TAGS", Kind: kindMap, Flag: "statsd-tags", Doc: "in the names (`.__k=v`) for statsd, as `\\|#k:v` for DogStatsD, as the reference"},
	{Name: "STATS_FLUSH_INTERVAL", Kind: kindDuration, Flag: "statsd-flush-interval", Doc: "Prometheus is read live at each scrape"},
	{Name: "DISABLE_STATS", Kind: kindBool, Flag: "statsd", Value: statsdOn, Doc: "`true` turns statsd off, and the `PROMETHEUS_ADDR` listener, as in the reference; `/metrics` stays"},
	{Name: "USE_PROMETHEUS", Kind: kindBool, Flag: "prometheus-addr", Value: prometheusAddr, Refuse: prometheusBesideDogStatsd, Note: notePrometheus, Doc: "`true`: the reference's stats served as Prometheus metrics on a listener of its own, `PROMETHEUS_ADDR` (`:9090` when unset), through statsd_exporter's mapping, as the reference serves them (see [operations](operations.md#prometheus-as-the-reference-serves-it)); floodgate's own `floodgate_*` metrics stay on the HTTP port's `/metrics`. With `DISABLE_STATS=true` none, as the reference; with `USE_DOG_STATSD=true` refused, as the reference refuses it; with `USE_STATSD=true`, which the reference refuses to start with (it also refuses `USE_PROMETHEUS=true` alone, `USE_STATSD` defaulting to `true` there), statsd is sent too, with a note"},
	{Name: "PROMETHEUS_ADDR", Flag: "prometheus-addr", Value: prometheusAddr, Note: unlessPrometheus, Doc: "with `USE_PROMETHEUS=true`; set without it, not read, as the reference, with a note"},
	{Name: "PROMETHEUS_PATH", Flag: "prometheus-path", While: prometheusOn, Note: unlessPrometheus, Doc: "with `USE_PROMETHEUS=true`; `/metrics` by default"},
	{Name: "PROMETHEUS_MAPPER_YAML", Flag: "prometheus-mapper", While: prometheusOn, Note: unlessPrometheus, Doc: "with `USE_PROMETHEUS=true`: the statsd_exporter mapping (Envoy Gateway's `/etc/statsd-exporter/conf.yaml`), read with statsd_exporter v0.26.1, the reference's; unset, the reference's own. A file that does not exist maps nothing, with a warning, as the reference (which says nothing); one that is not a mapping stops the start, where the reference ignores it"},
	{Name: "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Flag: "prometheus-response-time-ms", While: prometheusOn, Note: unlessPrometheus, Doc: "with `USE_PROMETHEUS=true` and the reference's own mapping: the response time histogram in milliseconds, as the reference before its `6b266b0` (2026-04-19), not seconds; no effect with `PROMETHEUS_MAPPER_YAML`"},

	{Name: "RUNTIME_ROOT", Flag: "config", Value: runtimePath, Doc: "`$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY`, root default `/srv/runtime_data/current`"},
	{Name: "RUNTIME_SUBDIRECTORY", Flag: "config", Value: runtimePath},
	{Name: "RUNTIME_APPDIRECTORY", Flag: "config", Value: runtimePath, Doc: "default `config`"},
	{Name: "RUNTIME_IGNOREDOTFILES", Kind: kindBool, Flag: "ignore-dotfiles", Doc: "unset or `false`, names starting with `.` are read, as the reference reads them; Kubernetes' `..data` entries are read once, through the links beside them (the reference reads them twice, and fails on the repeated domain)"},
	{Name: "RUNTIME_WATCH_ROOT", Kind: kindBool, Refuse: unlessBool, In: "honoured, both values; what is not a boolean is refused", Doc: "every link along the rule path and every directory of its tree is watched: the swap of `RUNTIME_ROOT`'s link (`true`) and edits in the directory (`false`) both reload, ConfigMap `..data` swaps too"},

	{Name: "EXPIRATION_JITTER_MAX_SECONDS", Kind: kindInt, Note: noteAlways("EXPIRATION_JITTER_MAX_SECONDS has no effect: each counter expires when its state no longer matters"), In: "accepted, with a note", Doc: "each counter expires when its state no longer matters"},
	{Name: "LOCAL_CACHE_SIZE_IN_BYTES", Kind: kindInt, In: "accepted, with a note when above 0", Doc: "the deny cache plays its part, on by default with Redis, sized by `-deny-cache-size` (in denials)", Note: func(v string, _ Lookup) string {
		if n, err := strconv.ParseInt(v, 0, 64); err == nil && n > 0 {
			return "LOCAL_CACHE_SIZE_IN_BYTES: the deny cache (-deny-cache, on by default with Redis) answers over-limit requests without Redis; its size is -deny-cache-size, in denials"
		}
		return ""
	}},
	{Name: "NEAR_LIMIT_RATIO", Kind: kindFloat, Flag: "near-limit-ratio"},
	{Name: "CACHE_KEY_PREFIX", Flag: "key-prefix", In: "honoured: `-key-prefix`; refused without a store", Doc: "needs `REDIS_URL` or `BACKEND_TYPE=memcache`", Refuse: func(_ string, env Lookup) string {
		if u, _ := env("REDIS_URL"); u != "" || memcacheOn(env) {
			return ""
		}
		return "set but neither REDIS_URL nor BACKEND_TYPE=memcache is: counters kept in memory have no key prefix"
	}},
	{Name: "BACKEND_TYPE", In: "`redis` accepted; `memcache` honoured: `-memcache`; refused without `MEMCACHE_HOST_PORT` or `MEMCACHE_SRV`", Doc: "Memcached keeps fixed windows only: a rule with another algorithm is refused at load, naming it. Unlike the reference, a refused request charges nothing but its usage reports (a descriptor's own `hits_addend`) and a counter never admits more than its limit (see `internal/memcachelimit`). The reference never enforces `year` limits there, nor `month` limits unless `EXPIRATION_JITTER_MAX_SECONDS=0` (their expiry, over 30 days once its jitter is added, reads as a date long past: the key is gone at once; with the default jitter of 300 s one key in 300 escapes), and answers OK, counting nothing, to a whole request with a value holding a space or a key over 250 bytes; floodgate enforces both, so traffic that always passed may be refused at the switch. Its `ratelimit.memcache.*` stats are not sent (a failure counts in `redis_error`), and health stays SERVING where the reference's `ratelimit` service reports NOT_SERVING with Memcached (since its `b8d893f`, 2026-05-27; SERVING before). Every `REDIS_*` variable is then ignored, as the reference ignores it, with a note at start naming them", Refuse: func(v string, env Lookup) string {
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
	{Name: "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Kind: kindBool, In: "accepted", Doc: "floodgate never charges a rejected request, whether it is `true` or `false`"}, // a rejected request never charges a counter

	{Name: "LIMIT_RESPONSE_HEADERS_ENABLED", Kind: kindBool, Flag: "response-headers", Value: headersEnabled, Doc: "`true` is `-response-headers reference`: the same three headers, of the same descriptor, and `Retry-After` on over-limit answers, which the reference does not add"},
	{Name: "LIMIT_LIMIT_HEADER", Flag: "limit-header"},
	{Name: "LIMIT_REMAINING_HEADER", Flag: "remaining-header"},
	{Name: "LIMIT_RESET_HEADER", Flag: "reset-header"},

	{Name: "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", Kind: kindBool, Flag: "health-requires-rules", Doc: "NOT_SERVING while the rules declare no domain: gRPC health for the service `\"\"` (what Kubernetes' gRPC probes and Envoy ask by default) as well as `ratelimit`, and `/healthcheck`; the reference leaves `\"\"` SERVING"},

	{Name: "REDIS_SOCKET_TYPE", Refuse: unlessIn("want tcp or unix", "tcp", "unix"), Redis: true, In: "`tcp`, `unix` accepted (any case); others, `udp` included, refused", Doc: "`unix` makes `REDIS_URL` a socket path"},
	{Name: "REDIS_TYPE", Flag: "redis-type", Redis: true, Doc: "`single`, `sentinel`, `cluster`, any case"},
	{Name: "REDIS_URL", Flag: "redis", Value: socketURL("REDIS_URL", "REDIS_SOCKET_TYPE"), Doc: "unset, floodgate keeps counters in memory; so every other Redis variable without it is refused (the reference would use `/var/run/nutcracker/ratelimit.sock`)"},
	{Name: "REDIS_POOL_SIZE", Kind: kindInt, Flag: "redis-pool-size", Redis: true},
	{Name: "REDIS_AUTH", Flag: "redis-auth", Redis: true, Doc: "`password` or `user:password`; never logged"},
	{Name: "REDIS_SENTINEL_AUTH", Flag: "redis-sentinel-auth", Redis: true, Doc: "the Sentinels' own password; needs `REDIS_TYPE=sentinel`"},
	{Name: "REDIS_TLS", Kind: kindBool, Flag: "redis-tls", Redis: true, Doc: "every node, and the Sentinels"},
	{Name: "REDIS_TLS_CLIENT_CERT", Flag: "redis-tls-cert", Redis: true, Doc: "with `REDIS_TLS_CLIENT_KEY`, for `tls-auth-clients yes`"},
	{Name: "REDIS_TLS_CLIENT_KEY", Flag: "redis-tls-key", Redis: true},
	{Name: "REDIS_TLS_CACERT", Flag: "redis-tls-ca", Redis: true, Doc: "added to the system's roots, as in the reference"},
	{Name: "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", Kind: kindBool, Flag: "redis-tls-skip-hostname-verification", Redis: true, Doc: "the chain is still verified"},
	{Name: "REDIS_PIPELINE_WINDOW", Kind: kindDuration, Flag: "redis-pipeline-window", Redis: true, Doc: "a request that finds a round trip free waits this long for others to share it (e.g. `150us`); 0, the default, waits only while another round trip is outstanding, up to 150 µs, and concurrent requests share round trips either way; single and Sentinel (the reference applies it on Cluster only)"},
	{Name: "REDIS_PIPELINE_LIMIT", Kind: kindInt, Flag: "redis-pipeline-limit", Redis: true, Doc: "most requests (not commands) in one round trip, and a window ends early once this many wait; 0 means 64 (the reference ignores it: deprecated)"},
	{Name: "REDIS_TIMEOUT", Kind: kindDuration, Flag: "redis-dial-timeout", Redis: true, Doc: "the connect timeout; each request's Redis call is bounded by `FLOODGATE_REDIS_DEADLINE` (50 ms)"},
	{Name: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Kind: kindBool, Flag: "health-requires-store", Redis: true, Doc: "health NOT_SERVING while Redis is unhealthy: see [operations](operations.md#start-up)"},
	{Name: "REDIS_POOL_ON_EMPTY_BEHAVIOR", Redis: true, Refuse: unlessIn("a request waits for a free connection, and never past -redis-deadline (then the failure policy answers): for more connections raise REDIS_POOL_SIZE, and unset REDIS_POOL_ON_EMPTY_BEHAVIOR or set it to WAIT", "WAIT"), In: "`WAIT` accepted; `CREATE`, `ERROR` refused", Doc: "a request waits for a connection at most `-redis-deadline`; raise `REDIS_POOL_SIZE`"},
	{Name: "REDIS_POOL_ON_EMPTY_WAIT_DURATION", Source: "readme", Redis: true, Note: noteAlways("REDIS_POOL_ON_EMPTY_WAIT_DURATION: a request waits for a free connection at most -redis-deadline (FLOODGATE_REDIS_DEADLINE)"), In: "accepted, with a note", Doc: "the wait is bounded by `-redis-deadline`; the reference no longer reads it (removed in 2025), though its README documents it"},
	{Name: "REDIS_CLUSTER_PIPELINE_PARALLELISM", Redis: true, Refuse: unlessWhole, Note: noteAlways("REDIS_CLUSTER_PIPELINE_PARALLELISM: on Redis Cluster floodgate sends a request's calls to its slots' masters all at once, whatever it says"), In: "accepted, with a note; what is not a whole number is refused", Doc: "on Cluster, a request's calls go to their slots' masters concurrently, always"},
	{Name: "REDIS_STARTUP_INITIAL_INTERVAL", Redis: true, Refuse: unlessDuration, Note: noteAlways(startupNote), In: "accepted, with a note", Doc: "floodgate does not hold its start for Redis: see `REDIS_STARTUP_MAX_ELAPSED_TIME`"},
	{Name: "REDIS_STARTUP_MAX_INTERVAL", Redis: true, Refuse: unlessDuration, Note: noteAlways(startupNote), In: "accepted, with a note", Doc: "as `REDIS_STARTUP_INITIAL_INTERVAL`"},
	{Name: "REDIS_STARTUP_MAX_ELAPSED_TIME", Redis: true, Refuse: unlessDuration, Note: noteWhenPositive(startupNote + "; it never exits for Redis, where the reference exits after REDIS_STARTUP_MAX_ELAPSED_TIME"), In: "accepted, with a note when above 0", Doc: "the reference opens no port until Redis answers, and exits (code 2) after this much time when set; floodgate serves at once by the failure policy, probes Redis every second, holds readiness until it has answered (`-store-readiness`), and never exits for Redis"},
	{Name: "REDIS_PERSECOND", Kind: kindBool, Flag: "redis-persecond", Value: perSecondURL, While: perSecondOn, Refuse: perSecondNeedsURL, In: "honoured: `-redis-persecond`; `true` without `REDIS_PERSECOND_URL` refused", Doc: "`true`: the limits whose window is shorter than a minute are counted in `REDIS_PERSECOND_URL`'s Redis, the others in `REDIS_URL`'s (see below); needs `REDIS_URL`"},
	{Name: "REDIS_PERSECOND_SOCKET_TYPE", Refuse: whenPerSecond(unlessIn("want tcp or unix", "tcp", "unix")), In: "`tcp`, `unix` accepted; others refused", Doc: "`unix` makes `REDIS_PERSECOND_URL` a socket path; like every `REDIS_PERSECOND_*`, read only with `REDIS_PERSECOND=true`, as in the reference"},
	{Name: "REDIS_PERSECOND_TYPE", Flag: "redis-persecond-type", While: perSecondOn, Doc: "`single`, `sentinel`, `cluster`, any case"},
	{Name: "REDIS_PERSECOND_URL", Flag: "redis-persecond", Value: perSecondURL, While: perSecondOn, Doc: "the same forms as `REDIS_URL`"},
	{Name: "REDIS_PERSECOND_POOL_SIZE", Kind: kindInt, Flag: "redis-persecond-pool-size", While: perSecondOn},
	{Name: "REDIS_PERSECOND_AUTH", Flag: "redis-persecond-auth", While: perSecondOn, Doc: "`password` or `user:password`; never logged"},
	{Name: "REDIS_PERSECOND_SENTINEL_AUTH", Flag: "redis-persecond-sentinel-auth", While: perSecondOn, Doc: "needs `REDIS_PERSECOND_TYPE=sentinel`"},
	{Name: "REDIS_PERSECOND_TLS", Kind: kindBool, Flag: "redis-persecond-tls", While: perSecondOn, Doc: "verified with the `REDIS_TLS_*` files, as in the reference"},
	{Name: "REDIS_PERSECOND_PIPELINE_WINDOW", Kind: kindDuration, Flag: "redis-persecond-pipeline-window", While: perSecondOn, Doc: "a request that finds a round trip free waits this long for others to share it (e.g. `150us`); 0, the default, waits only while another round trip is outstanding, up to 150 µs, and concurrent requests share round trips either way; single and Sentinel"},
	{Name: "REDIS_PERSECOND_PIPELINE_LIMIT", Kind: kindInt, Flag: "redis-persecond-pipeline-limit", While: perSecondOn, Doc: "most requests (not commands) in one round trip, and a window ends early once this many wait; 0 means 64"},
	{Name: "REDIS_PERSECOND_TIMEOUT", Kind: kindDuration, Flag: "redis-persecond-dial-timeout", While: perSecondOn, Doc: "the connect timeout; each request's Redis calls are bounded by `FLOODGATE_REDIS_DEADLINE` (50 ms)"},
	{Name: "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", Refuse: whenPerSecond(unlessIn("a request waits for a free connection, and never past -redis-deadline (then the failure policy answers): for more connections raise REDIS_PERSECOND_POOL_SIZE, and unset REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR or set it to WAIT", "WAIT")), In: "`WAIT` accepted; `CREATE`, `ERROR` refused", Doc: "a request waits for a connection at most `-redis-deadline`; raise `REDIS_PERSECOND_POOL_SIZE`"},
	{Name: "REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION", Source: "readme", Note: whenPerSecond(noteAlways("REDIS_PERSECOND_POOL_ON_EMPTY_WAIT_DURATION: a request waits for a free connection at most -redis-deadline (FLOODGATE_REDIS_DEADLINE)")), In: "accepted, with a note", Doc: "the wait is bounded by `-redis-deadline`; the reference no longer reads it (removed in 2025), though its README documents it"},
	{Name: "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM", Refuse: whenPerSecond(unlessWhole), Note: whenPerSecond(noteAlways("REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM: on Redis Cluster floodgate sends a request's calls to its slots' masters all at once, whatever it says")), In: "accepted, with a note; what is not a whole number is refused", Doc: "as `REDIS_CLUSTER_PIPELINE_PARALLELISM`, read only with `REDIS_PERSECOND=true`"},

	{Name: "MEMCACHE_HOST_PORT", Flag: "memcache", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; comma-separated `host:port`s; each counter on one server by rendezvous hashing (the reference: CRC32 modulo the count, so keys differ and the two cannot share counters)"},
	{Name: "MEMCACHE_MAX_IDLE_CONNS", Kind: kindInt, Flag: "memcache-max-idle-conns", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; 0 or less: 16 per server"},
	{Name: "MEMCACHE_SRV", Flag: "memcache-srv", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; resolved at start"},
	{Name: "MEMCACHE_SRV_REFRESH", Kind: kindDuration, Flag: "memcache-srv-refresh", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; a failed refresh keeps the servers in force"},
	{Name: "MEMCACHE_TLS", Kind: kindBool, Flag: "memcache-tls", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; "},
	{Name: "MEMCACHE_TLS_CLIENT_CERT", Flag: "memcache-tls-cert", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; "},
	{Name: "MEMCACHE_TLS_CLIENT_KEY", Flag: "memcache-tls-key", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; "},
	{Name: "MEMCACHE_TLS_CACERT", Flag: "memcache-tls-ca", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; added to the system roots"},
	{Name: "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", Kind: kindBool, Flag: "memcache-tls-skip-hostname-verification", While: memcacheOn, Doc: "read only with `BACKEND_TYPE=memcache`, as the reference; the chain is still verified"},

	{Name: "SHADOW_MODE", Kind: kindBool, Flag: "shadow-mode", Doc: "a request answered OK only because of it is charged to none of its limits, as every refused request (the reference charges those within their limit): counts, metrics and the `limit_remaining` of those limits differ while it is on, answers' codes do not"},
	{Name: "QUOTA_MODE", Kind: kindBool, Flag: "quota-mode", Doc: "every descriptor is a quota but the unlimited ones: a request is refused only when every quota is over, and never when one matches no rule or is in shadow mode; each descriptor's own status still says `OVER_LIMIT`; see [rules](rules.md#quota-mode)"},
	{Name: "RESPONSE_DYNAMIC_METADATA", Kind: kindBool, Flag: "response-dynamic-metadata", Doc: "`domain`, `descriptors`, `hitsAddend` and the merged `metadata` of the rules that passed, as the reference (which leaves out that of `detailed_metric` and `value_to_metric` rules; floodgate does not), a descriptor's `limit` override as protobuf text with one space between fields (the reference's spacing changes from one build to another, as protobuf-go changes it on purpose); without it an answer carries none (but the failure policy's cause, see [operations](operations.md#failure-policy))"},
	{Name: "MERGE_DOMAIN_CONFIG", Kind: kindBool, Flag: "merge-domains"},

	// The reference reads the TRACING_* variables only with
	// TRACING_ENABLED=true; floodgate reads them always, used with -tracing.
	{Name: "TRACING_ENABLED", Kind: kindBool, Flag: "tracing", Doc: "OpenTelemetry traces over OTLP, off by default; where they go is the standard `OTEL_EXPORTER_OTLP_*` variables, as in the reference, but a value the exporter cannot use (an endpoint without `http://`/`https://`, headers without `=`, a timeout not in milliseconds, a malformed `OTEL_RESOURCE_ATTRIBUTES`) stops the start, where the reference logs it and exports to the default endpoint. **Spans differ**: one server span per request named `ShouldRateLimit Execution` with `domain`, as the reference's inner span, but no otelgrpc span `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` around it, no `request string` attribute (it would export descriptor values) and no `NewJsonHandler Remaining Execution` span; see [operations](operations.md#spans)"},
	{Name: "TRACING_SERVICE_NAME", Flag: "tracing-service-name", Doc: "`RateLimit` by default, as the reference; wins over `OTEL_SERVICE_NAME`"},
	{Name: "TRACING_SERVICE_NAMESPACE", Flag: "tracing-service-namespace"},
	{Name: "TRACING_SERVICE_INSTANCE_ID", Flag: "tracing-service-instance-id", Doc: "a random UUID when empty, as the reference"},
	{Name: "TRACING_EXPORTER_PROTOCOL", Flag: "tracing-protocol", Doc: "`http` (default) or `grpc`, in any case"},
	{Name: "TRACING_SAMPLING_RATE", Kind: kindFloat, Flag: "tracing-sampling-rate", Doc: "1 by default; applies to traces that start here: a caller's `traceparent` keeps its own sampling decision (parent-based), so that a trace Envoy samples is kept whole"},
}

// prefixed reads a variable and prepends prefix to its value.
func prefixed(name, prefix string) envSource {
	return func(env Lookup) (string, string, bool) {
		v, ok := env(name)
		return prefix + v, name, ok && v != ""
	}
}

// perSecondURL is REDIS_PERSECOND_URL, with REDIS_PERSECOND_SOCKET_TYPE.
var perSecondURL = socketURL("REDIS_PERSECOND_URL", "REDIS_PERSECOND_SOCKET_TYPE")

// perSecondNeedsURL refuses REDIS_PERSECOND=true without
// REDIS_PERSECOND_URL, and what is not a boolean.
func perSecondNeedsURL(v string, env Lookup) string {
	if why := unlessBool(v, env); why != "" {
		return why
	}
	if u, _ := env("REDIS_PERSECOND_URL"); u == "" && isBool(v, true) {
		return "REDIS_PERSECOND_URL is not set: set it to the per-second Redis (host:port, redis://..., as REDIS_URL), or unset REDIS_PERSECOND to keep every counter in REDIS_URL's Redis"
	}
	return ""
}

// whenPerSecond applies f (a refusal or a note) only while
// REDIS_PERSECOND=true: the reference ignores the per-second Redis's
// variables otherwise.
func whenPerSecond(f func(string, Lookup) string) func(string, Lookup) string {
	return func(v string, env Lookup) string {
		if !perSecondOn(env) {
			return ""
		}
		return f(v, env)
	}
}

// unlessBool refuses what is not a boolean, as the reference does at start.
func unlessBool(v string, _ Lookup) string { return kindBool.refuses(v) }

// unlessIn refuses values other than those listed (in any case).
func unlessIn(why string, ok ...string) func(string, Lookup) string {
	return func(v string, _ Lookup) string {
		for _, o := range ok {
			if strings.EqualFold(v, o) {
				return ""
			}
		}
		return why
	}
}

// prometheusBesideDogStatsd refuses USE_PROMETHEUS=true with
// USE_DOG_STATSD=true, as the reference does.
func prometheusBesideDogStatsd(v string, env Lookup) string {
	if prometheusOn(env) && isSetTrue(env, "USE_DOG_STATSD") {
		return "USE_DOG_STATSD and USE_PROMETHEUS are both true, which the reference refuses too: keep one"
	}
	return ""
}

// notePrometheus notes USE_PROMETHEUS=true where the reference would not
// serve it as asked: with DISABLE_STATS=true or USE_STATSD=true.
func notePrometheus(v string, env Lookup) string {
	switch {
	case !isSetTrue(env, "USE_PROMETHEUS"):
		return ""
	case isSetTrue(env, "DISABLE_STATS"):
		return "USE_PROMETHEUS=true with DISABLE_STATS=true: no Prometheus listener, as the reference serves none"
	case isSetTrue(env, "USE_STATSD"):
		return "USE_STATSD and USE_PROMETHEUS are both true, which the reference refuses to start with: floodgate sends statsd (-statsd-addr) and serves Prometheus (-prometheus-addr)"
	}
	return ""
}

// unlessPrometheus notes a PROMETHEUS_* variable set while the reference
// would not read it.
func unlessPrometheus(_ string, env Lookup) string {
	if prometheusOn(env) {
		return ""
	}
	return "PROMETHEUS_* variables are set but USE_PROMETHEUS is not true (or DISABLE_STATS is): not read, as the reference does not read them then"
}

// noteUnpaired names the entries of CONFIG_GRPC_XDS_NODE_METADATA that
// pairedOnly drops, when the rules come from xDS.
func noteUnpaired(v string, env Lookup) string {
	if dropped := unpaired(v); len(dropped) > 0 && xdsOn(env) {
		return "CONFIG_GRPC_XDS_NODE_METADATA: " + strings.Join(dropped, ", ") + " dropped: entries need key=value, and the reference drops the others too"
	}
	return ""
}

func noteAlways(note string) func(string, Lookup) string {
	return func(string, Lookup) string { return note }
}

// isSetTrue reports whether the variable name is set to true.
func isSetTrue(env Lookup, name string) bool {
	v, _ := env(name)
	return isBool(v, true)
}

// isBool reports whether v reads as the boolean want.
func isBool(v string, want bool) bool {
	b, err := strconv.ParseBool(v)
	return err == nil && b == want
}

// checkReference refuses, all at once, the reference variables set to
// values floodgate cannot honour, and notes what is worth knowing of the
// others. With DogStatsD, those with a Tag tag every stat.
func (c *Config) checkReference(env Lookup) error {
	var refused, ignored []string
	for i := range References {
		r := &References[i]
		v, ok := env(r.Name)
		if !ok || v == "" {
			continue
		}
		if r.redisBackend() && memcacheOn(env) {
			ignored = append(ignored, r.Name)
			continue
		}
		if r.Tag != "" && c.Statsd.Options.DogStatsD {
			c.Statsd.Options.Tags = append(c.Statsd.Options.Tags, statsd.Tag{Key: r.Tag, Value: v})
		}
		if r.Refuse != nil {
			if why := r.Refuse(v, env); why != "" {
				refused = append(refused, fmt.Sprintf("%s=%s: %s", r.Name, v, why))
				continue
			}
		}
		if r.Redis && c.Store.Redis.URL == "" {
			refused = append(refused, fmt.Sprintf("%s is set but REDIS_URL is not: the reference server would use its default socket, /var/run/nutcracker/ratelimit.sock, and floodgate would keep the counters in memory; set REDIS_URL", r.Name))
			continue
		}
		if r.Note != nil {
			if n := r.Note(v, env); n != "" {
				c.Notes = append(c.Notes, n)
			}
		}
	}
	if len(ignored) > 0 {
		c.Notes = append(c.Notes, "BACKEND_TYPE=memcache: "+strings.Join(ignored, ", ")+" ignored, as the reference ignores every REDIS_* variable with Memcached")
	}
	return refusal(refused)
}

// refusal is the error of the reference variables refused, all at once,
// or nil when there are none.
func refusal(refused []string) error {
	if len(refused) == 1 {
		return fmt.Errorf("this envoyproxy/ratelimit setting cannot be honoured (see docs/migrating.md): %s", refused[0])
	}
	if len(refused) > 0 {
		return fmt.Errorf("refusing to start: these envoyproxy/ratelimit settings cannot be honoured (see docs/migrating.md):\n  %s", strings.Join(refused, "\n  "))
	}
	return nil
}

// checkKinds refuses the reference variables whose value does not parse as
// the reference parses it (Reference.Kind), whatever the mode, an empty
// one included: the reference parses a variable set empty too. Those
// floodgate reads were judged by the checks before, naming their flag.
func checkKinds(env Lookup) error {
	var refused []string
	for _, r := range References {
		v, set := env(r.Name)
		if why := r.Kind.refuses(v); set && why != "" {
			if v == "" {
				why += " (it is set, empty: unset it)"
			}
			shown := fmt.Sprintf("%s=%q", r.Name, v)
			if r.Kind == kindMap {
				shown = r.Name + " (its value not shown: it may hold a credential)"
			}
			refused = append(refused, fmt.Sprintf("%s: %s, and the reference refuses to start with it too, whatever the mode", shown, why))
		}
	}
	return refusal(refused)
}

// kind is a type the reference parses a variable as (Reference.Kind).
type kind string

const (
	kindBool     kind = "bool"
	kindInt      kind = "int"
	kindFloat    kind = "float"
	kindDuration kind = "duration"
	kindMap      kind = "map" // k1:v1,k2:v2
)

// refuses returns what a value of k must be when v does not parse as the
// reference's envconfig parses it, or "".
func (k kind) refuses(v string) string {
	switch k {
	case kindBool:
		if _, err := strconv.ParseBool(v); err != nil {
			return wantBool
		}
	case kindInt:
		if _, err := strconv.ParseInt(v, 0, 64); err != nil {
			return "want an integer"
		}
	case kindFloat:
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return "want a number"
		}
	case kindDuration:
		if _, err := time.ParseDuration(v); err != nil {
			return "want a duration such as 1s or 30s"
		}
	case kindMap:
		if strings.TrimSpace(v) == "" {
			return "" // an empty map
		}
		for pair := range strings.SplitSeq(v, ",") {
			if strings.Count(pair, ":") != 1 {
				return "want key:value pairs, comma-separated, each with one ':'"
			}
		}
	}
	return ""
}

// startupNote is the note of the REDIS_STARTUP_* variables.
const startupNote = "REDIS_STARTUP_*: floodgate does not hold its start for Redis: it serves at once, by the failure policy until Redis answers, probes it every second, and holds readiness until it has answered (-store-readiness)"

// unlessWhole refuses what is not a whole number, 0 or more.
func unlessWhole(v string, _ Lookup) string {
	if n, err := strconv.ParseInt(v, 0, 64); err != nil || n < 0 {
		return "want a whole number, 0 or more"
	}
	return ""
}

// unlessDuration refuses what is not a duration.
func unlessDuration(v string, _ Lookup) string { return kindDuration.refuses(v) }

// noteWhenPositive notes a duration above 0.
func noteWhenPositive(note string) func(string, Lookup) string {
	return func(v string, _ Lookup) string {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			return note
		}
		return ""
	}
}
