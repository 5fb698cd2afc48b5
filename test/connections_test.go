package test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What clients that open a socket and go quiet send: nothing, part of
// gRPC's HTTP/2 preface (mid-handshake), the whole preface and an empty
// SETTINGS frame (a finished handshake, then silence), part of an HTTP
// request's headers, or the headers and part of a /json body.
var (
	silentNothing  = ""
	silentPreface  = "PRI * HTTP/2.0\r\n"
	silentSettings = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + "\x00\x00\x00\x04\x00\x00\x00\x00\x00"
	silentHeaders  = "POST /json HTTP/1.1\r\nHost: floodgate\r\n"
	silentBody     = "POST /json HTTP/1.1\r\nHost: floodgate\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"domain\":"
)

// openSilent opens n connections to addr, writes first on each and
// nothing more. They are closed when the test ends.
func openSilent(t *testing.T, addr string, n int, first string) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	for range n {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s (%d open): %v", addr, len(conns), err)
		}
		t.Cleanup(func() { c.Close() })
		if first != "" {
			if _, err := io.WriteString(c, first); err != nil {
				t.Fatal(err)
			}
		}
		conns = append(conns, c)
	}
	return conns
}

// closedBy reads each connection until the server closes it or until
// deadline, and returns how many the server had not closed by then and
// when the last one closed.
func closedBy(conns []net.Conn, deadline time.Time) (open int, last time.Time) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(deadline)
			_, err := io.Copy(io.Discard, c) // the server may answer before it closes
			mu.Lock()
			defer mu.Unlock()
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				open++
				return
			}
			if now := time.Now(); now.After(last) {
				last = now
			}
		})
	}
	wg.Wait()
	return open, last
}

// TestShutdownCutsSilentConnections: after -shutdown-timeout, the process
// exits whatever connections are open (silent, mid-handshake, finished
// handshake then silent, a half-sent /json body), exit code 0 when every
// request in flight got its answer, 1 when the timeout cut one.
func TestShutdownCutsSilentConnections(t *testing.T) {
	t.Parallel()
	const timeout = 2 * time.Second
	// margin covers the process's exit and the test's polling.
	const margin = 1500 * time.Millisecond
	for _, tc := range []struct {
		name string
		// held holds a request in Redis past the timeout.
		held     bool
		wantCode int
	}{
		{"silent connections and a busy client", false, 0},
		{"a request held past the timeout", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
			// The held request needs Redis to hold it; the other case runs
			// on the in-memory store, so that nothing but the connections
			// can hold the exit.
			b := backends[1]
			if tc.held {
				b = backends[0]
			}
			args, redis := b.args(t)
			p := start(t, options{args: append(args, "-config", dir, "-shutdown-timeout", timeout.String(), "-redis-deadline", "20s")})
			p.mustCall(request("e2e", desc("user", "warm")))
			openSilent(t, p.GRPCAddr, 200, silentNothing)
			openSilent(t, p.GRPCAddr, 5, silentPreface)
			openSilent(t, p.GRPCAddr, 5, silentSettings)
			openSilent(t, p.HTTPAddr, 5, silentBody)

			// A busy client: calls back to back until the server goes.
			stop := make(chan struct{})
			var busy sync.WaitGroup
			var mu sync.Mutex
			ok, failures := 0, map[string]int{}
			var lastFailure time.Time // when the last busy worker stopped
			for w := range 4 {
				busy.Go(func() {
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_, err := p.call(request("e2e", desc("user", fmt.Sprintf("busy-%d-%d", w, i))))
						mu.Lock()
						if err == nil {
							ok++
						} else {
							failures[status.Code(err).String()]++
							lastFailure = time.Now()
						}
						mu.Unlock()
						if err != nil {
							return // the server is going; later calls would only fail faster
						}
					}
				})
			}
			var held chan error
			if tc.held {
				if _, err := redis.Do("CLIENT", "PAUSE", "8000", "ALL"); err != nil {
					t.Fatal(err)
				}
				held = make(chan error, 1)
				go func() {
					_, err := p.call(request("e2e", desc("user", "held")))
					held <- err
				}()
			}
			time.Sleep(300 * time.Millisecond)

			sent := time.Now()
			p.signal(syscall.SIGTERM)
			code := p.wait(timeout + 10*time.Second)
			took := time.Since(sent)
			close(stop)
			busy.Wait()
			if took > timeout+margin {
				t.Errorf("exited %v after SIGTERM, want within %v (-shutdown-timeout %v):\n%s", took.Round(time.Millisecond), timeout+margin, timeout, p.Logs)
			}
			if code != tc.wantCode {
				t.Errorf("exit code %d, want %d:\n%s", code, tc.wantCode, p.Logs)
			}
			mu.Lock()
			defer mu.Unlock()
			if ok == 0 && !tc.held {
				t.Errorf("the busy client got no answer")
			}
			// The GOAWAY reaches the busy client well before the timeout,
			// silent and stalled connections notwithstanding: a client
			// still sending when the timeout cuts is what a drain is for
			// avoiding.
			if stopped := lastFailure.Sub(sent); !tc.held && stopped >= timeout {
				t.Errorf("the busy client was still served %v after SIGTERM, at the timeout: no GOAWAY in time", stopped.Round(time.Millisecond))
			}
			for c, n := range failures {
				// Calls after the GOAWAY find no server: Unavailable. Any
				// other failure is a call in flight that got no answer.
				if c != codes.Unavailable.String() && !tc.held {
					t.Errorf("busy client: %d calls failed with %s", n, c)
				}
			}
			if tc.held {
				if err := <-held; status.Code(err) != codes.Unavailable {
					t.Errorf("held request: %v, want Unavailable (cut)", err)
				}
				if !strings.Contains(p.Logs.String(), "cutting in-flight requests") {
					t.Errorf("no log of the cut request:\n%s", p.Logs)
				}
			}
			t.Logf("exit %d after %v; busy client: %d answered, failures %v", code, took.Round(time.Millisecond), ok, failures)
		})
	}
}

