package redistest

import "testing"

func TestStartRestart(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Do("GET", "k"); err != nil || got != "v" {
		t.Fatalf("GET k = %q, %v; want v", got, err)
	}
	s.Restart()
	if got, err := s.Do("GET", "k"); err != nil || got != "" {
		t.Fatalf("after restart GET k = %q, %v; want empty", got, err)
	}
	s.Stop()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING after Stop succeeded")
	}
}
