package store

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/memcachedtest"
	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// beatsUntil moves clk beat by beat until cond holds, for at most n
// beats, and returns how many it took; 0 if cond never held.
func beatsUntil(t *testing.T, clk *fakeClock, n int, cond func() bool) int {
	t.Helper()
	for i := 1; i <= n; i++ {
		clk.beat(t)
		if cond() {
			return i
		}
	}
	return 0
}

// A Redis that dies under an idle instance (no requests) is reported at
// the first idle probe, in one log line with the cause, then probed every
// second until it answers again, which is one more line; reached says
// whether it ever answered.
func TestWatchFollowsIdleRedis(t *testing.T) {
	srv := redistest.Start(t)
	clk := newFakeClock()
	s, logs := openOn(t, clk, Options{Redis: RedisOptions{URL: srv.Addr}})
	if h := s.Health(); !h.Healthy || !h.Reached || h.Detail != "breaker closed" {
		t.Fatalf("health at start %+v, want healthy, reached, breaker closed", h)
	}
	clk.waitArmed(t, 1)
	srv.Stop()

	// Healthy, the watch probes only every idleProbeInterval: nothing has
	// noticed before the fifth beat.
	took := beatsUntil(t, clk, 10, func() bool { return !s.Health().Healthy })
	if want := int(idleProbeInterval / sickProbeInterval); took != want {
		t.Fatalf("Redis stopped, seen unhealthy at beat %d, want %d (the idle probe):\n%s", took, want, logs)
	}
	if countLines(logs.String(), "Redis fails") != 1 ||
		!regexp.MustCompile(`level=ERROR msg="Redis fails: [^"]*" redis=main addr=`+regexp.QuoteMeta(srv.Addr)+` err=("[^"<]+"|[^"<\s]+)\n`).MatchString(logs.String()) {
		t.Fatalf("want one line saying Redis fails, naming it, with the cause:\n%s", logs)
	}
	h := s.Health()
	if h.Healthy || !h.Reached || !regexp.MustCompile(`^breaker (open|probing); last failure \d+s ago: .+`).MatchString(h.Detail) {
		t.Errorf("health %+v, want unhealthy, reached, the breaker and the failure", h)
	}

	// Unhealthy, it probes at every beat: each probe is a new failure.
	at, _ := s.redis[0].lim.LastFailure()
	clk.beat(t)
	if again, _ := s.redis[0].lim.LastFailure(); !again.After(at) {
		t.Errorf("no probe in the beat after the failure: last failure still at %v", at)
	}

	srv.Restart()
	if beatsUntil(t, clk, 5, func() bool { return countLines(logs.String(), "Redis answers again") == 1 }) == 0 {
		t.Fatalf("Redis restarted, no line saying it answers again within 5 probes:\n%s", logs)
	}
	clk.beats(t, 2*int(idleProbeInterval/sickProbeInterval))
	if out := logs.String(); countLines(out, "Redis fails") != 1 || countLines(out, "Redis answers again") != 1 || !s.Health().Healthy {
		t.Errorf("want exactly one line per change and Redis healthy:\n%s", out)
	}
}

// A Redis never reached (a port nothing listens on) is unhealthy from the
// start and never reached, told in one line; the watch adds none while it
// stays so.
func TestUnreachableRedisAtStart(t *testing.T) {
	clk := newFakeClock()
	s, logs := openOn(t, clk, Options{Redis: RedisOptions{URL: deadAddr(t)}})
	if h := s.Health(); h.Healthy || h.Reached || h.Name != "redis" {
		t.Errorf("health %+v: want redis unhealthy and never reached", h)
	}
	if v, _ := metrics(t, s); v["floodgate_store_healthy"] != 0 {
		t.Errorf("floodgate_store_healthy %v, want 0", v["floodgate_store_healthy"])
	}
	clk.waitArmed(t, 1)
	clk.beats(t, 3)
	if out := logs.String(); countLines(out, "Redis cannot be used") != 1 || countLines(out, "level=ERROR") != 1 || s.Health().Reached {
		t.Errorf("want the one start line, and still not reached:\n%s", out)
	}
}

