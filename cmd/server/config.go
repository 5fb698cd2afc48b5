package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/denycache"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/replay"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
	"github.com/floodgate/floodgate/pkg/xds"
)

// config is the whole configuration of the binary, assembled from flags,
// then floodgate's FLOODGATE_* variables (floodgateVar), then the
// reference server's variables (referenceVars), then defaults. Each
// package gets only its part.
type config struct {
	rulesPath string
	// rulesFrom says what set rulesPath: "-config", the variable(s), or ""
	// for the flag's default.
	rulesFrom    string
	mergeDomains bool
	// xds, when on, is where the rules come from instead of rulesPath.
	xds xdsConfig

	// redis is the main Redis; perSecond, when its url is set, the one
	// for the limits whose window is shorter than a minute (the reference
	// server's REDIS_PERSECOND). Both use redisTLSFiles when their TLS is
	// on, as the reference shares REDIS_TLS_CACERT and the client files.
	redis, perSecond    redisSettings
	redisTLSFiles       redislimit.TLSFiles
	healthRequiresStore bool
	readiness           server.StoreReadiness
	healthRequiresRules bool
	redisDeadline       time.Duration
	keyPrefix           string
	memoryMaxEntries    int
	denyCache           bool
	denyCacheSize       int
	denyCacheMaxAge     time.Duration

	grpcAddr, httpAddr, debugAddr string
	ui                            bool
	grpcTLS                       bool
	grpcTLSCert, grpcTLSKey       string
	grpcClientCA, grpcClientSAN   string
	grpcMaxConnAge                time.Duration
	grpcMaxConnAgeGrace           time.Duration
	conns                         server.ConnOptions

	maxMessageBytes             int
	bounds                      envoy.RequestBounds
	metricValueSeries           int
	statsd                      statsdConfig
	tracing                     tracingConfig
	memcache                    memcacheConfig
	drainDelay, shutdownTimeout time.Duration

	logLevel  slog.Level
	logFormat string

	shadowMode     bool
	dynMetadata    bool
	nearLimitRatio float64
	failureMode    rules.FailureMode
	headers        envoy.Headers
	overLimitBody  bool
	// storeFailureHeader names the header saying an answer came from the
	// failure policy; empty: none.
	storeFailureHeader string

	// capture, when not empty, is the file the served requests are
	// recorded to for `floodgate replay` (pkg/replay.Capture).
	capture         string
	captureSample   float64
	captureMaxBytes int64

	check, explain, version bool
	args                    []string // positional arguments (-explain's descriptor)

	// notes are remarks about the environment to log once logging is set
	// up (variables accepted with a difference worth knowing).
	notes []string
}

// redisSettings are the flags of one Redis deployment.
type redisSettings struct {
	url, typ, sentinelMaster string
	auth, sentinelAuth       string
	tls                      bool
	poolSize                 int
	dialTimeout              time.Duration
	pipelineWindow           time.Duration
	pipelineLimit            int
}

// flags registers the flags of one Redis deployment: name (the address,
// described by urlUsage), then name-type, name-auth,
// name-sentinel-auth, name-tls, name-pool-size, name-dial-timeout,
// name-pipeline-window and name-pipeline-limit, what naming the deployment
// in their usage.
func (r *redisSettings) flags(fs *flag.FlagSet, name, what, urlUsage string) {
	fs.StringVar(&r.url, name, "", urlUsage)
	fs.StringVar(&r.typ, name+"-type", "single", what+" deployment: single, sentinel or cluster")
	fs.StringVar(&r.auth, name+"-auth", "", what+" credentials: password or user:password (prefer the environment)")
	fs.StringVar(&r.sentinelAuth, name+"-sentinel-auth", "", "password of the Sentinels themselves, with -"+name+"-type sentinel (prefer the environment)")
	fs.BoolVar(&r.tls, name+"-tls", false, "connect to "+what+" with TLS (every node, and the Sentinels), verified as the -redis-tls-* flags say")
	fs.IntVar(&r.poolSize, name+"-pool-size", 0, "connections per "+what+" node (0: 10 per CPU)")
	fs.DurationVar(&r.dialTimeout, name+"-dial-timeout", 0, "bound on connecting to "+what+" (0: 5s); requests never wait longer than -redis-deadline")
	fs.DurationVar(&r.pipelineWindow, name+"-pipeline-window", 0, "how long a request that finds a round trip to "+what+" free waits for others to share it, e.g. 150us: fewer script calls when requests come one at a time, for up to this much latency (0: it waits, up to 150µs, only while another round trip is outstanding; single and Sentinel, not Cluster)")
	fs.IntVar(&r.pipelineLimit, name+"-pipeline-limit", 0, "most requests in one round trip to "+what+"; a window ends early once this many wait (0: 64)")
}

// storeReadiness is -store-readiness, made always by -health-requires-store.
func (c *config) storeReadiness() server.StoreReadiness {
	if c.healthRequiresStore {
		return server.StoreAlways
	}
	return c.readiness
}

