package memcachelimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/pkg/limit"
)

// t0 is a window start for the tests that fix the clock: 10 s into a
// minute.
var t0 = time.Date(2026, 5, 4, 12, 0, 10, 0, time.UTC)

// One window's hits, one call after the other: costs (hits_addend),
// refunds (is_negative_hits) and peeks (cost 0), each decided as
// limit.Memory would and leaving the counter Memcached holds as the
// decisions say.
func TestSequences(t *testing.T) {
	servers, addrs := start(t, 1)
	spec := fixed(10, time.Minute)
	type step struct {
		hit     limit.Hit
		want    limit.Decision
		counter string // the counter's value after the step; "" for none
	}
	reset := 50 * time.Second
	hit := func(cost int64) limit.Hit { return limit.Hit{Key: "k", Spec: spec, Cost: cost} }
	refund := func(cost int64) limit.Hit { return limit.Hit{Key: "k", Spec: spec, Cost: cost, Refund: true} }
	tests := []struct {
		name  string
		steps []step
	}{
		{"hits_addend above 1", []step{
			{hit(3), limit.Decision{Allowed: true, Remaining: 7, ResetAfter: reset}, "3"},
			{hit(3), limit.Decision{Allowed: true, Remaining: 4, ResetAfter: reset}, "6"},
			{hit(3), limit.Decision{Allowed: true, Remaining: 1, ResetAfter: reset}, "9"},
			{hit(3), limit.Decision{Remaining: 1, ResetAfter: reset, RetryAfter: reset}, "9"},
			{hit(1), limit.Decision{Allowed: true, Remaining: 0, ResetAfter: reset}, "10"},
			{hit(1), limit.Decision{Remaining: 0, ResetAfter: reset, RetryAfter: reset}, "10"},
		}},
		{"a cost above the limit never passes and takes nothing", []step{
			{hit(2), limit.Decision{Allowed: true, Remaining: 8, ResetAfter: reset}, "2"},
			{hit(11), limit.Decision{Remaining: 8, ResetAfter: reset, Never: true}, "2"},
		}},
		{"refunds give back, never below zero", []step{
			{hit(6), limit.Decision{Allowed: true, Remaining: 4, ResetAfter: reset}, "6"},
			{refund(4), limit.Decision{Allowed: true, Remaining: 8, ResetAfter: reset}, "2"},
			{refund(5), limit.Decision{Allowed: true, Remaining: 10, ResetAfter: reset}, "0"},
			{hit(10), limit.Decision{Allowed: true, Remaining: 0, ResetAfter: reset}, "10"},
		}},
		{"a refund of a counter that does not exist creates none", []step{
			{refund(3), limit.Decision{Allowed: true, Remaining: 10, ResetAfter: reset}, ""},
		}},
		{"a peek creates nothing and reports what is left", []step{
			{hit(0), limit.Decision{Allowed: true, Remaining: 10, ResetAfter: reset}, ""},
			{hit(4), limit.Decision{Allowed: true, Remaining: 6, ResetAfter: reset}, "4"},
			{hit(0), limit.Decision{Allowed: true, Remaining: 6, ResetAfter: reset}, "4"},
		}},
		{"a peek at a counter above a lowered limit is denied", []step{
			{hit(8), limit.Decision{Allowed: true, Remaining: 2, ResetAfter: reset}, "8"},
			{limit.Hit{Key: "k", Spec: fixed(5, time.Minute)}, limit.Decision{Remaining: 0, Debt: 3, ResetAfter: reset, RetryAfter: reset}, "8"},
		}},
		{"limit 0 never touches the store", []step{
			{limit.Hit{Key: "k", Spec: fixed(0, time.Minute), Cost: 1}, limit.Decision{Never: true}, ""},
			{limit.Hit{Key: "k", Spec: fixed(0, time.Minute)}, limit.Decision{Allowed: true}, ""},
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock(t0)
			prefix := "seq" + strconv.Itoa(i) + "_"
			l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now, KeyPrefix: prefix})
			for j, s := range tt.steps {
				if got := evaluate(t, l, s.hit)[0]; got != s.want {
					t.Fatalf("step %d: %+v\n got %+v\nwant %+v", j, s.hit, got, s.want)
				}
				if got, _, _ := counterOn(t, servers, prefix, s.hit, clk.t); got != s.counter {
					t.Fatalf("step %d: counter %q, want %q", j, got, s.counter)
				}
			}
		})
	}
}

