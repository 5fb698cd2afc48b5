package tracing

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// The OTLP exporters read their OTEL_EXPORTER_OTLP_* variables themselves
// and, on a value they cannot use, log a line through OpenTelemetry's
// internal logger and go on with their default: spans then go to
// localhost, or nowhere, while the start looked fine. New checks the
// values first, by the exporters' own rules, and refuses what they would
// drop.

// exportEnv is the part of the environment the exporter reads: the
// generic variable and its per-signal _TRACES_ form, which wins.
type exportEnv struct{ getenv func(string) string }

// lookup returns the value the exporter uses for the OTEL_EXPORTER_OTLP_
// suffix name, the _TRACES_ form first, and the variable it came from.
// Both are trimmed, as the exporter trims them.
func (e exportEnv) lookup(name string) (value, variable string) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_TRACES_" + name, "OTEL_EXPORTER_OTLP_" + name} {
		if s := strings.TrimSpace(e.getenv(v)); s != "" {
			return s, v
		}
	}
	return "", ""
}

// each calls check with the value of both forms of name that are set: the
// exporter parses both, and a bad generic one is logged and dropped even
// when the _TRACES_ one wins.
func (e exportEnv) each(name string, check func(variable, value string) error) error {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_" + name, "OTEL_EXPORTER_OTLP_TRACES_" + name} {
		if s := strings.TrimSpace(e.getenv(v)); s != "" {
			if err := check(v, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkEnv returns an error naming the first variable the exporter of
// protocol (ProtocolHTTP or ProtocolGRPC) would not use as given.
func checkEnv(protocol string, getenv func(string) string) error {
	e := exportEnv{getenv}
	return errors.Join(
		e.each("ENDPOINT", func(v, s string) error { return checkEndpoint(protocol, v, s) }),
		e.each("HEADERS", checkHeaders),
		e.each("TIMEOUT", func(v, s string) error {
			if n, err := strconv.Atoi(s); err != nil || n < 0 {
				return fmt.Errorf("%s=%q: want a whole number of milliseconds, like 10000", v, s)
			}
			return nil
		}),
		e.each("COMPRESSION", func(v, s string) error {
			if s != "gzip" && s != "none" {
				return fmt.Errorf("%s=%q: want gzip or none", v, s)
			}
			return nil
		}),
		e.each("INSECURE", func(v, s string) error {
			if !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") {
				return fmt.Errorf("%s=%q: want true or false", v, s)
			}
			return nil
		}),
		e.each("CERTIFICATE", checkFile),
		e.each("CLIENT_CERTIFICATE", checkFile),
		e.each("CLIENT_KEY", checkFile),
	)
}

// checkEndpoint applies the exporter's rules: OTLP/HTTP posts to the URL,
// so it must be absolute, http or https, with a host; OTLP/gRPC dials the
// URL's host (plaintext for http, TLS for https) or a unix socket, and
// the exporter cannot parse a bare host:port with an IP
// ("127.0.0.1:4317") and takes a bare name ("collector:4317") for a URL
// scheme, so both are refused for the URL form the OpenTelemetry
// specification asks for.
func checkEndpoint(protocol, variable, value string) error {
	want := "an absolute URL, http://host:port or https://host:port"
	if protocol == ProtocolGRPC {
		want = "a URL, http://host:port (plaintext), https://host:port (TLS) or unix:///path"
	}
	u, err := url.Parse(value)
	if err != nil {
		return fmt.Errorf("%s=%q: %w; want %s", variable, value, err, want)
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case (scheme == "http" || scheme == "https") && u.Host != "":
		return nil
	case scheme == "unix" && protocol == ProtocolGRPC && u.Path != "":
		return nil
	}
	return fmt.Errorf("%s=%q is not %s", variable, value, want)
}

// checkHeaders applies the exporter's rules for key=value,key2=value2:
// each pair has an '=', a token for a key and a percent-encoded value.
func checkHeaders(variable, value string) error {
	for pair := range strings.SplitSeq(value, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || !isToken(k) {
			return fmt.Errorf("%s: %q is not key=value; want comma-separated key=value pairs, values percent-encoded", variable, pair)
		}
		if _, err := url.PathUnescape(v); err != nil {
			return fmt.Errorf("%s: the value of %q: %w; want it percent-encoded", variable, k, err)
		}
	}
	return nil
}

// isToken reports whether s is an HTTP header name (RFC 9110 token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// checkFile refuses a TLS file the exporter could not read: it would log
// and go on without it.
func checkFile(variable, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", variable, err)
	}
	f.Close()
	return nil
}

// endpoint returns where the exporter of protocol sends spans, with the
// variable that said so ("" for the default): the URL posted to for
// OTLP/HTTP (the generic variable's URL gets /v1/traces appended, the
// per-signal one is used as is), the URL dialled for OTLP/gRPC. Its
// scheme is what the exporter does: https (TLS) by default and for an
// https URL, http (plaintext) for an http URL, and either as
// OTEL_EXPORTER_OTLP_INSECURE (or its _TRACES_ form), read after the URL,
// says. It assumes checkEnv passed.
func endpoint(protocol string, getenv func(string) string) (string, string) {
	e := exportEnv{getenv}
	value, variable := e.lookup("ENDPOINT")
	u := &url.URL{Scheme: "https", Host: "localhost:4318", Path: "/v1/traces"}
	if protocol == ProtocolGRPC {
		u = &url.URL{Scheme: "https", Host: "localhost:4317"}
	}
	if value != "" {
		var err error
		if u, err = url.Parse(value); err != nil {
			return value, variable
		}
		switch {
		case protocol == ProtocolGRPC && u.Scheme != "unix":
			u.Path, u.RawPath, u.RawQuery = "", "", ""
		case protocol == ProtocolGRPC:
		case variable == "OTEL_EXPORTER_OTLP_ENDPOINT":
			u = u.JoinPath("v1/traces")
		case u.Path == "":
			u.Path = "/"
		}
	}
	if u.Scheme == "unix" {
		return u.String(), variable
	}
	insecure := strings.EqualFold(u.Scheme, "http")
	_ = e.each("INSECURE", func(_, s string) error { insecure = strings.EqualFold(s, "true"); return nil })
	u.Scheme = "https"
	if insecure {
		u.Scheme = "http"
	}
	return u.String(), variable
}
