//go:build unix

package main

import (
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/floodgate/floodgate/internal/harness"
)

// TestPortsTaken: a port the demo needs and something holds is named with
// its flag and, on Linux, the process that holds it (this test); the
// make command the error proposes moves the demo to a port free now,
// and names only the flags of the ports taken.
func TestPortsTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var a addrs
	for _, f := range a.flags() {
		*f.at = net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t)))
	}
	if err := portsFree(a); err != nil {
		t.Fatalf("free ports: %v", err)
	}
	a.HTTP = held.Addr().String()
	err = portsFree(a)
	if err == nil {
		t.Fatalf("%s is held, and portsFree says nothing", a.HTTP)
	}
	msg := err.Error()
	want := []string{a.HTTP + " (-http, floodgate's HTTP address): bind: address already in use"}
	if runtime.GOOS == "linux" {
		want = append(want, "pid "+strconv.Itoa(os.Getpid()))
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("the error does not say %q:\n%s", w, msg)
		}
	}
	m := regexp.MustCompile(`\n  make demo DEMO_FLAGS='-http (\S+)'$`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("the error proposes no make demo DEMO_FLAGS='-http ADDR', and only that:\n%s", msg)
	}
	if l, err := net.Listen("tcp", m[1]); err != nil {
		t.Errorf("the address proposed, %s, is not free: %v", m[1], err)
	} else {
		l.Close()
	}
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^demo:.*\n(\t.*\n)*\t.*\$\(DEMO_FLAGS\)`).Match(makefile) {
		t.Error("make demo does not pass $(DEMO_FLAGS) to the demo, which the error tells to set")
	}
}
