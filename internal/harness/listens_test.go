package harness

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestListensOn: a process holds the port it listens on, and not one this
// test holds, though both answer on 127.0.0.1.
func TestListensOn(t *testing.T) {
	redis := Require(t, "redis-server")
	own, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	p, err := StartProcess("redis-server", exec.Command(redis, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(0)
	listening := func(context.Context) error {
		if ok, err := p.ListensOn(addr); err != nil || !ok {
			return fmt.Errorf("not listening on %s (%v)", addr, err)
		}
		return nil
	}
	if err := WaitReady(context.Background(), p, 30*time.Second, listening); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.ListensOn(own.Addr().String()); ok || err != nil {
		t.Errorf("ListensOn(%s), the test's own listener: %v, %v; want false", own.Addr(), ok, err)
	}
}

func TestListenAddrs(t *testing.T) {
	const g, h = "127.0.0.1:1", "127.0.0.1:2"
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{g, h}},
		{[]string{"-grpc-addr", g, "-http-addr", h, "-grpc-addr", "127.0.0.1:3"}, []string{h, "127.0.0.1:3"}},
		{[]string{"--http-addr=127.0.0.1:4", "-grpc-addr", "127.0.0.1:0"}, []string{"127.0.0.1:4"}},
		{[]string{"-grpc-addr", "", "-http-addr"}, []string{h}},
	} {
		got := listenAddrs(tt.args, g, h)
		slices.Sort(got)
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: %q, want %q", tt.args, got, tt.want)
		}
	}
}

// PortTaken knows each program's words for a taken port.
func TestPortTaken(t *testing.T) {
	for out, want := range map[string]bool{
		"listen tcp 127.0.0.1:8081: bind: address already in use":                                              true, // Go
		"# Warning: Could not create server TCP listening socket 127.0.0.1:6379: bind: Address already in use": true, // Redis
		"failed to listen on TCP port 11211: Address already in use":                                           true, // memcached
		"connection refused": false,
		"":                   false,
	} {
		if got := PortTaken(out); got != want {
			t.Errorf("PortTaken(%q) = %v, want %v", out, got, want)
		}
	}
}
