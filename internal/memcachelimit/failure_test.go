package memcachelimit_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// A server down fails the calls that need it, with errors wrapping
// ErrStore so that the service's failure policy applies; the counters the
// call took on servers that answered are given back; health follows; and
// a restarted server serves again.
func TestServerDown(t *testing.T) {
	servers, addrs := start(t, 2)
	clk := newClock(t0)
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now, Timeout: 500 * time.Millisecond})
	if err := l.Probe(context.Background()); err != nil || !l.Healthy() {
		t.Fatalf("Probe = %v, healthy %v", err, l.Healthy())
	}
	// One counter on each server.
	var on [2]limit.Hit
	for i, found := 0, 0; found < 3; i++ {
		h := limit.Hit{Key: "down" + strconv.Itoa(i), Spec: fixed(10, time.Minute), Cost: 1}
		evaluate(t, l, h)
		_, at, _ := counterOn(t, servers, "", h, clk.t)
		if on[at].Key == "" {
			on[at] = h
			found |= 1 << at
		}
	}
	servers[1].Stop()
	ds := make([]limit.Decision, 2)
	_, err := l.Evaluate(context.Background(), []limit.Hit{on[0], on[1]}, ds)
	if !errors.Is(err, memcachelimit.ErrStore) {
		t.Fatalf("Evaluate with a server down = %v, want ErrStore", err)
	}
	if !strings.Contains(err.Error(), servers[1].Addr) {
		t.Errorf("error %q does not name the server", err)
	}
	if v, _, _ := counterOn(t, servers[:1], "", on[0], clk.t); v != "1" {
		t.Fatalf("the live server's counter is %q after a failed call, want 1: it was not given back", v)
	}
	if l.Healthy() {
		t.Fatal("healthy with a server down")
	}
	if _, lerr := l.LastFailure(); lerr == nil {
		t.Fatal("no last failure")
	}
	if err := l.Probe(context.Background()); !errors.Is(err, memcachelimit.ErrStore) {
		t.Fatalf("Probe = %v, want ErrStore", err)
	}
	// Counters on the live server are still decided.
	if d := evaluate(t, l, on[0])[0]; !d.Allowed || d.Remaining != 8 {
		t.Fatalf("live server: %+v", d)
	}
	servers[1].Restart()
	if err := l.Probe(context.Background()); err != nil || !l.Healthy() {
		t.Fatalf("after restart: Probe = %v, healthy %v", err, l.Healthy())
	}
	// The restarted server is empty: its counter starts again.
	if d := evaluate(t, l, on[1])[0]; !d.Allowed || d.Remaining != 9 {
		t.Fatalf("restarted server: %+v", d)
	}
}

// A server that accepts connections and never answers costs a call its
// deadline, not more, and the error says so.
func TestServerSilent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held sync.WaitGroup
	held.Go(func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	})
	l := newLimiter(t, []string{ln.Addr().String()}, memcachelimit.Options{Timeout: 100 * time.Millisecond})
	begin := time.Now()
	_, err = l.Evaluate(context.Background(), []limit.Hit{{Key: "k", Spec: fixed(1, time.Minute), Cost: 1}}, make([]limit.Decision, 1))
	if !errors.Is(err, memcachelimit.ErrStore) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Evaluate = %v, want ErrStore and the deadline", err)
	}
	if d := time.Since(begin); d > time.Second {
		t.Fatalf("Evaluate took %v with a 100ms timeout", d)
	}
	if l.Healthy() {
		t.Fatal("healthy with a silent server")
	}
	ln.Close()
	held.Wait()
}

// A counter holding what incr cannot count fails its call with ErrStore,
// leaves the server healthy (it answered) and the connection in use.
func TestForeignValue(t *testing.T) {
	servers, addrs := start(t, 1)
	clk := newClock(t0)
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now, MaxIdleConns: 1})
	h := limit.Hit{Key: "k", Spec: fixed(5, time.Minute), Cost: 1}
	start, _ := h.Spec.WindowAt(clk.t)
	if _, err := servers[0].Do("set " + string(memcachelimit.AppendKey(nil, "", start.UnixMicro(), h.Key)) + " 0 60 3\r\nabc"); err != nil {
		t.Fatal(err)
	}
	_, err := l.Evaluate(context.Background(), []limit.Hit{h}, make([]limit.Decision, 1))
	if !errors.Is(err, memcachelimit.ErrStore) || !strings.Contains(err.Error(), "non-numeric") {
		t.Fatalf("Evaluate = %v, want ErrStore with memcached's answer", err)
	}
	if !l.Healthy() {
		t.Fatal("unhealthy after the server answered")
	}
	if d := evaluate(t, l, limit.Hit{Key: "other", Spec: h.Spec, Cost: 1})[0]; !d.Allowed {
		t.Fatalf("%+v", d)
	}
}

// A caller that has gone away gets its context's error, and says nothing
// of the servers' health.
func TestCanceled(t *testing.T) {
	_, addrs := start(t, 1)
	l := newLimiter(t, addrs, memcachelimit.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := l.Evaluate(ctx, []limit.Hit{{Key: "k", Spec: fixed(1, time.Minute), Cost: 1}}, make([]limit.Decision, 1))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Evaluate = %v, want context.Canceled", err)
	}
	if !l.Healthy() {
		t.Fatal("unhealthy after a canceled call")
	}
}
