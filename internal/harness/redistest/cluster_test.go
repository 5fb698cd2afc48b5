package redistest

import (
	"strings"
	"testing"
)

func TestStartCluster(t *testing.T) {
	tests := []struct {
		name              string
		masters, replicas int
	}{
		{"three masters", 3, 0},
		{"three masters with a replica each", 3, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := StartCluster(t, tc.masters, tc.replicas)
			if want := tc.masters * (1 + tc.replicas); len(c.Addrs) != want || len(c.Nodes) != want {
				t.Fatalf("got %d addrs, %d nodes; want %d", len(c.Addrs), len(c.Nodes), want)
			}
			masters, err := c.Masters()
			if err != nil {
				t.Fatal(err)
			}
			if len(masters) != tc.masters {
				t.Fatalf("Masters() = %v; want %d masters", masters, tc.masters)
			}
			// A key lives on exactly one master; the others redirect.
			var owners, moved int
			for _, addr := range masters {
				_, err := Do(addr, "SET", "{user42}k", "v")
				switch {
				case err == nil:
					owners++
				case strings.Contains(err.Error(), "MOVED"):
					moved++
				default:
					t.Fatalf("SET on %s: %v", addr, err)
				}
			}
			if owners != 1 || moved != tc.masters-1 {
				t.Fatalf("SET accepted by %d masters and redirected by %d; want 1 and %d", owners, moved, tc.masters-1)
			}
		})
	}
}