// TestSlowClientsReaped: hundreds of sockets that stop mid-request
// (half-sent /json bodies and headers, silent gRPC connections before,
// during and after the handshake) are closed within their timeouts (set
// low by flags), while /healthcheck and a real gRPC client keep being
// answered.
func TestSlowClientsReaped(t *testing.T) {
	t.Parallel()
	const (
		readTimeout = time.Second // -http-read-timeout and -grpc-connection-timeout
		keepalive   = time.Second // -grpc-keepalive-time and -grpc-keepalive-timeout
		margin      = 2 * time.Second
	)
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	p := start(t, options{args: []string{"-config", dir,
		"-http-read-timeout", readTimeout.String(), "-grpc-connection-timeout", readTimeout.String(),
		"-grpc-keepalive-time", keepalive.String(), "-grpc-keepalive-timeout", keepalive.String()}})
	p.mustCall(request("e2e", desc("user", "warm")))

	opened := time.Now()
	groups := []struct {
		what  string
		conns []net.Conn
		bound time.Duration
	}{
		{"half-sent /json bodies", openSilent(t, p.HTTPAddr, 250, silentBody), readTimeout},
		{"half-sent HTTP headers", openSilent(t, p.HTTPAddr, 50, silentHeaders), readTimeout},
		{"silent gRPC connections", openSilent(t, p.GRPCAddr, 150, silentNothing), readTimeout},
		{"gRPC connections stopped mid-preface", openSilent(t, p.GRPCAddr, 150, silentPreface), readTimeout},
		{"gRPC connections silent after the handshake", openSilent(t, p.GRPCAddr, 50, silentSettings), 2 * keepalive},
	}

	// Meanwhile the real clients are served.
	done := make(chan struct{})
	served := make(chan string, 1)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				served <- fmt.Sprintf("%d rounds", n)
				return
			default:
			}
			start := time.Now()
			if code, body := p.httpGet("/healthcheck"); code != http.StatusOK {
				served <- fmt.Sprintf("/healthcheck: %d %s", code, body)
				return
			}
			if _, err := p.call(request("e2e", desc("user", fmt.Sprintf("real-%d", n)))); err != nil {
				served <- fmt.Sprintf("gRPC client: %v", err)
				return
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				served <- fmt.Sprintf("a round of /healthcheck and a call took %v", d)
				return
			}
			n++
			time.Sleep(20 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	results := make([]string, len(groups))
	for i, g := range groups {
		wg.Go(func() {
			open, last := closedBy(g.conns, opened.Add(g.bound+margin))
			results[i] = fmt.Sprintf("%s: %d of %d still open after %v; the last closed %v after opening",
				g.what, open, len(g.conns), g.bound+margin, last.Sub(opened).Round(10*time.Millisecond))
			if open > 0 {
				t.Error(results[i])
			}
		})
	}
	wg.Wait()
	close(done)
	if s := <-served; !strings.HasSuffix(s, "rounds") || s == "0 rounds" {
		t.Errorf("real clients while the slow ones were open: %s", s)
	}
	for _, r := range results {
		t.Log(r)
	}
	if n := p.metric(`floodgate_connections_open{listener="grpc"}`); n > 1 {
		t.Errorf("%v gRPC connections still open, want only the real client's", n)
	}
}

