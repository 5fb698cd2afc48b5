package test

import (
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
)

// TestClusterFailover: a Cluster master dies under load and its replica
// takes over its slots; floodgate follows the new topology.
func TestClusterFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	dir := t.TempDir()
	writeRules(t, dir, map[string]string{"failover.yaml": failoverRules})
	p := start(t, options{args: []string{"-redis-type", "cluster", "-redis", strings.Join(c.Addrs, ","), "-config", dir,
		"-redis-deadline", failoverDeadline.String()}})
	masters := func() []string {
		m, err := c.Masters()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	failover(t, p, func() string {
		before := masters()
		for _, n := range c.Nodes {
			if n.Addr == before[0] {
				n.Stop()
			}
		}
		if err := c.WaitOK(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		after := masters()
		for _, m := range after {
			if !strings.Contains(strings.Join(before, ","), m) {
				return m
			}
		}
		t.Fatalf("masters before %v, after %v: no replica was promoted", before, after)
		return ""
	}, masters)
}