// N concurrent callers on one counter, spread over several servers with
// other counters, admit exactly the limit, and the counter ends at what
// was admitted: no refused call leaves a charge behind.
func TestConcurrentCallersAdmitExactlyTheLimit(t *testing.T) {
	servers, addrs := start(t, 3)
	clk := newClock(t0) // fixed: one window for the whole test
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now})
	hot := limit.Hit{Key: "hot", Spec: fixed(100, time.Minute), Cost: 1}
	const callers, calls = 16, 20
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for g := range callers {
		wg.Go(func() {
			// Each call also charges a counter of its own caller, which
			// never denies, on whichever server it hashes to.
			own := limit.Hit{Key: "caller" + strconv.Itoa(g), Spec: fixed(1000, time.Minute), Cost: 1}
			for range calls {
				ds := make([]limit.Decision, 2)
				if _, err := l.Evaluate(context.Background(), []limit.Hit{own, hot}, ds); err != nil {
					errs <- err
					return
				}
				if ds[1].Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := admitted.Load(); n != hot.Spec.Limit {
		t.Fatalf("%d calls admitted, want exactly %d", n, hot.Spec.Limit)
	}
	if v, _, _ := counterOn(t, servers, "", hot, clk.t); v != "100" {
		t.Fatalf("hot counter %q, want 100", v)
	}
	// A call that was refused by the hot counter consumed nothing from its
	// caller's counter either.
	var owned int
	for g := range callers {
		v, _, _ := counterOn(t, servers, "", limit.Hit{Key: "caller" + strconv.Itoa(g), Spec: fixed(1000, time.Minute)}, clk.t)
		n, _ := strconv.Atoi(v)
		owned += n
	}
	if owned != 100 {
		t.Fatalf("callers' counters sum to %d, want the 100 admitted calls", owned)
	}
}

// Costs above 1 under contention: a refused call's increment is visible to
// others until it is given back, so fewer may pass than would fit, but
// never more, and no charge is left behind: afterwards, the window fills
// to exactly its limit.
func TestConcurrentCostsNeverOverAdmit(t *testing.T) {
	servers, addrs := start(t, 2)
	clk := newClock(t0)
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now})
	spec := fixed(200, time.Minute)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			h := limit.Hit{Key: "k", Spec: spec, Cost: int64(1 + g%3)}
			for range 30 {
				ds := make([]limit.Decision, 1)
				if _, err := l.Evaluate(context.Background(), []limit.Hit{h}, ds); err != nil {
					t.Error(err)
					return
				}
				if ds[0].Allowed {
					admitted.Add(h.Cost)
				}
			}
		})
	}
	wg.Wait()
	n := admitted.Load()
	if n > spec.Limit {
		t.Fatalf("admitted %d, above the limit %d", n, spec.Limit)
	}
	if v, _, _ := counterOn(t, servers, "", limit.Hit{Key: "k", Spec: spec}, clk.t); v != strconv.FormatInt(n, 10) {
		t.Fatalf("counter %q, want the %d admitted", v, n)
	}
	for ; n < spec.Limit; n++ {
		if !evaluate(t, l, limit.Hit{Key: "k", Spec: spec, Cost: 1})[0].Allowed {
			t.Fatalf("denied at %d of %d", n, spec.Limit)
		}
	}
	if evaluate(t, l, limit.Hit{Key: "k", Spec: spec, Cost: 1})[0].Allowed {
		t.Fatal("admitted beyond the limit")
	}
}