// validate checks one deployment's settings; name is its address flag.
func (r *redisSettings) validate(name string) error {
	// The reference server writes SINGLE, SENTINEL, CLUSTER.
	r.typ = strings.ToLower(r.typ)
	switch r.typ {
	case "single", "sentinel", "cluster":
	default:
		return fmt.Errorf("-%s-type %q: want single, sentinel or cluster", name, r.typ)
	}
	if r.poolSize < 0 {
		return fmt.Errorf("-%s-pool-size %d: must not be negative", name, r.poolSize)
	}
	if r.pipelineWindow < 0 {
		return fmt.Errorf("-%s-pipeline-window %v: must not be negative", name, r.pipelineWindow)
	}
	if r.pipelineLimit < 0 {
		return fmt.Errorf("-%s-pipeline-limit %d: must not be negative", name, r.pipelineLimit)
	}
	return nil
}

// tlsOn reports whether the deployment is reached with TLS.
func (r *redisSettings) tlsOn() bool { return r.tls || strings.HasPrefix(r.url, "rediss://") }

// credentials splits REDIS_AUTH's "pass" or "user:pass".
func (r *redisSettings) credentials() (user, pass string) {
	if u, p, ok := strings.Cut(r.auth, ":"); ok {
		return u, p
	}
	return "", r.auth
}

// lookupFunc is os.LookupEnv, injected for tests.
type lookupFunc func(string) (string, bool)

// envSource derives a flag's value from the environment. It returns the
// value, a description of where it came from (for error messages), and
// whether the environment sets it.
type envSource func(env lookupFunc) (value, from string, ok bool)

// envVar reads one variable.
func envVar(name string) envSource {
	return func(env lookupFunc) (string, string, bool) {
		v, ok := env(name)
		return v, name, ok && v != ""
	}
}

// hostPort joins the reference server's HOST/PORT style pair; an unset
// port keeps defPort, an unset host listens on every interface.
func hostPort(hostVar, portVar, defPort string) envSource {
	return hostPortOn(hostVar, portVar, "", defPort)
}

// hostPortOn is hostPort with defHost for an unset host.
func hostPortOn(hostVar, portVar, defHost, defPort string) envSource {
	return func(env lookupFunc) (string, string, bool) {
		host, hok := env(hostVar)
		port, pok := env(portVar)
		if !hok && !pok {
			return "", "", false
		}
		if !hok {
			host = defHost
		}
		if port == "" {
			port = defPort
		}
		return net.JoinHostPort(host, port), hostVar + "/" + portVar, true
	}
}

// runtimePath is the reference server's rule directory:
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY, with its
// defaults for the parts left unset (/srv/runtime_data/current, "",
// "config").
func runtimePath(env lookupFunc) (string, string, bool) {
	root, rok := env("RUNTIME_ROOT")
	sub, sok := env("RUNTIME_SUBDIRECTORY")
	app, aok := env("RUNTIME_APPDIRECTORY")
	if !rok && !sok && !aok {
		return "", "", false
	}
	if root == "" {
		root = "/srv/runtime_data/current"
	}
	if app == "" {
		app = "config"
	}
	return filepath.Join(root, sub, app), "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY", true
}

// socketURL reads a Redis URL variable with its socket type variable
// (REDIS_URL and REDIS_SOCKET_TYPE): "unix" makes it a socket path.
func socketURL(urlVar, socketVar string) envSource {
	return func(env lookupFunc) (string, string, bool) {
		u, ok := env(urlVar)
		if !ok || u == "" {
			return "", "", false
		}
		if st, _ := env(socketVar); strings.EqualFold(st, "unix") && !strings.Contains(u, "://") {
			return "unix://" + u, urlVar + " (" + socketVar + "=unix)", true
		}
		return u, urlVar, true
	}
}

// perSecondOn reports whether REDIS_PERSECOND=true: the reference server
// reads the other REDIS_PERSECOND_* variables only then.
func perSecondOn(env lookupFunc) bool { return isSetTrue(env, "REDIS_PERSECOND") }

// whilePerSecond is src while REDIS_PERSECOND=true, and unset otherwise.
func whilePerSecond(src envSource) envSource {
	return func(env lookupFunc) (string, string, bool) {
		if !perSecondOn(env) {
			return "", "", false
		}
		return src(env)
	}
}

// memcacheConfig says where the counters are kept when Memcached is the
// store (-memcache or -memcache-srv).
type memcacheConfig struct {
	servers, srv string
	srvRefresh   time.Duration
	maxIdle      int
	tls          bool
	files        tlsclient.Files
}

// on reports whether Memcached is the store.
func (m *memcacheConfig) on() bool { return m.servers != "" || m.srv != "" }

