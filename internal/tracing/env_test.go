package tracing

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckEnv: the values the exporters would log and replace by their
// default are refused, naming the variable and what is accepted; the
// forms they use are not.
func TestCheckEnv(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(cert, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		protocol string
		env      []string
		want     string // "" for accepted
	}{
		{ProtocolHTTP, nil, ""},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}, ""},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example/otlp/"}, ""},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT="127.0.0.1:4318": parse`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector.example:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT="collector.example:4318" is not an absolute URL, http://host:port or https://host:port`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318/v1/traces"}, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="collector:4318/v1/traces" is not`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "unix:///run/otel.sock"}, "is not an absolute URL"},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "bad", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://ok:4318"}, `OTEL_EXPORTER_OTLP_ENDPOINT="bad"`},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"}, ""},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "unix:///run/otel.sock"}, ""},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4317"}, `OTEL_EXPORTER_OTLP_ENDPOINT="127.0.0.1:4317": parse`},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"}, "is not a URL, http://host:port (plaintext), https://host:port (TLS) or unix:///path"},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc,tenant=a%20b"}, ""},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_HEADERS", "noequals"}, `OTEL_EXPORTER_OTLP_HEADERS: "noequals" is not key=value`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "bad key=1"}, `OTEL_EXPORTER_OTLP_TRACES_HEADERS: "bad key=1" is not key=value`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_HEADERS", "k=%zz"}, `OTEL_EXPORTER_OTLP_HEADERS: the value of "k"`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "5000"}, ""},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "abc"}, `OTEL_EXPORTER_OTLP_TIMEOUT="abc": want a whole number of milliseconds`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5s"}, `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT="5s"`},
		{ProtocolHTTP, []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"}, `OTEL_EXPORTER_OTLP_COMPRESSION="zstd": want gzip or none`},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_INSECURE", "yes"}, `OTEL_EXPORTER_OTLP_INSECURE="yes": want true or false`},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", cert}, ""},
		{ProtocolGRPC, []string{"OTEL_EXPORTER_OTLP_CERTIFICATE", filepath.Join(dir, "missing.pem")}, "OTEL_EXPORTER_OTLP_CERTIFICATE: open"},
	} {
		env := map[string]string{}
		for i := 0; i+1 < len(tc.env); i += 2 {
			env[tc.env[i]] = tc.env[i+1]
		}
		err := checkEnv(tc.protocol, func(k string) string { return env[k] })
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s %v: refused: %v", tc.protocol, tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s %v: %v, want an error saying %q", tc.protocol, tc.env, err, tc.want)
		}
	}
}

// TestEndpoint: the endpoint reported is the one the exporter uses.
func TestEndpoint(t *testing.T) {
	for _, tc := range []struct {
		protocol, generic, traces string
		want, from                string
		insecure                  []string // OTEL_EXPORTER_OTLP_INSECURE, then _TRACES_
	}{
		// The exporters' default is TLS.
		{ProtocolHTTP, "", "", "https://localhost:4318/v1/traces", "", nil},
		{ProtocolGRPC, "", "", "https://localhost:4317", "", nil},
		{ProtocolGRPC, "", "", "http://localhost:4317", "", []string{"true", ""}},
		// INSECURE is read after the URL, and _TRACES_ after it.
		{ProtocolHTTP, "https://c:4318", "", "http://c:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT", []string{"true", ""}},
		{ProtocolGRPC, "http://c:4317", "", "https://c:4317", "OTEL_EXPORTER_OTLP_ENDPOINT", []string{"true", "false"}},
		{ProtocolHTTP, "http://c:4318", "", "http://c:4318/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT", nil},
		{ProtocolHTTP, "https://c/otlp/", "", "https://c/otlp/v1/traces", "OTEL_EXPORTER_OTLP_ENDPOINT", nil},
		{ProtocolHTTP, "http://c:4318", "http://t:4318", "http://t:4318/", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nil},
		{ProtocolHTTP, "", "http://t:4318/custom", "http://t:4318/custom", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nil},
		{ProtocolGRPC, "https://c:4317/ignored", "", "https://c:4317", "OTEL_EXPORTER_OTLP_ENDPOINT", nil},
		{ProtocolGRPC, "", "unix:///run/otel.sock", "unix:///run/otel.sock", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", nil},
	} {
		env := map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": tc.generic, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tc.traces}
		if tc.insecure != nil {
			env["OTEL_EXPORTER_OTLP_INSECURE"], env["OTEL_EXPORTER_OTLP_TRACES_INSECURE"] = tc.insecure[0], tc.insecure[1]
		}
		got, from := endpoint(tc.protocol, func(k string) string { return env[k] })
		if got != tc.want || from != tc.from {
			t.Errorf("%s %q %q: %s from %q, want %s from %q", tc.protocol, tc.generic, tc.traces, got, from, tc.want, tc.from)
		}
	}
}

// TestNewRefusesEnv: New refuses, naming the variable, a bad value in the
// process environment, which is what the exporter reads, and a malformed
// OTEL_RESOURCE_ATTRIBUTES.
func TestNewRefusesEnv(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "127.0.0.1:4318", "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{"OTEL_RESOURCE_ATTRIBUTES", "bad", "OTEL_RESOURCE_ATTRIBUTES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.name, tc.value)
			tr, err := New(context.Background(), Options{SamplingRate: 1})
			if err == nil {
				tr.Shutdown(context.Background())
				t.Fatalf("%s=%s accepted", tc.name, tc.value)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%v does not name %s", err, tc.want)
			}
		})
	}
}
