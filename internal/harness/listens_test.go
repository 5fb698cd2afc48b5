package harness

import (
	"net"
	"os/exec"
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
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ok, err := p.ListensOn(addr)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("redis-server never listened on %s", addr)
		}
	}
	if ok, err := p.ListensOn(own.Addr().String()); ok || err != nil {
		t.Errorf("ListensOn(%s), the test's own listener: %v, %v; want false", own.Addr(), ok, err)
	}
}
