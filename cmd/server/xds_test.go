package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
)

// With xDS and no management server, the server waits for the first rules
// and serves nothing meanwhile, as the reference does; stopped then, it
// says why and exits 1. With FORCE_START_WITHOUT_INITIAL_CONFIG it serves
// at once, every request allowed.
func TestXDSStart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		force    string
		serving  bool
		wantCode int
		wantLog  string
	}{
		{"waits for the first rules", "false", false, 1, "stopped before the first rules arrived from the xDS server"},
		{"forced to start", "true", true, 0, "serving before the first rules arrive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", deadAddr(t),
				"FORCE_START_WITHOUT_INITIAL_CONFIG", tc.force, "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms")
			logs := &testlog.Buffer{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan int, 1)
			go func() {
				done <- run(ctx, []string{"-grpc-addr", "127.0.0.1:0", "-http-addr", "127.0.0.1:0", "-debug-addr", ""}, env, io.Discard, logs)
			}()
			serving := regexp.MustCompile(`msg=serving grpc=(\S+) http=(\S+)`)
			// Either it serves, or it says it waits for the first rules;
			// whether it served meanwhile is read from the whole log once
			// it has exited.
			var m []string
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				out := logs.String()
				if m = serving.FindStringSubmatch(out); m != nil || strings.Contains(out, "xds: waiting for the first rules before serving") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("neither serving nor waiting for the first rules after 10 s:\n%s", logs)
				}
			}
			if m != nil {
				body := get(t, "POST", "http://"+m[2]+"/json", `{"domain":"any","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`)
				if !strings.Contains(body, `"overallCode":"OK"`) {
					t.Errorf("/json before any rules: %s, want OK", body)
				}
			}
			cancel()
			if code := <-done; code != tc.wantCode {
				t.Errorf("exit code %d, want %d:\n%s", code, tc.wantCode, logs)
			}
			if served := serving.MatchString(logs.String()); served != tc.serving {
				t.Errorf("served %v, want %v:\n%s", served, tc.serving, logs)
			}
			if !strings.Contains(logs.String(), tc.wantLog) {
				t.Errorf("logs lack %q:\n%s", tc.wantLog, logs)
			}
		})
	}
}

// With xDS, check and explain, which read rule files, say that the rules
// come from the xDS server and how to check them when -config is missing,
// instead of only "no such file"; given a copy, they read it.
func TestXDSOffline(t *testing.T) {
	copyDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(copyDir, "api.yaml"), []byte("domain: api\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"check without files", []string{"-config", missing, "-check"}, 1,
			"the rules come from the xDS server eg:18000, which check and explain do not ask: they read rule files, and -config " + missing + " cannot be read"},
		{"explain without files", []string{"-config", missing, "-explain", "api", "user=u"}, 1, "point -config at a copy of the pushed rules"},
		{"check of a copy", []string{"-config", copyDir, "-check"}, 0, "1 domain"},
		{"explain of a copy", []string{"-config", copyDir, "-explain", "api", "user=u"}, 0, "3 per minute"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out testlog.Buffer
			env := envOf("CONFIG_TYPE", "GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL", "eg:18000")
			if code := run(context.Background(), tc.args, env, &out, &out); code != tc.wantCode || !strings.Contains(out.String(), tc.want) {
				t.Errorf("exit %d, want %d, output lacking %q:\n%s", code, tc.wantCode, tc.want, out.String())
			}
		})
	}
}
