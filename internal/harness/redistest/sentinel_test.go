package redistest

import (
	"testing"
	"time"
)

func TestStartSentinelFailover(t *testing.T) {
	t.Parallel()
	g := StartSentinel(t, 1, 3, 300*time.Millisecond)
	old, err := g.Master()
	if err != nil {
		t.Fatal(err)
	}
	if old != g.Data[0].Addr {
		t.Fatalf("sentinels name %s as master, want %s", old, g.Data[0].Addr)
	}
	if _, err := Do(old, "SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	g.Data[0].Stop()
	promoted, err := g.WaitFailover(old, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if promoted != g.Data[1].Addr {
		t.Fatalf("promoted %s, want the replica %s", promoted, g.Data[1].Addr)
	}
	// The replica had the write, and now takes writes itself.
	if got, err := Do(promoted, "GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k on the new master = %q, %v; want v", got, err)
	}
	if _, err := Do(promoted, "SET", "k", "w"); err != nil {
		t.Fatalf("SET on the new master: %v", err)
	}
}

func TestFreezeThaw(t *testing.T) {
	t.Parallel()
	s := Start(t)
	s.Freeze()
	answered := make(chan error, 1)
	go func() { _, err := s.Do("PING"); answered <- err }()
	select {
	case err := <-answered:
		t.Fatalf("a frozen server answered PING (err %v)", err)
	case <-time.After(300 * time.Millisecond):
	}
	s.Thaw()
	select {
	case err := <-answered:
		if err != nil {
			t.Fatalf("PING sent while frozen, after Thaw: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no answer 5s after Thaw")
	}
	info, err := s.Info("server")
	if err != nil || info["tcp_port"] == "" {
		t.Fatalf("INFO server = %v, %v", info, err)
	}
}