// The hits of one call decide together, also when their counters live on
// different servers: a denial anywhere leaves every counter as it was.
func TestAllOrNothingAcrossServers(t *testing.T) {
	servers, addrs := start(t, 3)
	clk := newClock(t0)
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now})
	wide := limit.Hit{Key: "wide", Spec: fixed(10, time.Minute), Cost: 1}
	evaluate(t, l, wide)
	_, wideAt, _ := counterOn(t, servers, "", wide, clk.t)
	// A narrow counter on another server than the wide one.
	var narrow limit.Hit
	for i := 0; ; i++ {
		narrow = limit.Hit{Key: "narrow" + strconv.Itoa(i), Spec: fixed(2, time.Minute), Cost: 1}
		evaluate(t, l, narrow)
		if _, at, _ := counterOn(t, servers, "", narrow, clk.t); at != wideAt {
			break
		}
	}
	reset := 50 * time.Second
	if ds := evaluate(t, l, wide, narrow); !ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("%+v", ds)
	}
	// wide 2, narrow 2 (full): the next calls are refused whole.
	for _, order := range [][]limit.Hit{{wide, narrow}, {narrow, wide}} {
		ds := evaluate(t, l, order...)
		w, n := ds[0], ds[1]
		if order[0].Key != wide.Key {
			w, n = n, w
		}
		wantW := limit.Decision{Allowed: true, Remaining: 8, ResetAfter: reset}
		wantN := limit.Decision{Remaining: 0, ResetAfter: reset, RetryAfter: reset}
		if w != wantW || n != wantN {
			t.Fatalf("order %s first: wide %+v, narrow %+v; want %+v, %+v", order[0].Key, w, n, wantW, wantN)
		}
		if v, _, _ := counterOn(t, servers, "", wide, clk.t); v != "2" {
			t.Fatalf("wide counter %q after a refused call, want 2", v)
		}
	}
	// An advisory hit's denial blocks nothing: the call consumes the
	// others, and the advisory counter is left as it was.
	shadow := narrow
	shadow.Mode = limit.Advisory
	ds := evaluate(t, l, wide, shadow)
	if !ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("%+v", ds)
	}
	if v, _, _ := counterOn(t, servers, "", wide, clk.t); v != "3" {
		t.Fatalf("wide counter %q, want 3", v)
	}
	if v, _, _ := counterOn(t, servers, "", narrow, clk.t); v != "2" {
		t.Fatalf("narrow counter %q, want 2", v)
	}
	// Quotas, decided in the first round trip's replies: one over while
	// another is not blocks nothing, and the denied one's increment is
	// given back; every quota over blocks the call.
	q1, q2 := narrow, wide
	q1.Mode, q1.Group = limit.Quota, 1
	q2.Mode, q2.Group = limit.Quota, 2
	if ds := evaluate(t, l, q1, q2); ds[0].Allowed || !ds[1].Allowed {
		t.Fatalf("one quota over: %+v", ds)
	}
	if v, _, _ := counterOn(t, servers, "", wide, clk.t); v != "4" {
		t.Fatalf("wide counter %q after one quota over, want 4 (charged)", v)
	}
	if v, _, _ := counterOn(t, servers, "", narrow, clk.t); v != "2" {
		t.Fatalf("narrow counter %q after one quota over, want 2 (given back)", v)
	}
	q2.Spec.Limit = 4 // now over too
	if ds := evaluate(t, l, q1, q2, wide); ds[0].Allowed || ds[1].Allowed || !ds[2].Allowed {
		t.Fatalf("every quota over: %+v", ds)
	}
	if v, _, _ := counterOn(t, servers, "", wide, clk.t); v != "4" {
		t.Fatalf("wide counter %q after every quota over, want 4 (nothing consumed)", v)
	}
}

// Counters spread over the servers, each window on exactly one.
func TestKeysSpreadOverServers(t *testing.T) {
	servers, addrs := start(t, 3)
	clk := newClock(t0)
	l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now})
	per := make([]int, len(servers))
	for i := range 90 {
		h := limit.Hit{Key: "spread" + strconv.Itoa(i), Spec: fixed(5, time.Minute), Cost: 1}
		evaluate(t, l, h)
		_, at, holders := counterOn(t, servers, "", h, clk.t)
		if holders != 1 {
			t.Fatalf("%s is held by %d servers", h.Key, holders)
		}
		per[at]++
	}
	for i, n := range per {
		if n < 15 {
			t.Errorf("server %d holds %d of 90 counters: %v", i, n, per)
		}
	}
}

