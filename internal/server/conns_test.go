package server

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"
)

func TestConnOptionsDefaults(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		in                   ConnOptions
		fileLimit            int
		wantGRPC, wantHTTP   int
		wantTimeout, wantErr string
	}{
		{"shares of the file limit", ConnOptions{}, 1024, 512, 128, "10s", ""},
		{"at least MinAutoConns", ConnOptions{}, 40, 20, MinAutoConns, "10s", ""},
		{"unknown file limit: no bound", ConnOptions{}, 0, 0, 0, "10s", ""},
		{"set bounds win", ConnOptions{GRPCMaxConns: 7, HTTPMaxConns: 3}, 1024, 7, 3, "10s", ""},
		{"negative: no bound", ConnOptions{GRPCMaxConns: -1, HTTPMaxConns: -1}, 1024, 0, 0, "10s", ""},
		{"set timeout", ConnOptions{GRPCConnectionTimeout: time.Second}, 1024, 512, 128, "1s", ""},
		{"negative timeout", ConnOptions{HTTPIdleTimeout: -time.Second}, 1024, 0, 0, "", "Options.Conns.HTTPIdleTimeout -1s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.normalize(tc.fileLimit)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.GRPCMaxConns != tc.wantGRPC || got.HTTPMaxConns != tc.wantHTTP || got.GRPCConnectionTimeout.String() != tc.wantTimeout {
				t.Errorf("got gRPC %d HTTP %d timeout %v, want %d %d %s", got.GRPCMaxConns, got.HTTPMaxConns, got.GRPCConnectionTimeout, tc.wantGRPC, tc.wantHTTP, tc.wantTimeout)
			}
			if got.GRPCKeepaliveTime != DefaultGRPCKeepaliveTime || got.GRPCMinPingInterval != DefaultGRPCMinPingInterval ||
				got.HTTPReadTimeout != DefaultHTTPReadTimeout || got.GRPCMaxConnectionIdle != 0 {
				t.Errorf("defaults not filled in: %+v", got)
			}
		})
	}
}

// isClosed reports whether the peer closed c within d.
func isClosed(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	ne, ok := errors.AsType[net.Error](err)
	return !ok || !ne.Timeout()
}

func TestConnListenerBoundsAndCloses(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnListener(raw, "test", 2, slog.New(slog.DiscardHandler))
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
			go io.Copy(io.Discard, c) // the server reads, as gRPC would
		}
	}()
	dial := func(first string) net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if first != "" {
			io.WriteString(c, first)
		}
		return c
	}
	silent, spoke := dial(""), dial("hello")
	<-accepted
	<-accepted
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for c := range l.conns {
			if c.spoke.Load() {
				return true
			}
		}
		return false
	})

	over := dial("")
	if !isClosed(over, time.Second) {
		t.Error("a connection over the bound stays open")
	}
	if n := l.refused.Load(); n != 1 {
		t.Errorf("refused %d, want 1", n)
	}

	// Time is a parameter: at the grace's end for the first connection
	// accepted, none is silent yet; just past it for the last, the one
	// that sent nothing is.
	var first, last time.Time
	l.mu.Lock()
	for c := range l.conns {
		if first.IsZero() || c.accepted.Before(first) {
			first = c.accepted
		}
		if c.accepted.After(last) {
			last = c.accepted
		}
	}
	l.mu.Unlock()
	if n := l.closeSilent(first.Add(silentGrace)); n != 0 {
		t.Errorf("closeSilent closed %d within the grace of new connections, want 0", n)
	}
	if n := l.closeSilent(last.Add(silentGrace + time.Nanosecond)); n != 1 {
		t.Errorf("closeSilent closed %d past the grace, want 1", n)
	}
	if !isClosed(silent, time.Second) {
		t.Error("the silent connection is still open")
	}
	// closeAll closes before it returns: the one that spoke is the one
	// still open.
	l.mu.Lock()
	for c := range l.conns {
		if !c.spoke.Load() {
			t.Error("a connection that sent nothing is still open")
		}
	}
	l.mu.Unlock()
	if n := l.open(); n != 1 {
		t.Errorf("%d open after closing the silent one, want the one that spoke", n)
	}
	if n := l.closeAll(); n != 1 || !isClosed(spoke, time.Second) {
		t.Errorf("closeAll closed %d, want 1", n)
	}
	if n := l.open(); n != 0 {
		t.Errorf("%d open after closing all", n)
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// TestShutdownIgnoresSilentConnections: Run returns within the shutdown
// timeout whatever state the open gRPC connections are in (gRPC's Stop
// alone would wait for each handshake's own timeout, here a minute), and
// at once when they are only silent ones or stalled in the handshake, past
// the grace of new connections.
func TestShutdownIgnoresSilentConnections(t *testing.T) {
	const preface = "PRI * HTTP/2.0\r\n"
	const handshake = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		sends   []string // what each connection sends
		within  time.Duration
	}{
		{"silent, mid-preface and after the handshake", 300 * time.Millisecond, []string{"", "", preface, handshake}, 800 * time.Millisecond},
		{"only silent ones", 5 * time.Second, []string{"", "", ""}, 500 * time.Millisecond},
		// A client stalled in gRPC's handshake carries no request either:
		// closed, GracefulStop ends at once (before, it waited for the
		// handshake, and sent no GOAWAY to the others meanwhile).
		{"stalled in the handshake", 5 * time.Second, []string{preface, preface, ""}, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, stop := running(t, Options{ShutdownTimeout: tc.timeout, Conns: ConnOptions{GRPCConnectionTimeout: time.Minute}})
			for _, first := range tc.sends {
				c, err := net.Dial("tcp", s.Addrs().GRPC.String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, first)
			}
			waitFor(t, func() bool { return s.listeners[0].conns.open() == len(tc.sends) })
			// The shutdown reads the wall clock: wait until every
			// connection is past the grace of new ones.
			time.Sleep(silentGrace)
			start := time.Now()
			if err := stop(); err != nil {
				t.Errorf("Run: %v, want nil (no request was in flight)", err)
			}
			if took := time.Since(start); took > tc.within {
				t.Errorf("Run returned %v after cancel, want within %v", took, tc.within)
			}
		})
	}
}