// serverList returns -memcache split at commas, blanks dropped.
func (m *memcacheConfig) serverList() []string {
	var out []string
	for _, s := range strings.Split(m.servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (m *memcacheConfig) validate(c *config) error {
	switch {
	case !m.on():
		if m.tls || m.files != (tlsclient.Files{}) || m.srvRefresh != 0 {
			return errors.New("-memcache-* settings need -memcache or -memcache-srv (MEMCACHE_HOST_PORT or MEMCACHE_SRV with BACKEND_TYPE=memcache)")
		}
	case m.servers != "" && m.srv != "":
		return errors.New("-memcache (MEMCACHE_HOST_PORT) and -memcache-srv (MEMCACHE_SRV): give one")
	case c.redis.url != "":
		return errors.New("-memcache and -redis (BACKEND_TYPE=memcache and REDIS_URL): counters are kept in one store; unset one")
	case m.files != (tlsclient.Files{}) && !m.tls:
		return errors.New("-memcache-tls-* files need -memcache-tls (MEMCACHE_TLS=true)")
	case m.srvRefresh != 0 && m.srv == "":
		return errors.New("-memcache-srv-refresh (MEMCACHE_SRV_REFRESH) needs -memcache-srv (MEMCACHE_SRV)")
	}
	return nil
}

// memcacheOn reports whether BACKEND_TYPE=memcache: the reference reads the
// MEMCACHE_* variables only then.
func memcacheOn(env lookupFunc) bool {
	v, _ := env("BACKEND_TYPE")
	return strings.EqualFold(v, "memcache")
}

// whileMemcache is src while BACKEND_TYPE=memcache, and unset otherwise.
func whileMemcache(src envSource) envSource {
	return func(env lookupFunc) (string, string, bool) {
		if !memcacheOn(env) {
			return "", "", false
		}
		return src(env)
	}
}

// statsdConfig is where and how the reference's statsd stats are sent.
type statsdConfig struct {
	on, dog              bool
	addr, protocol, tags string
	mogrifiers           string
	flush                time.Duration
}

// statsdOn says whether the reference would send statsd: DISABLE_STATS=true
// turns it off; USE_STATSD or USE_DOG_STATSD set say; otherwise a
// deployment that sets STATSD_HOST or STATSD_PORT relies on the reference's
// default (USE_STATSD true). With nothing set, floodgate keeps to
// Prometheus, its default.
func statsdOn(env lookupFunc) (string, string, bool) {
	switch {
	case isSetTrue(env, "DISABLE_STATS"):
		return "false", "DISABLE_STATS", true
	case isSetTrue(env, "USE_DOG_STATSD"):
		return "true", "USE_DOG_STATSD", true
	}
	if v, ok := env("USE_STATSD"); ok && v != "" {
		return v, "USE_STATSD", true
	}
	for _, name := range []string{"STATSD_HOST", "STATSD_PORT"} {
		if v, ok := env(name); ok && v != "" {
			return "true", name + " (USE_STATSD defaults to true in the reference)", true
		}
	}
	return "", "", false
}

// headersEnabled maps LIMIT_RESPONSE_HEADERS_ENABLED to a header style.
func headersEnabled(env lookupFunc) (string, string, bool) {
	v, ok := env("LIMIT_RESPONSE_HEADERS_ENABLED")
	if !ok || v == "" {
		return "", "", false
	}
	on, err := strconv.ParseBool(v)
	if err != nil {
		return v, "LIMIT_RESPONSE_HEADERS_ENABLED (want true or false)", true
	}
	if on {
		return "reference", "LIMIT_RESPONSE_HEADERS_ENABLED", true
	}
	return "off", "LIMIT_RESPONSE_HEADERS_ENABLED", true
}

// floodgateVar is the variable of floodgate's own that sets a flag:
// FLOODGATE_ and the flag's name in upper case, '-' as '_'
// (FLOODGATE_REDIS_DEADLINE for -redis-deadline). It wins over the
// reference server's variables (referenceVars).
func floodgateVar(flag string) string {
	return "FLOODGATE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// commandOnly are the flags no variable sets: they choose what the binary
// does, not how it serves.
var commandOnly = map[string]bool{"check": true, "explain": true, "version": true}

// defaultConfigVar sets the rule path when nothing else does: below -config,
// FLOODGATE_CONFIG and RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
// The image sets it to its demo rules, so that a deployment written for the
// reference server, which sets RUNTIME_*, gets its own rules.
const defaultConfigVar = "FLOODGATE_DEFAULT_CONFIG"

// referenceDefaultDir is where the reference server reads its rules when no
// RUNTIME_* variable is set.
const referenceDefaultDir = "/srv/runtime_data/current/config"

// referenceDefaultFrom names referenceDefaultDir as the origin of the rules.
const referenceDefaultFrom = "the reference server's default directory"

// imageDefault reads FLOODGATE_DEFAULT_CONFIG, unless refDir (the reference
// server's default directory) exists: a manifest written for the reference
// that mounts its rules there and sets no RUNTIME_* variable must get them,
// not the image's demo rules.
func imageDefault(refDir string) envSource {
	return func(env lookupFunc) (string, string, bool) {
		v, ok := env(defaultConfigVar)
		if !ok || v == "" {
			return "", "", false
		}
		if fi, err := os.Stat(refDir); err == nil && fi.IsDir() {
			return refDir, referenceDefaultFrom, true
		}
		return v, defaultConfigVar, true
	}
}

// fallbacks are the variables read for a flag when neither floodgateVar nor
// a reference variable sets it.
var fallbacks = map[string]envSource{"config": imageDefault(referenceDefaultDir)}

// newFlagSet registers every flag on a set writing into c. It prints
// nothing: run prints the usage and errors in the chosen log format.
func newFlagSet(c *config) *flag.FlagSet {
	fs := flag.NewFlagSet("floodgate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&c.rulesPath, "config", "config", "rule file or directory")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "merge a domain declared in several files instead of refusing it")
	fs.Var((*configTypeValue)(&c.xds.on), "config-type", "where the rules come from: file (-config) or grpc_xds_sotw (an xDS management server, -xds-server; see docs/xds.md)")
	fs.StringVar(&c.xds.server, "xds-server", "localhost:18000", "xDS management server, host:port, with -config-type grpc_xds_sotw")
	fs.StringVar(&c.xds.nodeID, "xds-node-id", "default", "node id sent to the xDS server, which picks the rules by it")
	fs.StringVar(&c.xds.nodeMetadata, "xds-node-metadata", "", "node metadata sent to the xDS server: k1=v1,k2=v2")
	fs.StringVar(&c.xds.headers, "xds-headers", "", "gRPC metadata sent on the xDS stream: k1:v1,k2:v2 (prefer the environment for tokens)")
	fs.BoolVar(&c.xds.tls, "xds-tls", false, "connect to the xDS server with TLS")
	fs.StringVar(&c.xds.files.CAFile, "xds-tls-ca", "", "PEM CA certificates that may sign the xDS server's certificate, besides the system's roots")
	fs.StringVar(&c.xds.files.CertFile, "xds-tls-cert", "", "PEM client certificate presented to the xDS server (mutual TLS), with -xds-tls-key")
	fs.StringVar(&c.xds.files.KeyFile, "xds-tls-key", "", "PEM key of -xds-tls-cert")
	fs.StringVar(&c.xds.san, "xds-tls-san", "", "name the xDS server's certificate must hold; empty: the host of -xds-server")
	fs.DurationVar(&c.xds.retry, "xds-retry-interval", xds.DefaultRetryInterval, "pause before subscribing again after the xDS stream ended, ±50%")
	fs.DurationVar(&c.xds.backoffInitial, "xds-backoff-initial", xds.DefaultBackoffInitial, "first wait between attempts to reach the xDS server; each next is 1.6 times longer")
	fs.DurationVar(&c.xds.backoffMax, "xds-backoff-max", xds.DefaultBackoffMax, "longest wait between attempts to reach the xDS server")
	fs.Float64Var(&c.xds.backoffRandomFactor, "xds-backoff-random-factor", xds.DefaultBackoffRandomFactor, "each wait is randomised by this share, with -xds-backoff-jitter")
	fs.BoolVar(&c.xds.backoffJitter, "xds-backoff-jitter", true, "randomise the waits between attempts to reach the xDS server")
	fs.IntVar(&c.xds.maxMessageBytes, "xds-max-message-bytes", 0, "largest xDS response accepted (0: 4 MiB)")
	fs.BoolVar(&c.xds.forceStart, "xds-force-start", false, "serve before the first rules arrive from the xDS server (every request allowed until then) instead of waiting for them")
	c.redis.flags(fs, "redis", "Redis", "Redis URL (redis://, rediss://, unix://, host:port; sentinel: master,host:port,...; cluster: host:port,...); empty keeps counters in memory")
	fs.StringVar(&c.redis.sentinelMaster, "redis-master", "", "Sentinel master name, when -redis lists only the sentinels")
	c.perSecond.flags(fs, "redis-persecond", "the per-second Redis", "URL of a second Redis, as -redis, for the limits whose window is shorter than a minute (the reference's REDIS_PERSECOND); empty keeps them in -redis")
	fs.StringVar(&c.redisTLSFiles.CAFile, "redis-tls-ca", "", "PEM CA certificates that may sign Redis's certificate, besides the system's roots")
	fs.StringVar(&c.redisTLSFiles.CertFile, "redis-tls-cert", "", "PEM client certificate to present to Redis (tls-auth-clients), with -redis-tls-key")
	fs.StringVar(&c.redisTLSFiles.KeyFile, "redis-tls-key", "", "PEM key of -redis-tls-cert")
	fs.BoolVar(&c.redisTLSFiles.SkipHostnameVerification, "redis-tls-skip-hostname-verification", false, "verify Redis's certificate chain but not the name it is issued for")
	fs.BoolVar(&c.healthRequiresStore, "health-requires-store", false, "report NOT_SERVING (/healthcheck, gRPC health) whenever the store is unhealthy, not only until it first answers: -store-readiness always")
	fs.Var((*readinessValue)(&c.readiness), "store-readiness", "how Redis or Memcached decides health: reached-once (NOT_SERVING until it first answers), always (also during outages) or ignored")
	fs.BoolVar(&c.healthRequiresRules, "health-requires-rules", false, "report NOT_SERVING while the rules declare no domain")
	fs.DurationVar(&c.redisDeadline, "redis-deadline", envoy.DefaultStoreTimeout, "deadline of the store call of each request; past it the failure policy answers")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "prefix of every Redis key")
	fs.IntVar(&c.memoryMaxEntries, "memory-max-entries", 0, "most counters kept without Redis (0: 1<<20)")
	fs.BoolVar(&c.denyCache, "deny-cache", true, "with Redis, answer requests a counter is known to deny (until the retry-after Redis returned) without calling Redis")
	fs.IntVar(&c.denyCacheSize, "deny-cache-size", 0, "most denials the deny cache holds (0: 65536)")
	fs.DurationVar(&c.denyCacheMaxAge, "deny-cache-max-age", denycache.DefaultMaxAge, "longest a denial is reused (bounds stale denials after Redis lost its data or another instance refunded)")
	fs.StringVar(&c.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (RateLimitService, health, reflection), or unix:/path for a socket")
	fs.StringVar(&c.httpAddr, "http-addr", ":8080", "HTTP listen address (/healthcheck, /json, /rlconfig, /metrics)")
	fs.StringVar(&c.debugAddr, "debug-addr", "127.0.0.1:6070", "debug listen address (/debug/pprof/, /rlconfig); loopback only unless set; empty disables it")
	fs.BoolVar(&c.ui, "ui", true, "serve the live page /ui/ on the HTTP listener (request values hidden) and on the debug one (values of detailed_metric and value_to_metric rules shown)")
	fs.BoolVar(&c.grpcTLS, "grpc-tls", false, "serve gRPC over TLS only (needs -grpc-tls-cert and -grpc-tls-key)")
	fs.StringVar(&c.grpcTLSCert, "grpc-tls-cert", "", "PEM certificate chain of the gRPC listener; reloaded when the file changes")
	fs.StringVar(&c.grpcTLSKey, "grpc-tls-key", "", "PEM private key of the gRPC listener; reloaded when the file changes")
	fs.StringVar(&c.grpcClientCA, "grpc-client-ca", "", "PEM CA certificates: require gRPC clients to present a certificate they signed (mutual TLS)")
	fs.StringVar(&c.grpcClientSAN, "grpc-client-san", "", "with -grpc-client-ca: require the client certificate to be valid for this DNS name or IP address")
	fs.DurationVar(&c.grpcMaxConnAge, "grpc-max-connection-age", 0, "close gRPC connections gracefully after about this long (0: never), so clients spread over new replicas")
	fs.DurationVar(&c.grpcMaxConnAgeGrace, "grpc-max-connection-age-grace", 0, "time calls on a connection closed by -grpc-max-connection-age get to finish (0: no bound)")
	fs.IntVar(&c.conns.GRPCMaxConns, "grpc-max-connections", 0, "most open gRPC connections; one over it is closed at once (0: half the open-file limit; -1: no bound)")
	fs.IntVar(&c.conns.HTTPMaxConns, "http-max-connections", 0, "most open connections on the HTTP listener, and apart on the debug one; more are closed at once (0: an eighth of the open-file limit; -1: no bound)")
	fs.DurationVar(&c.conns.GRPCConnectionTimeout, "grpc-connection-timeout", server.DefaultGRPCConnectionTimeout, "longest a new gRPC connection may take to finish its handshake (TLS, HTTP/2 preface)")
	fs.DurationVar(&c.conns.GRPCKeepaliveTime, "grpc-keepalive-time", server.DefaultGRPCKeepaliveTime, "ping a gRPC client after this long without traffic")
	fs.DurationVar(&c.conns.GRPCKeepaliveTimeout, "grpc-keepalive-timeout", server.DefaultGRPCKeepaliveTimeout, "close a gRPC connection whose client does not answer a ping within this")
	fs.DurationVar(&c.conns.GRPCMaxConnectionIdle, "grpc-max-connection-idle", 0, "close gracefully a gRPC connection without calls for this long (0: never)")
	fs.DurationVar(&c.conns.GRPCMinPingInterval, "grpc-min-ping-interval", server.DefaultGRPCMinPingInterval, "shortest interval of client pings accepted, with or without calls; a client pinging more often is closed (too_many_pings)")
	fs.DurationVar(&c.conns.HTTPReadTimeout, "http-read-timeout", server.DefaultHTTPReadTimeout, "longest the reading of an HTTP request, headers and body, may take (HTTP and debug listeners)")
	fs.DurationVar(&c.conns.HTTPWriteTimeout, "http-write-timeout", server.DefaultHTTPWriteTimeout, "longest an HTTP answer may take from the end of the request's headers (HTTP listener)")
	fs.DurationVar(&c.conns.HTTPIdleTimeout, "http-idle-timeout", server.DefaultHTTPIdleTimeout, "close a kept-alive HTTP connection without a new request for this long")
	fs.IntVar(&c.maxMessageBytes, "max-message-bytes", server.DefaultMaxMessageBytes, "largest request message, over gRPC and /json")
	fs.IntVar(&c.bounds.MaxDescriptors, "max-descriptors", envoy.DefaultMaxDescriptors, "most descriptors in a request")
	fs.IntVar(&c.bounds.MaxEntries, "max-entries", envoy.DefaultMaxEntries, "most entries in a descriptor")
	fs.IntVar(&c.bounds.MaxKeyBytes, "max-key-bytes", envoy.DefaultMaxKeyBytes, "longest entry key, and domain, in bytes")
	fs.IntVar(&c.bounds.MaxValueBytes, "max-value-bytes", envoy.DefaultMaxValueBytes, "longest entry value, in bytes")
	fs.IntVar(&c.metricValueSeries, "metric-value-series", envoy.DefaultMaxValueSeries, "most distinct value labels per detailed_metric or value_to_metric rule; the rest count under <rule>._other_")
	fs.DurationVar(&c.drainDelay, "drain-delay", 0, "time to keep answering after health turns NOT_SERVING on SIGTERM")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "time in-flight requests get to finish on SIGTERM; then every connection left is closed and the process exits (1 if requests were cut)")
	fs.Var((*levelValue)(&c.logLevel), "log-level", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&c.memcache.servers, "memcache", "", "keep the counters in Memcached: host:port[,host:port...] (fixed windows only; see docs/migrating.md)")
	fs.StringVar(&c.memcache.srv, "memcache-srv", "", "DNS SRV name listing the Memcached servers, instead of -memcache")
	fs.DurationVar(&c.memcache.srvRefresh, "memcache-srv-refresh", 0, "resolve -memcache-srv again at this interval; 0: only at start")
	fs.IntVar(&c.memcache.maxIdle, "memcache-max-idle-conns", 0, "idle connections kept per Memcached server; 0 or less: 16")
	fs.BoolVar(&c.memcache.tls, "memcache-tls", false, "connect to Memcached with TLS")
	fs.StringVar(&c.memcache.files.CAFile, "memcache-tls-ca", "", "PEM CA certificates for Memcached's TLS, besides the system's")
	fs.StringVar(&c.memcache.files.CertFile, "memcache-tls-cert", "", "PEM client certificate for Memcached's TLS")
	fs.StringVar(&c.memcache.files.KeyFile, "memcache-tls-key", "", "PEM client key for Memcached's TLS")
	fs.BoolVar(&c.memcache.files.SkipHostnameVerification, "memcache-tls-skip-hostname-verification", false, "verify Memcached's certificate chain but not its name")
	fs.BoolVar(&c.statsd.on, "statsd", false, "also send the reference server's statsd stats (ratelimit.service.*); Prometheus /metrics stays on")
	fs.StringVar(&c.statsd.addr, "statsd-addr", "localhost:8125", "statsd server, host:port (-statsd)")
	fs.StringVar(&c.statsd.protocol, "statsd-protocol", "", "tcp or udp; empty: tcp for statsd, udp for DogStatsD, as the reference")
	fs.DurationVar(&c.statsd.flush, "statsd-flush-interval", 10*time.Second, "how often statsd counts are sent")
	fs.StringVar(&c.statsd.tags, "statsd-tags", "", "tags on every statsd stat, k1:v1,k2:v2 (the reference's EXTRA_TAGS)")
	fs.BoolVar(&c.statsd.dog, "dogstatsd", false, "send DogStatsD (tags as |#k:v) over UDP; implies -statsd")
	fs.StringVar(&c.statsd.mogrifiers, "dogstatsd-mogrifiers", "", "the reference's USE_DOG_STATSD_MOGRIFIERS: names whose DOG_STATSD_MOGRIFIER_<NAME>_* variables rename and tag stats")
	c.tracing.flags(fs)
	fs.BoolVar(&c.shadowMode, "shadow-mode", false, "answer OK overall whatever the limits say (statuses and metrics stay real)")
	fs.BoolVar(&c.dynMetadata, "response-dynamic-metadata", false, "put the request and the matched rules' metadata into each answer's dynamic_metadata, as the reference server")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", envoy.DefaultNearLimitRatio, "share of a limit above which hits count as near_limit")
	fs.Var((*failureValue)(&c.failureMode), "failure-mode", "when Redis fails, for rules without failure_mode: allow, deny or unavailable")
	fs.Var((*styleValue)(&c.headers.Style), "response-headers", "rate-limit response headers: off, reference (RateLimit-Limit/-Remaining/-Reset) or ietf (RateLimit, RateLimit-Policy)")
	fs.StringVar(&c.headers.LimitName, "limit-header", envoy.DefaultLimitHeader, "name of the limit header (-response-headers=reference)")
	fs.StringVar(&c.headers.RemainingName, "remaining-header", envoy.DefaultRemainingHeader, "name of the remaining header (-response-headers=reference)")
	fs.StringVar(&c.headers.ResetName, "reset-header", envoy.DefaultResetHeader, "name of the reset header (-response-headers=reference)")
	fs.StringVar(&c.storeFailureHeader, "store-failure-header", "", "response header carrying the cause (deadline, circuit_open, error) on answers the failure policy gave; empty: none (the cause is always in the dynamic metadata)")
	fs.BoolVar(&c.overLimitBody, "over-limit-body", false, "send a JSON body with OVER_LIMIT answers (Envoy's 429 body)")
	fs.StringVar(&c.capture, "capture", "", "record the requests served to this file (JSON lines, appended) for floodgate replay; empty: off")
	fs.Float64Var(&c.captureSample, "capture-sample", 1, "with -capture, the share of requests recorded, in (0, 1], chosen by descriptor: a kept descriptor keeps all its requests")
	fs.Int64Var(&c.captureMaxBytes, "capture-max-bytes", replay.DefaultCaptureMaxBytes, "with -capture, the largest the file may grow, in bytes; then recording stops")
	fs.BoolVar(&c.check, "check", false, "validate the rules, print a summary or every error (file:line), and exit 0 or 1")
	fs.BoolVar(&c.explain, "explain", false, "print which rule a descriptor (arguments: domain key=value...) matches, and exit")
	fs.BoolVar(&c.version, "version", false, "print the version and the commit it was built from, and exit")
	c.failureMode = rules.FailureAllow
	explainValues(fs)
	return fs
}

// parseConfig reads the command line and the environment. It returns
// flag.ErrHelp for -h and -help.
func parseConfig(args []string, env lookupFunc) (*config, error) {
	c := &config{}
	fs := newFlagSet(c)

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.args = fs.Args()
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "config" {
			c.rulesFrom = "-config"
		}
	})
	from, overrides, err := setFromEnv(fs, env)
	if err != nil {
		return nil, err
	}
	if c.rulesFrom == "" {
		c.rulesFrom = from["config"]
	}
	c.notes = append(c.notes, overrides...)
	notes, err := checkReference(env, c.redis.url != "")
	if err != nil {
		return nil, err
	}
	c.notes = append(c.notes, notes...)
	return c, namingSources(c.validate(), from)
}

// flagInError finds the flags an error of validate names ("-near-limit-ratio").
var flagInError = regexp.MustCompile(`(?:^|[\s(])-([a-z][a-z0-9-]*)`)

// namingSources adds to err, from validate, the variables that set the
// flags it names, so that an operator who never typed the flag sees which
// variable to fix: "-near-limit-ratio 2: ... (set by NEAR_LIMIT_RATIO)".
func namingSources(err error, from map[string]string) error {
	if err == nil {
		return nil
	}
	var vars []string
	for _, m := range flagInError.FindAllStringSubmatch(err.Error(), -1) {
		if v, ok := from[m[1]]; ok && !slices.Contains(vars, v) {
			vars = append(vars, v)
		}
	}
	if len(vars) == 0 {
		return err
	}
	return fmt.Errorf("%w (set by %s)", err, strings.Join(vars, ", "))
}

// setFromEnv sets each flag not given on the command line from its
// FLOODGATE_ variable, else from the first reference variable of
// referenceVars that sets it, else from its fallback. It returns, for each
// flag it set, the variable(s) it was set from, and a warning for each
// variable set but overridden by a flag or a FLOODGATE_ variable, so that
// an operator who set RUNTIME_ROOT and sees other rules is told why.
func setFromEnv(fs *flag.FlagSet, env lookupFunc) (from map[string]string, warnings []string, err error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	from = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || commandOnly[f.Name] {
			return
		}
		sources := []envSource{envVar(floodgateVar(f.Name))}
		for i := range referenceVars {
			if referenceVars[i].flag == f.Name {
				sources = append(sources, referenceVars[i].source())
			}
		}
		winner := ""
		if given[f.Name] {
			winner = "-" + f.Name
		}
		seen := map[string]bool{}
		for _, src := range sources {
			v, name, ok := src(env)
			if !ok || seen[name] {
				continue
			}
			seen[name] = true
			if winner != "" {
				warnings = append(warnings, fmt.Sprintf("%s overrides %s=%s", winner, name, shownValue(f.Name, v)))
				continue
			}
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q (for -%s): %w", name, shownValue(f.Name, v), f.Name, e)
				return
			}
			winner, from[f.Name] = name, name
		}
		if fb, ok := fallbacks[f.Name]; ok && winner == "" {
			if v, name, ok := fb(env); ok {
				if e := fs.Set(f.Name, v); e != nil {
					err = fmt.Errorf("%s=%q (for -%s): %w", name, v, f.Name, e)
					return
				}
				from[f.Name] = name
			}
		}
	})
	return from, warnings, err
}