// A counter expires a little after its window ends (never before), as a
// number of seconds or, beyond 30 days, as a Unix time.
func TestExpiry(t *testing.T) {
	servers, addrs := start(t, 1)
	ttl := func(prefix string, h limit.Hit, now time.Time) int {
		t.Helper()
		start, _ := h.Spec.WindowAt(now)
		reply, err := servers[0].Do("mg " + string(memcachelimit.AppendKey(nil, prefix, start.UnixMicro(), h.Key)) + " t")
		if err != nil {
			t.Fatal(err)
		}
		var secs int
		if _, err := fmt.Sscanf(reply, "HD t%d", &secs); err != nil {
			t.Fatalf("mg reply %q: %v", reply, err)
		}
		return secs
	}
	t.Run("seconds", func(t *testing.T) {
		clk := newClock(t0.Add(500 * time.Millisecond)) // 49.5 s before the window ends
		l := newLimiter(t, addrs, memcachelimit.Options{Now: clk.now, KeyPrefix: "s"})
		h := limit.Hit{Key: "k", Spec: fixed(5, time.Minute), Cost: 1}
		evaluate(t, l, h)
		if got := ttl("s", h, clk.t); got < 50 || got > 51 {
			t.Fatalf("ttl %d s, want 51 (50 rounded up, and a second for Memcached's clock)", got)
		}
	})
	t.Run("Unix time beyond 30 days", func(t *testing.T) {
		l := newLimiter(t, addrs, memcachelimit.Options{KeyPrefix: "y"})
		now := time.Now()
		// A window that ends more than 30 days from now.
		h := limit.Hit{Key: "k", Spec: fixed(5, 365*24*time.Hour), Cost: 1}
		for _, end := h.Spec.WindowAt(now); end.Sub(now) < 31*24*time.Hour; _, end = h.Spec.WindowAt(now) {
			h.Spec.Window += 365 * 24 * time.Hour
		}
		evaluate(t, l, h)
		_, end := h.Spec.WindowAt(now)
		want := int(end.Sub(now).Seconds()) + 60
		if got := ttl("y", h, now); got < want-3 || got > want+3 {
			t.Fatalf("ttl %d s, want about %d (the window's end and a minute)", got, want)
		}
	})
	t.Run("a one-second window's counter is gone two seconds later", func(t *testing.T) {
		l := newLimiter(t, addrs, memcachelimit.Options{KeyPrefix: "r"})
		h := limit.Hit{Key: "k", Spec: fixed(5, time.Second), Cost: 1}
		now := time.Now()
		evaluate(t, l, h)
		_, end := h.Spec.WindowAt(now)
		for {
			_, _, holders := counterOn(t, servers, "r", h, now)
			switch {
			case holders == 0 && time.Now().Before(end):
				t.Fatal("the counter expired before its window ended")
			case holders == 0:
				return
			case time.Since(end) > 2500*time.Millisecond:
				t.Fatalf("the counter outlives its window by %v", time.Since(end))
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// Hits Memcached cannot decide are refused before any server is asked
// (here there is none), with errors the service reports as its own
// mistake, not as a store failure.
func TestRefusedHits(t *testing.T) {
	l := newLimiter(t, []string{"127.0.0.1:1"}, memcachelimit.Options{})
	tests := []struct {
		name string
		hit  limit.Hit
		is   []error
	}{
		{"token bucket", limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.TokenBucket, Limit: 5, Window: time.Second}, Cost: 1},
			[]error{memcachelimit.ErrUnsupported, limit.ErrInvalidSpec}},
		{"sliding window", limit.Hit{Key: "k", Spec: limit.Spec{Algorithm: limit.SlidingWindow, Limit: 5, Window: time.Second}, Cost: 1},
			[]error{memcachelimit.ErrUnsupported, limit.ErrInvalidSpec}},
		{"negative cost", limit.Hit{Key: "k", Spec: fixed(5, time.Second), Cost: -1}, []error{limit.ErrInvalidSpec}},
		{"no window", limit.Hit{Key: "k", Spec: fixed(5, 0), Cost: 1}, []error{limit.ErrInvalidSpec}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok := limit.Hit{Key: "fine", Spec: fixed(5, time.Second), Cost: 1}
			_, err := l.Evaluate(context.Background(), []limit.Hit{ok, tt.hit}, make([]limit.Decision, 2))
			for _, want := range tt.is {
				if !errors.Is(err, want) {
					t.Errorf("error %v does not wrap %v", err, want)
				}
			}
			if errors.Is(err, memcachelimit.ErrStore) || !strings.Contains(fmt.Sprint(err), "hit 1") {
				t.Errorf("error %v: want the hit's index and no store failure", err)
			}
			if tt.name == "negative cost" && !strings.Contains(fmt.Sprint(err), "hit 1: negative cost: -1") {
				t.Errorf("error %v: want it to name the negative cost", err)
			}
		})
	}
	if _, err := l.Evaluate(context.Background(), make([]limit.Hit, 1), nil); err == nil {
		t.Error("no error for 0 decisions for 1 hit")
	}
}

func TestNewOptions(t *testing.T) {
	tests := []struct {
		name string
		opts memcachelimit.Options
		want string // in the error; "" for none
	}{
		{"servers", memcachelimit.Options{Servers: []string{"127.0.0.1:11211", "cache:11211"}}, ""},
		{"nothing", memcachelimit.Options{}, "memcachelimit.Options.Servers and memcachelimit.Options.SRV are empty: give one"},
		{"both", memcachelimit.Options{Servers: []string{"a:1"}, SRV: "_memcache._tcp.example"}, "not both"},
		{"no port", memcachelimit.Options{Servers: []string{"cache"}}, `memcachelimit.Options.Servers "cache": want host:port`},
		{"prefix with a space", memcachelimit.Options{Servers: []string{"a:1"}, KeyPrefix: "a b"}, "printable ASCII without spaces"},
		{"prefix too long", memcachelimit.Options{Servers: []string{"a:1"}, KeyPrefix: strings.Repeat("p", 129)}, "longer than 128"},
		{"negative timeout", memcachelimit.Options{Servers: []string{"a:1"}, Timeout: -1}, "memcachelimit.Options.Timeout -1ns: must not be negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := memcachelimit.New(context.Background(), tt.opts)
			if err == nil {
				l.Close()
			}
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("New = %v, want %q", err, tt.want)
			}
		})
	}
}

