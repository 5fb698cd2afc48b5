package tracing

import (
	"errors"
	"fmt"
	"iter"
	"net/url"
	"os"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// otlpVars yields each form of the OTLP variable name that getenv sets,
// with its trimmed value: the generic one first, then the _TRACES_ one,
// which wins. The exporter parses both.
func otlpVars(getenv func(string) string, name string) iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, v := range []string{"OTEL_EXPORTER_OTLP_" + name, "OTEL_EXPORTER_OTLP_TRACES_" + name} {
			if s := strings.TrimSpace(getenv(v)); s != "" && !yield(v, s) {
				return
			}
		}
	}
}

// checkEnv returns an error naming the first variable the exporter of
// protocol (ProtocolHTTP or ProtocolGRPC) would not use as given.
func checkEnv(protocol string, getenv func(string) string) error {
	each := func(name string, check func(variable, value string) error) error {
		for v, s := range otlpVars(getenv, name) {
			if err := check(v, s); err != nil {
				return err
			}
		}
		return nil
	}
	return errors.Join(
		each("ENDPOINT", func(v, s string) error { return checkEndpoint(protocol, v, s) }),
		each("HEADERS", checkHeaders),
		each("TIMEOUT", func(v, s string) error {
			if n, err := strconv.Atoi(s); err != nil || n < 0 {
				return fmt.Errorf("%s=%q: want a whole number of milliseconds, like 10000", v, s)
			}
			return nil
		}),
		each("COMPRESSION", func(v, s string) error {
			if s != "gzip" && s != "none" {
				return fmt.Errorf("%s=%q: want gzip or none", v, s)
			}
			return nil
		}),
		each("INSECURE", func(v, s string) error {
			if !strings.EqualFold(s, "true") && !strings.EqualFold(s, "false") {
				return fmt.Errorf("%s=%q: want true or false", v, s)
			}
			return nil
		}),
		each("CERTIFICATE", checkFile),
		each("CLIENT_CERTIFICATE", checkFile),
		each("CLIENT_KEY", checkFile),
	)
}

// checkEndpoint applies the exporter's rules: an absolute http or https
// URL with a host, or for gRPC a unix socket too. A bare host:port is
// refused: the exporter misreads it.
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

// checkHeaders checks key=value,key2=value2: token keys, percent-encoded
// values.
func checkHeaders(variable, value string) error {
	for pair := range strings.SplitSeq(value, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		if !ok || !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("%s: %q is not key=value; want comma-separated key=value pairs, values percent-encoded", variable, pair)
		}
		if _, err := url.PathUnescape(v); err != nil {
			return fmt.Errorf("%s: the value of %q: %w; want it percent-encoded", variable, k, err)
		}
	}
	return nil
}

// checkFile refuses a TLS file the exporter could not read.
func checkFile(variable, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", variable, err)
	}
	f.Close()
	return nil
}

// endpoint returns where the exporter sends spans, as it computes it, and
// the variable that said so ("" for the default): over HTTP the generic
// variable's URL gets /v1/traces; the scheme is https unless the URL or
// OTEL_EXPORTER_OTLP_INSECURE says http. It assumes checkEnv passed.
func endpoint(protocol string, getenv func(string) string) (string, string) {
	var value, variable string
	for v, s := range otlpVars(getenv, "ENDPOINT") {
		variable, value = v, s
	}
	u := &url.URL{Scheme: "https", Host: "localhost:4318", Path: "/v1/traces"}
	if protocol == ProtocolGRPC {
		u = &url.URL{Scheme: "https", Host: "localhost:4317"}
	}
	if value != "" {
		u, _ = url.Parse(value) // checkEnv parsed it
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
	for _, s := range otlpVars(getenv, "INSECURE") {
		insecure = strings.EqualFold(s, "true")
	}
	u.Scheme = "https"
	if insecure {
		u.Scheme = "http"
	}
	return u.String(), variable
}
