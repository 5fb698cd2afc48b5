package settings

import (
	"cmp"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// envSource derives a flag's value from the environment. It returns the
// value, a description of where it came from (for error messages), and
// whether the environment sets it.
type envSource func(env Lookup) (value, from string, ok bool)

// envVar reads one variable.
func envVar(name string) envSource {
	return func(env Lookup) (string, string, bool) {
		v, ok := env(name)
		return v, name, ok && v != ""
	}
}

// hostPort joins the reference server's HOST/PORT style pair; an unset
// port is defPort, an unset host defHost ("": every interface).
func hostPort(hostVar, portVar, defHost, defPort string) envSource {
	return func(env Lookup) (string, string, bool) {
		host, hok := env(hostVar)
		port, pok := env(portVar)
		if !hok && !pok {
			return "", "", false
		}
		if !hok {
			host = defHost
		}
		if n, err := strconv.ParseInt(port, 0, 64); err == nil {
			port = strconv.FormatInt(n, 10) // as the reference reads it: 0x1f90, 010 (octal), 1_000
		}
		return net.JoinHostPort(host, cmp.Or(port, defPort)), hostVar + "/" + portVar, true
	}
}

// runtimePath is the reference server's rule directory:
// $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY, with its
// defaults for the parts left unset (/srv/runtime_data/current, "",
// "config").
func runtimePath(env Lookup) (string, string, bool) {
	root, rok := env("RUNTIME_ROOT")
	sub, sok := env("RUNTIME_SUBDIRECTORY")
	app, aok := env("RUNTIME_APPDIRECTORY")
	if !rok && !sok && !aok {
		return "", "", false
	}
	return filepath.Join(cmp.Or(root, "/srv/runtime_data/current"), sub, cmp.Or(app, "config")), runtimeFrom, true
}

// runtimeFrom names the RUNTIME_* variables as the origin of the rule path.
const runtimeFrom = "RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY"

// noteRuntime notes a rule path from RUNTIME_* with RUNTIME_SUBDIRECTORY
// empty and RUNTIME_WATCH_ROOT not false: the reference loads nothing
// then, floodgate the directory.
func (c *Config) noteRuntime(env Lookup) {
	if c.From["config"] != runtimeFrom {
		return
	}
	watch, _ := env("RUNTIME_WATCH_ROOT")
	if sub, _ := env("RUNTIME_SUBDIRECTORY"); sub != "" || isBool(watch, false) {
		return
	}
	c.Notes = append(c.Notes, "RUNTIME_SUBDIRECTORY is empty and RUNTIME_WATCH_ROOT is not false: the reference server serves no rules then (its loader needs a subdirectory below RUNTIME_ROOT); floodgate loads "+c.Rules.Path)
}

// serverCAVar is the variable Envoy Gateway sets for the gRPC port's
// client CA, which neither server reads (GRPC_CLIENT_TLS_CACERT is it).
const serverCAVar = "GRPC_SERVER_TLS_CA_CERT"

// noteServerCA notes serverCAVar set while no client CA is: no client
// certificate is asked for, which whoever set it may not expect.
func (c *Config) noteServerCA(env Lookup) {
	if v, _ := env(serverCAVar); v == "" || c.GRPCTLS.Files.ClientCAFile != "" {
		return
	}
	c.Notes = append(c.Notes, serverCAVar+" is not read, by floodgate or the reference (whose name for it is GRPC_CLIENT_TLS_CACERT): the gRPC port asks for no client certificate; set GRPC_CLIENT_TLS_CACERT to the same file to require one")
}

// socketURL reads a Redis URL variable with its socket type variable
// (REDIS_URL and REDIS_SOCKET_TYPE): "unix" makes it a socket path.
func socketURL(urlVar, socketVar string) envSource {
	return func(env Lookup) (string, string, bool) {
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
func perSecondOn(env Lookup) bool { return isSetTrue(env, "REDIS_PERSECOND") }

// memcacheOn reports whether BACKEND_TYPE=memcache: the reference reads the
// MEMCACHE_* variables only then.
func memcacheOn(env Lookup) bool {
	v, _ := env("BACKEND_TYPE")
	return strings.EqualFold(v, "memcache")
}

// statsdOn says whether the reference would send statsd: not with
// DISABLE_STATS=true; else as USE_DOG_STATSD or USE_STATSD say; else when
// STATSD_HOST or STATSD_PORT is set, the reference defaulting to true.
func statsdOn(env Lookup) (string, string, bool) {
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

// prometheusOn reports whether the reference would serve Prometheus:
// USE_PROMETHEUS=true, unless DISABLE_STATS=true, which it reads first.
func prometheusOn(env Lookup) bool {
	return isSetTrue(env, "USE_PROMETHEUS") && !isSetTrue(env, "DISABLE_STATS")
}

// prometheusAddr is where the reference serves Prometheus:
// PROMETHEUS_ADDR, or its default :9090, while prometheusOn.
func prometheusAddr(env Lookup) (string, string, bool) {
	if !prometheusOn(env) {
		return "", "", false
	}
	if v, ok := env("PROMETHEUS_ADDR"); ok && v != "" {
		return v, "PROMETHEUS_ADDR", true
	}
	return ":9090", "USE_PROMETHEUS (PROMETHEUS_ADDR defaults to :9090 in the reference)", true
}

// headersEnabled maps LIMIT_RESPONSE_HEADERS_ENABLED to a header style.
func headersEnabled(env Lookup) (string, string, bool) {
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

// DefaultConfigVar sets the rule path when nothing else does: below -config,
// FLOODGATE_CONFIG and RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY.
// The image sets it to its demo rules, so that a deployment written for the
// reference server, which sets RUNTIME_*, gets its own rules.
const DefaultConfigVar = "FLOODGATE_DEFAULT_CONFIG"

// ReferenceDefaultDir is where the reference server reads its rules when no
// RUNTIME_* variable is set.
const ReferenceDefaultDir = "/srv/runtime_data/current/config"

// ReferenceDefaultFrom names ReferenceDefaultDir as the origin of the rules.
const ReferenceDefaultFrom = "the reference server's default directory"

// imageDefault reads FLOODGATE_DEFAULT_CONFIG, unless the reference's
// default directory refDir exists: a manifest that mounts its rules there
// must get them, not the image's demo rules.
func imageDefault(env Lookup, refDir string) (path, from string, ok bool) {
	v, ok := env(DefaultConfigVar)
	if !ok || v == "" {
		return "", "", false
	}
	if fi, err := os.Stat(refDir); err == nil && fi.IsDir() {
		return refDir, ReferenceDefaultFrom, true
	}
	return v, DefaultConfigVar, true
}

// xdsOn reports whether CONFIG_TYPE=GRPC_XDS_SOTW: the reference reads its
// xDS variables only then.
func xdsOn(env Lookup) bool {
	v, _ := env("CONFIG_TYPE")
	var on ConfigType
	return on.UnmarshalText([]byte(v)) == nil && bool(on)
}

// pairedOnly is the variable's comma-separated entries that hold "=", as
// the reference keeps them; unset when none is left.
func pairedOnly(name string) envSource {
	return func(env Lookup) (string, string, bool) {
		v, _ := env(name)
		kept := slices.DeleteFunc(strings.Split(v, ","), func(e string) bool { return !strings.Contains(e, "=") })
		return strings.Join(kept, ","), name, len(kept) > 0
	}
}

// unpaired lists the entries of v that pairedOnly drops.
func unpaired(v string) []string {
	var out []string
	for e := range strings.SplitSeq(v, ",") {
		if strings.TrimSpace(e) != "" && !strings.Contains(e, "=") {
			out = append(out, strconv.Quote(e))
		}
	}
	return out
}
