package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/denycache"
	"github.com/floodgate/floodgate/pkg/envoy"
	"github.com/floodgate/floodgate/pkg/rules"
	"github.com/floodgate/floodgate/pkg/server"
)

// config is the whole configuration of the binary, assembled from flags,
// then floodgate's FLOODGATE_* variables, then the reference server's
// variables, then defaults. Each package gets only its part.
type config struct {
	rulesPath    string
	mergeDomains bool

	redisURL, redisType, redisSentinelMaster string
	redisAuth                                string
	redisTLS                                 bool
	redisPoolSize                            int
	redisDialTimeout                         time.Duration
	redisDeadline                            time.Duration
	keyPrefix                                string
	memoryMaxEntries                         int
	denyCache                                bool
	denyCacheSize                            int
	denyCacheMaxAge                          time.Duration

	grpcAddr, httpAddr, debugAddr string
	grpcTLS                       bool
	grpcTLSCert, grpcTLSKey       string
	grpcClientCA                  string

	maxMessageBytes             int
	bounds                      envoy.RequestBounds
	metricValueSeries           int
	drainDelay, shutdownTimeout time.Duration

	logLevel  slog.Level
	logFormat string

	shadowMode     bool
	nearLimitRatio float64
	failureMode    rules.FailureMode
	headers        envoy.Headers
	overLimitBody  bool

	check, explain bool
	args           []string // positional arguments (-explain's descriptor)

	// notes are remarks about the environment to log once logging is set
	// up (variables accepted but without effect).
	notes []string
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

// redisURL is REDIS_URL read with REDIS_SOCKET_TYPE: "unix" makes it a
// socket path.
func redisURL(env lookupFunc) (string, string, bool) {
	u, ok := env("REDIS_URL")
	if !ok || u == "" {
		return "", "", false
	}
	if st, _ := env("REDIS_SOCKET_TYPE"); strings.EqualFold(st, "unix") && !strings.Contains(u, "://") {
		return "unix://" + u, "REDIS_URL (REDIS_SOCKET_TYPE=unix)", true
	}
	return u, "REDIS_URL", true
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

// flagEnv lists, per flag, where the environment may set it, in order of
// precedence. The README's configuration table mirrors it.
var flagEnv = map[string][]envSource{
	"config":              {envVar("FLOODGATE_CONFIG"), runtimePath},
	"merge-domains":       {envVar("FLOODGATE_MERGE_DOMAINS"), envVar("MERGE_DOMAIN_CONFIG")},
	"redis":               {envVar("FLOODGATE_REDIS"), redisURL},
	"redis-type":          {envVar("FLOODGATE_REDIS_TYPE"), envVar("REDIS_TYPE")},
	"redis-master":        {envVar("FLOODGATE_REDIS_MASTER")},
	"redis-auth":          {envVar("FLOODGATE_REDIS_AUTH"), envVar("REDIS_AUTH")},
	"redis-tls":           {envVar("FLOODGATE_REDIS_TLS"), envVar("REDIS_TLS")},
	"redis-pool-size":     {envVar("FLOODGATE_REDIS_POOL_SIZE"), envVar("REDIS_POOL_SIZE")},
	"redis-dial-timeout":  {envVar("FLOODGATE_REDIS_DIAL_TIMEOUT"), envVar("REDIS_TIMEOUT")},
	"redis-deadline":      {envVar("FLOODGATE_REDIS_DEADLINE")},
	"key-prefix":          {envVar("FLOODGATE_KEY_PREFIX"), envVar("CACHE_KEY_PREFIX")},
	"memory-max-entries":  {envVar("FLOODGATE_MEMORY_MAX_ENTRIES")},
	"deny-cache":          {envVar("FLOODGATE_DENY_CACHE")},
	"deny-cache-size":     {envVar("FLOODGATE_DENY_CACHE_SIZE")},
	"deny-cache-max-age":  {envVar("FLOODGATE_DENY_CACHE_MAX_AGE")},
	"grpc-addr":           {envVar("FLOODGATE_GRPC_ADDR"), hostPort("GRPC_HOST", "GRPC_PORT", "8081")},
	"http-addr":           {envVar("FLOODGATE_HTTP_ADDR"), hostPort("HOST", "PORT", "8080")},
	"debug-addr":          {envVar("FLOODGATE_DEBUG_ADDR"), hostPortOn("DEBUG_HOST", "DEBUG_PORT", "127.0.0.1", "6070")},
	"grpc-tls":            {envVar("FLOODGATE_GRPC_TLS"), envVar("GRPC_SERVER_USE_TLS")},
	"grpc-tls-cert":       {envVar("FLOODGATE_GRPC_TLS_CERT"), envVar("GRPC_SERVER_TLS_CERT")},
	"grpc-tls-key":        {envVar("FLOODGATE_GRPC_TLS_KEY"), envVar("GRPC_SERVER_TLS_KEY")},
	"grpc-client-ca":      {envVar("FLOODGATE_GRPC_CLIENT_CA"), envVar("GRPC_CLIENT_TLS_CACERT")},
	"max-message-bytes":   {envVar("FLOODGATE_MAX_MESSAGE_BYTES")},
	"max-descriptors":     {envVar("FLOODGATE_MAX_DESCRIPTORS")},
	"max-entries":         {envVar("FLOODGATE_MAX_ENTRIES")},
	"max-key-bytes":       {envVar("FLOODGATE_MAX_KEY_BYTES")},
	"max-value-bytes":     {envVar("FLOODGATE_MAX_VALUE_BYTES")},
	"metric-value-series": {envVar("FLOODGATE_METRIC_VALUE_SERIES")},
	"drain-delay":         {envVar("FLOODGATE_DRAIN_DELAY")},
	"shutdown-timeout":    {envVar("FLOODGATE_SHUTDOWN_TIMEOUT")},
	"log-level":           {envVar("FLOODGATE_LOG_LEVEL"), envVar("LOG_LEVEL")},
	"log-format":          {envVar("FLOODGATE_LOG_FORMAT"), envVar("LOG_FORMAT")},
	"shadow-mode":         {envVar("FLOODGATE_SHADOW_MODE"), envVar("SHADOW_MODE")},
	"near-limit-ratio":    {envVar("FLOODGATE_NEAR_LIMIT_RATIO"), envVar("NEAR_LIMIT_RATIO")},
	"failure-mode":        {envVar("FLOODGATE_FAILURE_MODE")},
	"response-headers":    {envVar("FLOODGATE_RESPONSE_HEADERS"), headersEnabled},
	"limit-header":        {envVar("FLOODGATE_LIMIT_HEADER"), envVar("LIMIT_LIMIT_HEADER")},
	"remaining-header":    {envVar("FLOODGATE_REMAINING_HEADER"), envVar("LIMIT_REMAINING_HEADER")},
	"reset-header":        {envVar("FLOODGATE_RESET_HEADER"), envVar("LIMIT_RESET_HEADER")},
	"over-limit-body":     {envVar("FLOODGATE_OVER_LIMIT_BODY")},
}

// ignoredVars are reference-server variables floodgate does not implement;
// a note is logged when they are set.
var ignoredVars = []string{
	"LOCAL_CACHE_SIZE_IN_BYTES", "PROMETHEUS_ADDR", "PROMETHEUS_PATH", "STATSD_HOST", "STATSD_PORT",
	"REDIS_PIPELINE_WINDOW", "REDIS_PIPELINE_LIMIT", "REDIS_PERSECOND", "REDIS_PERSECOND_URL",
	"EXPIRATION_JITTER_MAX_SECONDS", "RESPONSE_DYNAMIC_METADATA", "GRPC_MAX_CONNECTION_AGE",
}

// refusedVars would change security or storage in ways floodgate cannot
// honour; starting anyway would silently do something else.
var refusedVars = map[string]func(string) bool{
	"BACKEND_TYPE": func(v string) bool { return v != "" && !strings.EqualFold(v, "redis") },
}

func isTrue(v string) bool { b, _ := strconv.ParseBool(v); return b }

// parseConfig reads the command line and the environment. It returns
// flag.ErrHelp after printing usage for -h.
func parseConfig(args []string, env lookupFunc, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("floodgate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: floodgate [flags]\n       floodgate -check [-config path]\n       floodgate -explain [-config path] domain key=value [key=value...]\n\nFlags (each also set by the environment variables listed in the README):\n")
		fs.PrintDefaults()
	}

	fs.StringVar(&c.rulesPath, "config", "config", "rule file or directory")
	fs.BoolVar(&c.mergeDomains, "merge-domains", false, "merge a domain declared in several files instead of refusing it")
	fs.StringVar(&c.redisURL, "redis", "", "Redis URL (redis://, rediss://, unix://, host:port; sentinel: master,host:port,...; cluster: host:port,...); empty keeps counters in memory")
	fs.StringVar(&c.redisType, "redis-type", "single", "Redis deployment: single, sentinel or cluster")
	fs.StringVar(&c.redisSentinelMaster, "redis-master", "", "Sentinel master name, when -redis lists only the sentinels")
	fs.StringVar(&c.redisAuth, "redis-auth", "", "Redis credentials: password or user:password (prefer the environment)")
	fs.BoolVar(&c.redisTLS, "redis-tls", false, "connect to Redis with TLS")
	fs.IntVar(&c.redisPoolSize, "redis-pool-size", 0, "connections per Redis node (0: 10 per CPU)")
	fs.DurationVar(&c.redisDialTimeout, "redis-dial-timeout", 0, "bound on connecting to Redis (0: 5s); requests never wait longer than -redis-deadline")
	fs.DurationVar(&c.redisDeadline, "redis-deadline", envoy.DefaultStoreTimeout, "deadline of the store call of each request; past it the failure policy answers")
	fs.StringVar(&c.keyPrefix, "key-prefix", "", "prefix of every Redis key")
	fs.IntVar(&c.memoryMaxEntries, "memory-max-entries", 0, "most counters kept without Redis (0: 1<<20)")
	fs.BoolVar(&c.denyCache, "deny-cache", true, "with Redis, answer requests a counter is known to deny (until the retry-after Redis returned) without calling Redis")
	fs.IntVar(&c.denyCacheSize, "deny-cache-size", 0, "most denials the deny cache holds (0: 65536)")
	fs.DurationVar(&c.denyCacheMaxAge, "deny-cache-max-age", denycache.DefaultMaxAge, "longest a denial is reused (bounds stale denials after Redis lost its data or another instance refunded)")
	fs.StringVar(&c.grpcAddr, "grpc-addr", ":8081", "gRPC listen address (RateLimitService, health, reflection)")
	fs.StringVar(&c.httpAddr, "http-addr", ":8080", "HTTP listen address (/healthcheck, /json, /rlconfig, /metrics)")
	fs.StringVar(&c.debugAddr, "debug-addr", "127.0.0.1:6070", "debug listen address (/debug/pprof/, /rlconfig); loopback only unless set; empty disables it")
	fs.BoolVar(&c.grpcTLS, "grpc-tls", false, "serve gRPC over TLS only (needs -grpc-tls-cert and -grpc-tls-key)")
	fs.StringVar(&c.grpcTLSCert, "grpc-tls-cert", "", "PEM certificate chain of the gRPC listener; reloaded when the file changes")
	fs.StringVar(&c.grpcTLSKey, "grpc-tls-key", "", "PEM private key of the gRPC listener; reloaded when the file changes")
	fs.StringVar(&c.grpcClientCA, "grpc-client-ca", "", "PEM CA certificates: require gRPC clients to present a certificate they signed (mutual TLS)")
	fs.IntVar(&c.maxMessageBytes, "max-message-bytes", server.DefaultMaxMessageBytes, "largest request message, over gRPC and /json")
	fs.IntVar(&c.bounds.MaxDescriptors, "max-descriptors", envoy.DefaultMaxDescriptors, "most descriptors in a request")
	fs.IntVar(&c.bounds.MaxEntries, "max-entries", envoy.DefaultMaxEntries, "most entries in a descriptor")
	fs.IntVar(&c.bounds.MaxKeyBytes, "max-key-bytes", envoy.DefaultMaxKeyBytes, "longest entry key, and domain, in bytes")
	fs.IntVar(&c.bounds.MaxValueBytes, "max-value-bytes", envoy.DefaultMaxValueBytes, "longest entry value, in bytes")
	fs.IntVar(&c.metricValueSeries, "metric-value-series", envoy.DefaultMaxValueSeries, "most distinct value labels per detailed_metric or value_to_metric rule; the rest count under <rule>._other_")
	fs.DurationVar(&c.drainDelay, "drain-delay", 0, "time to keep answering after health turns NOT_SERVING on SIGTERM")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "time in-flight requests get to finish on SIGTERM")
	fs.Var((*levelValue)(&c.logLevel), "log-level", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.BoolVar(&c.shadowMode, "shadow-mode", false, "answer OK overall whatever the limits say (statuses and metrics stay real)")
	fs.Float64Var(&c.nearLimitRatio, "near-limit-ratio", envoy.DefaultNearLimitRatio, "share of a limit above which hits count as near_limit")
	fs.Var((*failureValue)(&c.failureMode), "failure-mode", "when Redis fails, for rules without failure_mode: allow, deny or unavailable")
	fs.Var((*styleValue)(&c.headers.Style), "response-headers", "rate-limit response headers: off, reference (RateLimit-Limit/-Remaining/-Reset) or ietf (RateLimit, RateLimit-Policy)")
	fs.StringVar(&c.headers.LimitName, "limit-header", envoy.DefaultLimitHeader, "name of the limit header (-response-headers=reference)")
	fs.StringVar(&c.headers.RemainingName, "remaining-header", envoy.DefaultRemainingHeader, "name of the remaining header (-response-headers=reference)")
	fs.StringVar(&c.headers.ResetName, "reset-header", envoy.DefaultResetHeader, "name of the reset header (-response-headers=reference)")
	fs.BoolVar(&c.overLimitBody, "over-limit-body", false, "send a JSON body with OVER_LIMIT answers (Envoy's 429 body)")
	fs.BoolVar(&c.check, "check", false, "validate the rules, print a summary or every error (file:line), and exit 0 or 1")
	fs.BoolVar(&c.explain, "explain", false, "print which rule a descriptor (arguments: domain key=value...) matches, and exit")
	c.failureMode = rules.FailureAllow

	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	c.args = fs.Args()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, sources := range flagEnv {
		if set[name] {
			continue
		}
		for _, src := range sources {
			v, from, ok := src(env)
			if !ok {
				continue
			}
			if err := fs.Set(name, v); err != nil {
				return nil, fmt.Errorf("%s=%q (for -%s): %v", from, v, name, err)
			}
			break
		}
	}
	if err := c.checkEnv(env); err != nil {
		return nil, err
	}
	return c, c.validate()
}

// checkEnv refuses variables floodgate cannot honour and notes the ones it
// ignores.
func (c *config) checkEnv(env lookupFunc) error {
	for name, refuse := range refusedVars {
		if v, ok := env(name); ok && refuse(v) {
			return fmt.Errorf("%s=%s is not supported by floodgate; unset it (see the README's configuration table)", name, v)
		}
	}
	for _, name := range ignoredVars {
		if v, ok := env(name); ok && v != "" {
			c.notes = append(c.notes, fmt.Sprintf("%s is set but has no effect in floodgate", name))
		}
	}
	if v, ok := env("RUNTIME_IGNOREDOTFILES"); ok && !isTrue(v) && v != "" {
		c.notes = append(c.notes, "RUNTIME_IGNOREDOTFILES=false has no effect: names starting with '.' are always ignored")
	}
	return nil
}

func (c *config) validate() error {
	switch c.redisType {
	case "single", "sentinel", "cluster":
	default:
		return fmt.Errorf("-redis-type %q: want single, sentinel or cluster", c.redisType)
	}
	switch c.logFormat {
	case "text", "json":
	default:
		return fmt.Errorf("-log-format %q: want text or json", c.logFormat)
	}
	if c.nearLimitRatio < 0 || c.nearLimitRatio > 1 {
		return fmt.Errorf("-near-limit-ratio %v: want a number between 0 and 1", c.nearLimitRatio)
	}
	if c.redisDeadline <= 0 {
		return fmt.Errorf("-redis-deadline %v: must be positive", c.redisDeadline)
	}
	if c.redisPoolSize < 0 || c.memoryMaxEntries < 0 || c.denyCacheSize < 0 {
		return errors.New("-redis-pool-size, -memory-max-entries and -deny-cache-size must not be negative")
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
		c.notes = append(c.notes, "a gRPC TLS certificate or key is set but -grpc-tls (GRPC_SERVER_USE_TLS) is off: gRPC is served without TLS")
	}
	if c.explain && len(c.args) < 2 {
		return errors.New("-explain needs a domain and at least one key=value entry, e.g. floodgate -explain rl api_key=alice")
	}
	if !c.explain && len(c.args) > 0 {
		return fmt.Errorf("unexpected arguments %q (only -explain takes arguments)", c.args)
	}
	return nil
}

// redisCredentials splits REDIS_AUTH's "pass" or "user:pass".
func (c *config) redisCredentials() (user, pass string) {
	if u, p, ok := strings.Cut(c.redisAuth, ":"); ok {
		return u, p
	}
	return "", c.redisAuth
}

// levelValue is a flag.Value for slog levels, with the reference server's
// logrus names (trace, warning, fatal, panic) mapped to the nearest.
type levelValue slog.Level

func (l *levelValue) String() string { return slog.Level(*l).String() }

func (l *levelValue) Set(s string) error {
	switch strings.ToLower(s) {
	case "trace", "debug":
		*l = levelValue(slog.LevelDebug)
	case "info":
		*l = levelValue(slog.LevelInfo)
	case "warn", "warning":
		*l = levelValue(slog.LevelWarn)
	case "error", "fatal", "panic":
		*l = levelValue(slog.LevelError)
	default:
		return fmt.Errorf("unknown log level %q (want debug, info, warn or error)", s)
	}
	return nil
}

// failureValue is a flag.Value for the global failure mode.
type failureValue rules.FailureMode

func (f *failureValue) String() string {
	if f == nil || rules.FailureMode(*f) == rules.FailureDefault {
		return rules.FailureAllow.String()
	}
	return rules.FailureMode(*f).String()
}

func (f *failureValue) Set(s string) error {
	for _, m := range []rules.FailureMode{rules.FailureAllow, rules.FailureDeny, rules.FailureUnavailable} {
		if strings.EqualFold(s, m.String()) {
			*f = failureValue(m)
			return nil
		}
	}
	return fmt.Errorf("unknown failure mode %q (want allow, deny or unavailable)", s)
}

// styleValue is a flag.Value for the response header style.
type styleValue envoy.HeaderStyle

func (s *styleValue) String() string { return envoy.HeaderStyle(*s).String() }

func (s *styleValue) Set(v string) error {
	st, err := envoy.ParseHeaderStyle(v)
	if err == nil {
		*s = styleValue(st)
	}
	return err
}
