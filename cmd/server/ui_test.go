package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/testlog"
)

// The live page is on by default on both listeners, with every rule's
// request values only on the debug one; -ui=false or FLOODGATE_UI=false removes it.
func TestUIFlag(t *testing.T) {
	serving := regexp.MustCompile(`msg=serving grpc=\S+ http=(\S+) debug=(\S+)`)
	host, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		on   bool
	}{
		{"default", []string{"-http-addr", "127.0.0.1:0"}, nil, true},
		// The reference server's variables place the HTTP listener.
		{"reference HOST/PORT", nil, []string{"HOST", host, "PORT", port}, true},
		{"flag off", []string{"-http-addr", "127.0.0.1:0", "-ui=false"}, nil, false},
		{"variable off", []string{"-http-addr", "127.0.0.1:0"}, []string{"FLOODGATE_UI", "false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := envOf(append([]string{"FLOODGATE_CONFIG", "../../config"}, tc.env...)...)
			args := append([]string{"-grpc-addr", "127.0.0.1:0", "-debug-addr", "127.0.0.1:0"}, tc.args...)
			var logs testlog.Buffer
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan int, 1)
			go func() { done <- run(ctx, args, env, io.Discard, &logs) }()
			defer func() { stop(); <-done }()
			var m []string
			if !waitFor(10*time.Second, func() bool { m = serving.FindStringSubmatch(logs.String()); return m != nil }) {
				t.Fatalf("not serving:\n%s", logs.String())
			}
			if tc.env != nil && tc.env[0] == "HOST" && m[1] != net.JoinHostPort(host, port) {
				t.Fatalf("HOST/PORT %s:%s gave the HTTP listener %s", host, port, m[1])
			}
			for i, listener := range []string{"http", "debug"} {
				resp, err := http.Get("http://" + m[i+1] + "/ui/api/snapshot")
				if err != nil {
					t.Fatal(err)
				}
				var snap struct {
					Values string `json:"values"`
				}
				err = json.NewDecoder(resp.Body).Decode(&snap)
				resp.Body.Close()
				if !tc.on {
					if resp.StatusCode != http.StatusNotFound {
						t.Errorf("%s listener: /ui/api/snapshot answered %s with the page off, want 404", listener, resp.Status)
					}
					continue
				}
				if resp.StatusCode != http.StatusOK || err != nil {
					t.Fatalf("%s listener: /ui/api/snapshot answered %s (%v)", listener, resp.Status, err)
				}
				if want := map[string]string{"http": "opted_in", "debug": "all"}[listener]; snap.Values != want {
					t.Errorf("%s listener shows values %q, want %q", listener, snap.Values, want)
				}
			}
		})
	}
}