// secretFlags hold credentials: their values are never shown.
var secretFlags = map[string]bool{"redis-auth": true, "redis-sentinel-auth": true, "redis-persecond-auth": true, "redis-persecond-sentinel-auth": true}

// shownValue is v as a message may quote it: a credential hidden, a URL's
// password redacted.
func shownValue(flag, v string) string {
	if secretFlags[flag] {
		return "***"
	}
	return redactedAddr(v)
}

func (c *config) validate() error {
	if err := c.redis.validate("redis"); err != nil {
		return err
	}
	if err := c.perSecond.validate("redis-persecond"); err != nil {
		return err
	}
	if err := c.memcache.validate(c); err != nil {
		return err
	}
	if err := c.xds.validate(c); err != nil {
		return err
	}
	// The reference reads LOG_FORMAT without regard to case.
	c.logFormat = strings.ToLower(c.logFormat)
	switch c.logFormat {
	case "text", "json":
	default:
		return fmt.Errorf("-log-format %q: want text or json", c.logFormat)
	}
	if err := c.tracing.validate(); err != nil {
		return err
	}
	for _, l := range []struct{ flag, addr string }{{"grpc-addr", c.grpcAddr}, {"http-addr", c.httpAddr}, {"debug-addr", c.debugAddr}} {
		if err := checkListenAddr(l.addr); err != nil {
			return fmt.Errorf("-%s %q: %w", l.flag, l.addr, err)
		}
	}
	if c.nearLimitRatio < 0 || c.nearLimitRatio > 1 {
		return fmt.Errorf("-near-limit-ratio %v: want a number between 0 and 1", c.nearLimitRatio)
	}
	if c.redisDeadline <= 0 {
		return fmt.Errorf("-redis-deadline %v: must be positive", c.redisDeadline)
	}
	if c.memoryMaxEntries < 0 || c.denyCacheSize < 0 {
		return errors.New("-memory-max-entries and -deny-cache-size must not be negative")
	}
	if c.denyCacheMaxAge <= 0 {
		return fmt.Errorf("-deny-cache-max-age %v: must be positive", c.denyCacheMaxAge)
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"max-message-bytes", c.maxMessageBytes}, {"max-descriptors", c.bounds.MaxDescriptors}, {"max-entries", c.bounds.MaxEntries},
		{"max-key-bytes", c.bounds.MaxKeyBytes}, {"max-value-bytes", c.bounds.MaxValueBytes}, {"metric-value-series", c.metricValueSeries}} {
		if b.v < 1 {
			return fmt.Errorf("-%s %d: must be at least 1", b.name, b.v)
		}
	}
	switch {
	case c.grpcTLS && (c.grpcTLSCert == "" || c.grpcTLSKey == ""):
		return errors.New("-grpc-tls needs -grpc-tls-cert and -grpc-tls-key (GRPC_SERVER_TLS_CERT, GRPC_SERVER_TLS_KEY)")
	case !c.grpcTLS && c.grpcClientCA != "":
		return errors.New("-grpc-client-ca (GRPC_CLIENT_TLS_CACERT) needs -grpc-tls (GRPC_SERVER_USE_TLS=true)")
	case !c.grpcTLS && (c.grpcTLSCert != "" || c.grpcTLSKey != ""):
		// A certificate without TLS on is the reference server's own
		// default layout (it reads them only with TLS on), so it stays a
		// note; a client CA or SAN without TLS would be security lost.
		c.notes = append(c.notes, "a gRPC TLS certificate or key is set but -grpc-tls (GRPC_SERVER_USE_TLS) is off: gRPC is served without TLS")
	case c.grpcClientSAN != "" && c.grpcClientCA == "":
		return errors.New("-grpc-client-san (GRPC_CLIENT_TLS_SAN) needs -grpc-client-ca (GRPC_CLIENT_TLS_CACERT): without mutual TLS no client certificate is checked")
	}
	if c.grpcMaxConnAge < 0 || c.grpcMaxConnAgeGrace < 0 {
		return errors.New("-grpc-max-connection-age and -grpc-max-connection-age-grace must not be negative")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"grpc-connection-timeout", c.conns.GRPCConnectionTimeout}, {"grpc-keepalive-time", c.conns.GRPCKeepaliveTime},
		{"grpc-keepalive-timeout", c.conns.GRPCKeepaliveTimeout}, {"grpc-max-connection-idle", c.conns.GRPCMaxConnectionIdle},
		{"grpc-min-ping-interval", c.conns.GRPCMinPingInterval}, {"http-read-timeout", c.conns.HTTPReadTimeout},
		{"http-write-timeout", c.conns.HTTPWriteTimeout}, {"http-idle-timeout", c.conns.HTTPIdleTimeout},
		{"shutdown-timeout", c.shutdownTimeout}, {"drain-delay", c.drainDelay}} {
		if d.v < 0 {
			return fmt.Errorf("-%s %v: must not be negative", d.name, d.v)
		}
	}
	if c.redis.url == "" && (c.redis.tls || c.redisTLSFiles != (redislimit.TLSFiles{}) || c.healthRequiresStore || c.redis.sentinelAuth != "") {
		return errors.New("-redis-tls*, -redis-sentinel-auth and -health-requires-store need Redis (-redis, REDIS_URL)")
	}
	if c.redis.sentinelAuth != "" && c.redis.typ != "sentinel" {
		return errors.New("-redis-sentinel-auth (REDIS_SENTINEL_AUTH) needs -redis-type sentinel (REDIS_TYPE=sentinel)")
	}
	if c.perSecond.url == "" && c.perSecond != (redisSettings{typ: "single"}) {
		// The REDIS_PERSECOND_* variables set these only with
		// REDIS_PERSECOND=true; set by flags alone they would do nothing.
		return errors.New("-redis-persecond-* need -redis-persecond (REDIS_PERSECOND=true and REDIS_PERSECOND_URL)")
	}
	if c.perSecond.url != "" && c.redis.url == "" {
		return errors.New("-redis-persecond (REDIS_PERSECOND_URL) needs -redis (REDIS_URL): the per-second Redis holds only the limits whose window is shorter than a minute")
	}
	if c.perSecond.sentinelAuth != "" && c.perSecond.typ != "sentinel" {
		return errors.New("-redis-persecond-sentinel-auth (REDIS_PERSECOND_SENTINEL_AUTH) needs -redis-persecond-type sentinel (REDIS_PERSECOND_TYPE=sentinel)")
	}
	if !c.redis.tlsOn() && !c.perSecond.tlsOn() && c.redisTLSFiles != (redislimit.TLSFiles{}) {
		// The reference server reads them only with REDIS_TLS=true (or
		// REDIS_PERSECOND_TLS=true); a user who set them meant TLS, and
		// would silently get none.
		return errors.New("-redis-tls-ca, -redis-tls-cert, -redis-tls-key and -redis-tls-skip-hostname-verification (REDIS_TLS_*) need -redis-tls (REDIS_TLS=true) or -redis-persecond-tls (REDIS_PERSECOND_TLS=true)")
	}
	if err := c.validateCapture(); err != nil {
		return err
	}
	if c.explain && len(c.args) < 2 {
		return errors.New("-explain needs a domain and at least one key=value entry, e.g. floodgate -explain rl api_key=alice")
	}
	if !c.explain && len(c.args) > 0 {
		return fmt.Errorf("unexpected arguments %q (only -explain takes arguments)", c.args)
	}
	return nil
}

// validateCapture checks the -capture flags.
func (c *config) validateCapture() error {
	if c.capture == "" {
		if c.captureSample != 1 || c.captureMaxBytes != replay.DefaultCaptureMaxBytes {
			return errors.New("-capture-sample and -capture-max-bytes need -capture")
		}
		return nil
	}
	if !(c.captureSample > 0 && c.captureSample <= 1) {
		return fmt.Errorf("-capture-sample %v: want a share in (0, 1]", c.captureSample)
	}
	if c.captureMaxBytes < 1 {
		return fmt.Errorf("-capture-max-bytes %d: must be at least 1", c.captureMaxBytes)
	}
	return nil
}

// checkListenAddr refuses at start a listen address that would fail only
// when the listener opens, where the error names neither the flag nor the
// variable that set it (PORT=abc). Empty (a listener switched off) and
// unix:/path sockets pass; a port must be a number or a service name.
func checkListenAddr(addr string) error {
	if addr == "" || strings.HasPrefix(addr, "unix:") {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want host:port")
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}
