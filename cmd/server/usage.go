package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
)

// flagGroup is a section of the usage.
type flagGroup struct {
	title string
	flags []string
}

// flagGroups sorts every flag into one section of the usage;
// TestUsageGroupsEveryFlag keeps it complete.
var flagGroups = []flagGroup{
	{"Rules", []string{"config", "config-type", "merge-domains", "health-requires-rules"}},
	{"Rules from an xDS server (-config-type grpc_xds_sotw)", []string{"xds-server", "xds-node-id", "xds-node-metadata", "xds-headers",
		"xds-tls", "xds-tls-ca", "xds-tls-cert", "xds-tls-key", "xds-tls-san", "xds-retry-interval", "xds-backoff-initial",
		"xds-backoff-max", "xds-backoff-random-factor", "xds-backoff-jitter", "xds-max-message-bytes", "xds-force-start"}},
	{"Store: Redis", []string{"redis", "redis-type", "redis-master", "redis-auth", "redis-sentinel-auth", "redis-pool-size",
		"redis-dial-timeout", "redis-pipeline-window", "redis-pipeline-limit", "redis-deadline", "key-prefix", "health-requires-store", "store-readiness", "deny-cache", "deny-cache-size",
		"deny-cache-max-age", "memory-max-entries", "failure-mode"}},
	{"Store: per-second Redis", []string{"redis-persecond", "redis-persecond-type", "redis-persecond-auth",
		"redis-persecond-sentinel-auth", "redis-persecond-pool-size", "redis-persecond-dial-timeout", "redis-persecond-pipeline-window",
		"redis-persecond-pipeline-limit", "redis-persecond-tls"}},
	{"Store: Redis TLS", []string{"redis-tls", "redis-tls-ca", "redis-tls-cert", "redis-tls-key", "redis-tls-skip-hostname-verification"}},
	{"Store: Memcached", []string{"memcache", "memcache-srv", "memcache-srv-refresh", "memcache-max-idle-conns", "memcache-tls",
		"memcache-tls-ca", "memcache-tls-cert", "memcache-tls-key", "memcache-tls-skip-hostname-verification"}},
	{"Listeners", []string{"grpc-addr", "http-addr", "debug-addr", "ui", "grpc-max-connection-age", "grpc-max-connection-age-grace",
		"grpc-max-connections", "http-max-connections", "grpc-connection-timeout", "grpc-keepalive-time", "grpc-keepalive-timeout",
		"grpc-max-connection-idle", "grpc-min-ping-interval", "http-read-timeout", "http-write-timeout", "http-idle-timeout",
		"drain-delay", "shutdown-timeout"}},
	{"TLS on the gRPC port", []string{"grpc-tls", "grpc-tls-cert", "grpc-tls-key", "grpc-client-ca", "grpc-client-san"}},
	{"Limits of requests", []string{"max-message-bytes", "max-descriptors", "max-entries", "max-key-bytes", "max-value-bytes"}},
	{"Answers and headers", []string{"shadow-mode", "response-dynamic-metadata", "near-limit-ratio", "response-headers",
		"limit-header", "remaining-header", "reset-header", "over-limit-body", "store-failure-header"}},
	{"Observability: logs, metrics, statsd", []string{"log-level", "log-format", "metric-value-series", "statsd", "statsd-addr",
		"statsd-protocol", "statsd-flush-interval", "statsd-tags", "dogstatsd", "dogstatsd-mogrifiers"}},
	{"Observability: tracing (OpenTelemetry)", []string{"tracing", "tracing-protocol", "tracing-service-name",
		"tracing-service-namespace", "tracing-service-instance-id", "tracing-sampling-rate"}},
	{"Traffic capture (for floodgate replay)", []string{"capture", "capture-sample", "capture-max-bytes"}},
	{"Commands", []string{"check", "explain", "version"}},
}

// usageHead is the top of -h.
const usageHead = `Usage: floodgate [serve] [flags]          serve the rules (the default command)
       floodgate check [flags]            validate the rules; exit 0 or 1
       floodgate explain [flags] domain key=value [key=value...]
                                          show which rule a descriptor matches
       floodgate version                  print the version and exit
       floodgate replay -old DIR -new DIR -traffic FILE [-format text|json|html]
                                          rehearse an edit of the rules on recorded
                                          traffic (floodgate replay -h)
The -check, -explain and -version flags do the same as the commands.

Each flag is also set by the environment variables listed under it: FLOODGATE_*
first, then the envoyproxy/ratelimit variable(s) (see docs/migrating.md). A flag
given on the command line wins over both.
`

// printUsage writes -h: the commands, then every flag by section, sorted,
// with its default and the variables that set it.
func printUsage(w io.Writer) {
	fs := newFlagSet(&config{})
	fmt.Fprint(w, usageHead)
	for _, g := range flagGroups {
		fmt.Fprintf(w, "\n%s:\n", g.title)
		names := slices.Sorted(slices.Values(g.flags))
		for _, name := range names {
			f := fs.Lookup(name)
			if f == nil {
				continue // TestUsageGroupsEveryFlag reports it
			}
			line := "  -" + f.Name
			if t := valueType(f.Value); t != "" {
				line += " " + t
			}
			def := f.DefValue
			if _, isString := f.Value.(explained).Get().(string); isString || def == "" {
				def = fmt.Sprintf("%q", def)
			}
			fmt.Fprintf(w, "%s\n    \t%s (default %s)\n", line, f.Usage, def)
			if vars := flagVars(f.Name); len(vars) > 0 {
				fmt.Fprintf(w, "    \tenv: %s\n", strings.Join(vars, ", "))
			}
		}
	}
}

// flagVars lists the variables that set a flag, FLOODGATE_* first.
func flagVars(name string) []string {
	if commandOnly[name] {
		return nil
	}
	vars := []string{floodgateVar(name)}
	for _, r := range referenceVars {
		if r.flag == name && !slices.Contains(vars, r.name) {
			vars = append(vars, r.name)
		}
	}
	if _, ok := fallbacks[name]; ok && name == "config" {
		vars = append(vars, defaultConfigVar+" (lowest)")
	}
	return vars
}

// subcommands maps the commands to the flags that do the same.
var subcommands = map[string]string{"serve": "", "check": "-check", "explain": "-explain", "version": "-version", "help": "-h"}

// commandArgs turns a leading command (floodgate check ...) into its flag
// (floodgate -check ...); other arguments are returned as they are.
func commandArgs(args []string) []string {
	if len(args) == 0 {
		return args
	}
	f, ok := subcommands[args[0]]
	if !ok {
		return args
	}
	if f == "" {
		return args[1:]
	}
	return append([]string{f}, args[1:]...)
}

// stampedVersion and stampedCommit are set at link time by builds without
// the repository's history, as the image's:
// -ldflags "-X main.stampedVersion=v1.2.3 -X main.stampedCommit=abc123".
// They win over what the toolchain recorded.
var stampedVersion, stampedCommit string

// version describes the build: the module's version ("(devel)" for a
// build from a work tree) and the commit, with "+dirty" when the tree had
// changes, as the Go toolchain recorded them or the link stamped them.
func version() string {
	v, commit, dirty, goVersion := "(devel)", "", false, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if stampedVersion != "" {
		v = stampedVersion
	}
	if stampedCommit != "" {
		commit, dirty = stampedCommit, false
	}
	if commit == "" {
		commit = "unknown"
	}
	if dirty {
		commit += "+dirty"
	}
	return fmt.Sprintf("floodgate %s commit %s %s", v, commit, goVersion)
}

// flagHint follows an error in the command line or the environment.
const flagHint = "run floodgate -h for the flags"
