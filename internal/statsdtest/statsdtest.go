// Package statsdtest is a statsd server for tests: a real UDP socket on
// loopback whose packets a test reads back as lines.
package statsdtest

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// quiet is how long without a packet ends Packets.
const quiet = 100 * time.Millisecond

// Server receives statsd packets on a UDP port of 127.0.0.1. It reads them
// as they come, so that a test flushing many times overflows no socket
// buffer.
type Server struct {
	conn    *net.UDPConn
	arrived chan struct{}

	mu      sync.Mutex
	packets []string
}

// Listen starts a Server that is closed when the test ends.
func Listen(t testing.TB) *Server {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{conn: conn, arrived: make(chan struct{}, 1)}
	done := make(chan struct{})
	go s.read(done)
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return s
}

func (s *Server) read(done chan<- struct{}) {
	defer close(done)
	buf := make([]byte, 1<<16)
	for {
		n, err := s.conn.Read(buf)
		if err != nil {
			return
		}
		s.mu.Lock()
		s.packets = append(s.packets, string(buf[:n]))
		s.mu.Unlock()
		select {
		case s.arrived <- struct{}{}:
		default:
		}
	}
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.conn.LocalAddr().String() }

// Packets returns the packets received since the last call, in order. It
// returns once none has come for a moment: a client's flush has written its
// packets when it returns, so they are on their way.
func (s *Server) Packets(t testing.TB) []string {
	t.Helper()
	for {
		select {
		case <-s.arrived:
		case <-time.After(quiet):
			s.mu.Lock()
			defer s.mu.Unlock()
			p := s.packets
			s.packets = nil
			return p
		}
	}
}

// Lines returns the lines of the packets received since the last call, in
// order.
func (s *Server) Lines(t testing.TB) []string {
	t.Helper()
	return SplitLines(s.Packets(t))
}

// SplitLines returns the lines of packets, without empty ones.
func SplitLines(packets []string) []string {
	var lines []string
	for _, p := range packets {
		for l := range strings.SplitSeq(p, "\n") {
			if l != "" {
				lines = append(lines, l)
			}
		}
	}
	return lines
}
