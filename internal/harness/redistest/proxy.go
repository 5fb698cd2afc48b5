package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Proxy is a TCP proxy in front of a Redis server that can lose replies,
// as a network failing between a command and its answer does: it passes
// commands and replies through, and when told to (LoseReply), lets Redis
// run the next command of a given name, then drops Redis's reply and
// closes the client's connection. The client cannot tell whether the
// command ran; the test can, by asking Redis.
type Proxy struct {
	// Addr is the proxy's host:port, to give the client instead of the
	// server's.
	Addr string

	target string
	ln     net.Listener

	mu    sync.Mutex
	lose  map[string]int // command name (upper case) → commands to pass before losing a reply
	seen  map[string]int // command name → commands passed to Redis
	lost  int
	conns map[net.Conn]bool
}

// StartProxy starts a Proxy to the Redis server at target, closed when the
// test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln,
		lose: make(map[string]int), seen: make(map[string]int), conns: make(map[net.Conn]bool)}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// LoseReply makes the proxy pass skip commands named name (FCALL,
// EVALSHA, ...; any case), then lose the reply to the next one: Redis runs
// it, and the client's connection is closed instead of receiving the
// answer. It replaces what an earlier LoseReply for name asked.
func (p *Proxy) LoseReply(name string, skip int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lose[strings.ToUpper(name)] = skip
}

// Seen returns how many commands named name went through to Redis.
func (p *Proxy) Seen(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[strings.ToUpper(name)]
}

// Lost returns how many replies the proxy has lost.
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

func (p *Proxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = true, true
		p.mu.Unlock()
		names := make(chan string, 1024)
		go p.commands(client, server, names)
		go p.replies(client, server, names)
	}
}

// commands passes the client's commands to Redis, each one's name to
// replies, in order.
func (p *Proxy) commands(client, server net.Conn, names chan<- string) {
	defer close(names)
	r := bufio.NewReader(client)
	for {
		raw, name, err := readValue(r)
		if err != nil {
			server.Close()
			return
		}
		p.mu.Lock()
		p.seen[name]++
		p.mu.Unlock()
		names <- name
		if _, err := server.Write(raw); err != nil {
			client.Close()
			return
		}
	}
}

// replies passes Redis's replies to the client, but loses the reply of a
// command LoseReply named and closes both connections.
func (p *Proxy) replies(client, server net.Conn, names <-chan string) {
	defer client.Close()
	defer server.Close()
	r := bufio.NewReader(server)
	for name := range names {
		raw, _, err := readValue(r)
		if err != nil {
			return
		}
		// RESP3 push messages arrive unasked: pass them on and read the
		// reply proper.
		for raw[0] == '>' {
			if _, err := client.Write(raw); err != nil {
				return
			}
			if raw, _, err = readValue(r); err != nil {
				return
			}
		}
		p.mu.Lock()
		left, armed := p.lose[name]
		lose := armed && left == 0
		switch {
		case lose:
			delete(p.lose, name)
			p.lost++
		case armed:
			p.lose[name]--
		}
		p.mu.Unlock()
		if lose {
			return
		}
		if _, err := client.Write(raw); err != nil {
			return
		}
	}
}

// readValue reads one RESP2 or RESP3 value and returns its bytes and, for
// an array whose first element is a string (a command), that element in
// upper case.
func readValue(r *bufio.Reader) (raw []byte, name string, err error) {
	line, err := r.ReadBytes('\n')
	if err != nil {
		return nil, "", err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, "", fmt.Errorf("redistest: proxy: malformed line %q", line)
	}
	raw = line
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+', '-', ':', '_', ',', '#', '(':
		return raw, "", nil
	case '$', '!', '=':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return raw, "", err // -1: a null
		}
		data := make([]byte, n+2)
		if _, err := io.ReadFull(r, data); err != nil {
			return nil, "", err
		}
		return append(raw, data...), "", nil
	case '*', '~', '>', '%', '|':
		n, err := strconv.Atoi(body)
		if err != nil || n < 0 {
			return raw, "", err
		}
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for i := range n {
			elem, _, err := readValue(r)
			if err != nil {
				return nil, "", err
			}
			if i == 0 && line[0] == '*' && elem[0] == '$' {
				_, s, _ := strings.Cut(string(elem), "\r\n")
				name = strings.ToUpper(strings.TrimSuffix(s, "\r\n"))
			}
			raw = append(raw, elem...)
		}
		if line[0] == '|' {
			// Attributes precede the value they describe.
			v, _, err := readValue(r)
			return append(raw, v...), name, err
		}
		return raw, name, nil
	}
	return nil, "", errors.New("redistest: proxy: unknown RESP type " + strconv.Quote(string(line[:1])))
}