// The servers come from DNS SRV records, resolved at start and followed
// when they change.
func TestSRV(t *testing.T) {
	servers, _ := start(t, 3)
	dns := memcachedtest.StartDNS(t)
	const name = "_memcache._tcp.floodgate.test."
	record := func(s *memcachedtest.Server) memcachedtest.SRV {
		_, port, _ := net.SplitHostPort(s.Addr)
		p, _ := strconv.Atoi(port)
		return memcachedtest.SRV{Target: "localhost.", Port: uint16(p)}
	}
	hostPort := func(s *memcachedtest.Server) string {
		_, port, _ := net.SplitHostPort(s.Addr)
		return "localhost:" + port
	}
	dns.SetSRV(name, record(servers[0]), record(servers[1]))
	l, err := memcachelimit.New(context.Background(), memcachelimit.Options{
		SRV: name, SRVRefresh: 50 * time.Millisecond, Resolver: dns.Resolver(), Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	want := []string{hostPort(servers[0]), hostPort(servers[1])}
	if got := l.Servers(); strings.Join(got, ",") != strings.Join(slices.Sorted(slices.Values(want)), ",") {
		t.Fatalf("servers %v, want %v", got, want)
	}
	if d := evaluate(t, l, limit.Hit{Key: "k", Spec: fixed(5, time.Minute), Cost: 1})[0]; !d.Allowed {
		t.Fatalf("%+v", d)
	}
	dns.SetSRV(name, record(servers[0]), record(servers[1]), record(servers[2]))
	want = append(want, hostPort(servers[2]))
	for deadline := time.Now().Add(5 * time.Second); strings.Join(l.Servers(), ",") != strings.Join(slices.Sorted(slices.Values(want)), ","); {
		if time.Now().After(deadline) {
			t.Fatalf("servers %v, want %v after a refresh", l.Servers(), want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A name without records: refused at start, and a failed refresh
	// keeps the servers in force.
	if _, err := memcachelimit.New(context.Background(), memcachelimit.Options{SRV: "_none._tcp.floodgate.test.", Resolver: dns.Resolver()}); err == nil {
		t.Fatal("New with an unknown SRV name succeeded")
	}
	// Refreshes run one after another, every 50 ms, each given a second
	// to resolve: once two failures are reported, well within 5 s, the
	// first failed refresh has run to its end.
	emptied := time.Now()
	dns.SetSRV(name)
	var failures []time.Time
	for deadline := emptied.Add(5 * time.Second); len(failures) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d failed refreshes reported in 5 s, want 2", len(failures))
		}
		at, err := l.LastFailure()
		if err == nil || at.Before(emptied) || len(failures) > 0 && !at.After(failures[len(failures)-1]) {
			continue
		}
		if !strings.Contains(err.Error(), "refresh") || !errors.Is(err, memcachelimit.ErrStore) {
			t.Fatalf("failed refresh reported as %v, want an ErrStore naming the refresh", err)
		}
		failures = append(failures, at)
	}
	if got := l.Servers(); len(got) != 3 {
		t.Fatalf("servers %v after a failed refresh, want the 3 in force", got)
	}
}