// TestConnectionCap: with the gRPC listener at -grpc-max-connections,
// one more connection is closed at once and counted, while the open ones
// keep being served and /healthcheck, on its own listener, answers.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	const maxConns = 40
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"e2e.yaml": e2eRules})
	p := start(t, options{args: []string{"-config", dir, "-grpc-max-connections", fmt.Sprint(maxConns),
		"-grpc-connection-timeout", "1m"}})
	p.mustCall(request("e2e", desc("user", "warm"))) // the real client holds one connection
	openSilent(t, p.GRPCAddr, maxConns-1, silentNothing)
	eventually(t, 5*time.Second, func() string {
		if n := p.metric(`floodgate_connections_open{listener="grpc"}`); n != maxConns {
			return fmt.Sprintf("%v gRPC connections open, want %d", n, maxConns)
		}
		return ""
	})

	over := openSilent(t, p.GRPCAddr, 20, silentNothing)
	if open, _ := closedBy(over, time.Now().Add(time.Second)); open > 0 {
		t.Errorf("%d of %d connections over the bound still open after 1s", open, len(over))
	}
	if n := p.metric(`floodgate_connections_refused_total{listener="grpc"}`); n != float64(len(over)) {
		t.Errorf("floodgate_connections_refused_total{grpc} = %v, want %d", n, len(over))
	}
	if code, body := p.httpGet("/healthcheck"); code != http.StatusOK {
		t.Errorf("/healthcheck with the gRPC listener full: %d %s", code, body)
	}
	p.mustCall(request("e2e", desc("user", "after")))
	if !strings.Contains(p.Logs.String(), "the listener has its maximum of open connections") {
		t.Errorf("no log of the refusal:\n%s", p.Logs)
	}
}

// TestEnvoyKeepalivePings: Envoy's connection to floodgate, pinging at
// its connection_keepalive interval with no call in between, is not cut by
// floodgate's ping enforcement when -grpc-min-ping-interval is below the
// interval (as the defaults are: 1s against any interval an operator
// sets), and is when it is above (which shows the pings were sent).
func TestEnvoyKeepalivePings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		minPing  string
		wantKept bool
	}{
		{"250ms", true},
		{"3s", false},
	} {
		t.Run("min-ping-interval "+tc.minPing, func(t *testing.T) {
			t.Parallel()
			p := start(t, options{args: []string{"-config", filepath.Join(repoRoot, "config"),
				"-grpc-min-ping-interval", tc.minPing, "-grpc-keepalive-time", "300ms", "-grpc-keepalive-timeout", "1s"}})
			f := startEnvoy(t, replace(t, "http2_protocol_options: {}",
				"http2_protocol_options: {connection_keepalive: {interval: 0.5s, timeout: 1s}}"), p.GRPCAddr)
			f.waitHealthy(t, 1, 15*time.Second)
			if o := f.ask("203.0.113.7"); !strings.HasPrefix(o.answer, "200 ") || strings.HasSuffix(o.answer, " -") {
				t.Fatalf("first request through envoy: %s", o.answer)
			}
			// Idle for about eight of Envoy's intervals and ten of
			// floodgate's.
			time.Sleep(4 * time.Second)
			o := f.ask("203.0.113.7")
			c, err := f.Counters("cluster.floodgate.")
			if err != nil {
				t.Fatal(err)
			}
			cut := c["cluster.floodgate.upstream_cx_close_notify"] + c["cluster.floodgate.upstream_cx_destroy_remote"]
			t.Logf("answer %s; envoy: close_notify %d, destroy_remote %d, cx_total %d", o.answer,
				c["cluster.floodgate.upstream_cx_close_notify"], c["cluster.floodgate.upstream_cx_destroy_remote"], c["cluster.floodgate.upstream_cx_total"])
			if kept := cut == 0; kept != tc.wantKept {
				t.Errorf("connections closed by floodgate: %d (want kept: %v)\nfloodgate:\n%s", cut, tc.wantKept, p.Logs)
			}
			if tc.wantKept && (!strings.HasPrefix(o.answer, "200 ") || strings.HasSuffix(o.answer, " -")) {
				t.Errorf("request after the idle pings: %s", o.answer)
			}
		})
	}
}
