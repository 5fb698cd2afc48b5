//go:build unix

package main

import (
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestRewriteAddresses moves the shipped Envoy files' addresses and
// nothing else, and refuses a file with an address the demo does not know.
func TestRewriteAddresses(t *testing.T) {
	a := addrs{Envoy: "127.0.0.1:20000", EnvoyAdmin: "127.0.0.1:20001", EnvoyTCP: "127.0.0.1:20002",
		EnvoyTCPAdmin: "127.0.0.1:20003", GRPC: "127.0.0.1:20004", Backend: "127.0.0.1:20005"}
	for _, tc := range []struct {
		file, admin string
		to          map[string]string
		wantErr     string
	}{
		{file: "../../examples/envoy.yaml", admin: a.EnvoyAdmin, to: envoyAddresses(a)[0].to},
		{file: "../../examples/envoy-tcp.yaml", admin: a.EnvoyTCPAdmin, to: envoyAddresses(a)[1].to},
		// The TCP file's listener is not the HTTP file's.
		{file: "../../examples/envoy-tcp.yaml", to: envoyAddresses(a)[0].to, wantErr: "socket_address 0.0.0.0:9902: not an address of the demo"},
	} {
		raw, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		out, admin, err := rewriteAddresses(raw, tc.to)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: error %v, want %q", tc.file, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if admin != tc.admin {
			t.Errorf("%s: admin %s, want %s", tc.file, admin, tc.admin)
		}
		for _, gone := range []string{"0.0.0.0", "address: backend", "address: floodgate"} {
			if strings.Contains(string(out), gone) {
				t.Errorf("%s: %q left after the rewrite:\n%s", tc.file, gone, out)
			}
		}
		// Only addresses changed: with them put back, the files are equal.
		rev := map[string]string{}
		for from, to := range tc.to {
			rev[to] = from
		}
		back := decode(t, out)
		if err := moveAddresses(back, rev); err != nil {
			t.Fatal(err)
		}
		if a, b := dump(t, decode(t, raw)), dump(t, back); a != b {
			t.Errorf("%s: more than the addresses changed:\n%s\nvs\n%s", tc.file, a, b)
		}
	}
}

func decode(t *testing.T, b []byte) any {
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// dump encodes v canonically, with ports as text whichever way they were
// written.
func dump(t *testing.T, v any) string {
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return strings.ReplaceAll(string(b), `"`, "")
}