// With a per-second Redis, health names each deployment, and a failure of
// the per-second one is told naming it.
func TestPerSecondHealthNamesEach(t *testing.T) {
	mainRedis, ps := redistest.Start(t), redistest.Start(t)
	clk := newFakeClock()
	s, logs := openOn(t, clk, Options{Redis: RedisOptions{URL: mainRedis.Addr}, PerSecond: RedisOptions{URL: ps.Addr}})
	if h, want := s.Health(), fmt.Sprintf("main %s: breaker closed; per-second %s: breaker closed", mainRedis.Addr, ps.Addr); !h.Healthy || h.Detail != want {
		t.Fatalf("health %+v, want healthy with detail %q", h, want)
	}
	clk.waitArmed(t, 2) // both watches
	ps.Stop()
	if beatsUntil(t, clk, 10, func() bool { return countLines(logs.String(), "Redis fails") == 1 }) == 0 {
		t.Fatalf("no line saying the per-second Redis fails:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "redis=per-second addr="+ps.Addr) {
		t.Errorf("the line does not name the per-second Redis:\n%s", logs)
	}
	want := regexp.MustCompile(`^main ` + regexp.QuoteMeta(mainRedis.Addr) + `: breaker closed; per-second ` + regexp.QuoteMeta(ps.Addr) + `: breaker (open|probing), last failure \d+s ago: .+$`)
	if h := s.Health(); h.Healthy || !want.MatchString(h.Detail) {
		t.Errorf("health %+v, want unhealthy naming the per-second Redis", h)
	}
	v, _ := metrics(t, s)
	if v["floodgate_store_node_healthy{node="+mainRedis.Addr+",redis=main}"] != 1 || v["floodgate_store_node_healthy{node="+ps.Addr+",redis=per-second}"] != 0 {
		t.Errorf("node health series: %v", v)
	}
}

// On a Cluster, the master that fails is named by the log, the health's
// detail and its series, and only it; its return is told too.
func TestWatchNamesClusterMaster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0, "--cluster-require-full-coverage", "no")
	clk := newFakeClock()
	s, logs := openOn(t, clk, Options{Redis: RedisOptions{URL: strings.Join(c.Addrs, ","), Type: "cluster"}})
	clk.waitArmed(t, 1)
	victim := c.Nodes[0]
	victim.Stop()
	if beatsUntil(t, clk, 10, func() bool { return countLines(logs.String(), "Redis node fails") == 1 }) == 0 {
		t.Fatalf("no line saying a node fails:\n%s", logs)
	}
	if !regexp.MustCompile(`Redis node fails: [^\n]* node=` + regexp.QuoteMeta(victim.Addr) + ` slots=[0-9,-]+ err=`).MatchString(logs.String()) {
		t.Errorf("the line does not name the failing master %s and its slots:\n%s", victim.Addr, logs)
	}
	detail := s.Health().Detail
	if !regexp.MustCompile(`^slot map: breaker closed; .*master ` + regexp.QuoteMeta(victim.Addr) + ` \(slots [0-9,-]+\): breaker (open|probing); last failure \d+s ago: `).MatchString(detail) {
		t.Errorf("detail does not name the failing master %s:\n%s", victim.Addr, detail)
	}
	v, _ := metrics(t, s)
	for _, n := range c.Nodes {
		want := 1.0
		if n == victim {
			want = 0
		}
		if got := v["floodgate_store_node_healthy{node="+n.Addr+",redis=main}"]; got != want {
			t.Errorf("node %s healthy %v, want %v (%v)", n.Addr, got, want, v)
		}
	}

	victim.Restart()
	if err := c.WaitOK(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if beatsUntil(t, clk, 5, func() bool { return countLines(logs.String(), "Redis node answers again") == 1 }) == 0 {
		t.Fatalf("no line saying the node answers again:\n%s", logs)
	}
	if !s.Health().Healthy || countLines(logs.String(), "Redis node fails") != 1 {
		t.Errorf("want healthy and one line per change:\n%s", logs)
	}
}

// Memcached is watched as Redis is: an idle failure is told at the idle
// probe, with the servers, and its return too.
func TestWatchFollowsMemcached(t *testing.T) {
	srv := memcachedtest.Start(t)
	clk := newFakeClock()
	s, logs := openOn(t, clk, Options{Memcache: MemcacheOptions{Servers: " " + srv.Addr + " ,"}})
	if h, want := s.Health(), "servers "+srv.Addr; s.Name() != "memcache" || !h.Healthy || !h.Reached || h.Detail != want {
		t.Fatalf("%s health %+v, want memcache healthy and reached, detail %q", s.Name(), h, want)
	}
	clk.waitArmed(t, 1)
	srv.Stop()
	if took := beatsUntil(t, clk, 10, func() bool { return !s.Health().Healthy }); took != int(idleProbeInterval/sickProbeInterval) {
		t.Fatalf("seen unhealthy at beat %d, want the idle probe's:\n%s", took, logs)
	}
	if !regexp.MustCompile(`level=ERROR msg="Memcached fails: [^"]*" servers=\[` + regexp.QuoteMeta(srv.Addr) + `\] err=`).MatchString(logs.String()) {
		t.Errorf("want a line saying Memcached fails, with its servers:\n%s", logs)
	}
	if h := s.Health(); !regexp.MustCompile(`^servers ` + regexp.QuoteMeta(srv.Addr) + `; last failure \d+s ago: .+`).MatchString(h.Detail) {
		t.Errorf("detail %q does not give the failure", h.Detail)
	}
	srv.Restart()
	if beatsUntil(t, clk, 5, func() bool { return countLines(logs.String(), "Memcached answers again") == 1 }) == 0 {
		t.Fatalf("no line saying Memcached answers again:\n%s", logs)
	}
}
