package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// Cluster is a running Redis Cluster owned by a test: masters with slots
// spread evenly, each with its replicas.
type Cluster struct {
	// Addrs is the host:port of every node, masters and replicas, in start
	// order; any of them works as a seed for a cluster client.
	Addrs []string
	// TLSAddrs are the nodes' TLS ports, in the order of Addrs, for a
	// cluster started with StartClusterTLS; nil otherwise.
	TLSAddrs []string
	// Nodes are the servers, in the order of Addrs. A test may Stop or
	// Restart one (a restarted node keeps its nodes.conf and rejoins).
	Nodes []*Server
}

// StartCluster starts masters*(1+replicasPerMaster) redis-server nodes with
// cluster mode on, joins them with `redis-cli --cluster create`, and returns
// once every node reports cluster_state:ok, knows every other node and, for
// replicas, has its link to its master up. Everything is stopped when the
// test ends. Redis Cluster needs at least 3 masters. extra are more
// configuration directives for every node (e.g.
// "--cluster-require-full-coverage", "no").
func StartCluster(t testing.TB, masters, replicasPerMaster int, extra ...string) *Cluster {
	t.Helper()
	return startCluster(t, masters, replicasPerMaster, nil, extra...)
}

// StartClusterTLS is StartCluster for nodes that also serve TLS as tls
// says (the cluster bus and replication too), on TLSAddrs. A TLS client
// is told the nodes' TLS ports (CLUSTER SLOTS, MOVED), a plain one their
// plain ports.
func StartClusterTLS(t testing.TB, masters, replicasPerMaster int, tls *TLS) *Cluster {
	t.Helper()
	return startCluster(t, masters, replicasPerMaster, tls)
}

func startCluster(t testing.TB, masters, replicasPerMaster int, tls *TLS, extra ...string) *Cluster {
	t.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("redistest: StartCluster(%d masters, %d replicas each): a cluster needs at least 3 masters", masters, replicasPerMaster)
	}
	cli := harness.Require(t, "redis-cli")
	node := func(args []string) (*Server, error) { return startNode(t, tls, args), nil }
	c, err := createCluster(cli, masters, replicasPerMaster, node, extra)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// RunCluster starts a Cluster as StartCluster does, with its nodes' files
// under dir, for a program that is not a test (cmd/bench): it does not
// look at the tier, and the caller stops it (Stop).
func RunCluster(dir string, masters, replicasPerMaster int, extra ...string) (*Cluster, error) {
	if masters < 3 || replicasPerMaster < 0 {
		return nil, fmt.Errorf("redistest: RunCluster(%d masters, %d replicas each): a cluster needs at least 3 masters", masters, replicasPerMaster)
	}
	cli, err := harness.Find("redis-cli")
	if err != nil {
		return nil, err
	}
	var n int
	node := func(args []string) (*Server, error) {
		n++
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(n))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return nil, err
		}
		bus, err := harness.FreeAddr()
		if err != nil {
			return nil, err
		}
		_, busPort, _ := net.SplitHostPort(bus)
		return Run(nodeDir, append([]string{"--cluster-port", busPort,
			"--cluster-config-file", filepath.Join(nodeDir, "nodes.conf")}, args...)...)
	}
	return createCluster(cli, masters, replicasPerMaster, node, extra)
}

// createCluster starts the nodes with node, which adds each one's bus
// port and configuration file, joins them with redis-cli (the binary
// cli) and waits for the cluster to settle. On an error it stops every
// node it started.
func createCluster(cli string, masters, replicasPerMaster int, node func(args []string) (*Server, error), extra []string) (*Cluster, error) {
	n := masters * (1 + replicasPerMaster)
	c := &Cluster{}
	for range n {
		s, err := node(append([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000"}, extra...))
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
		if s.TLSAddr != "" {
			c.TLSAddrs = append(c.TLSAddrs, s.TLSAddr)
		}
	}
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if err := c.WaitOK(30 * time.Second); err != nil {
		c.Stop()
		return nil, fmt.Errorf("cluster of %d nodes: %v", n, err)
	}
	return c, nil
}

// WaitOK polls every running node until each reports cluster_state:ok with
// all 16384 slots assigned and knows as many nodes as there are, and every
// replica's link to its master is up, or timeout passes. Stopped nodes are
// skipped, so a test can wait for the cluster to settle after a failover.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if last = c.check(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) check() error {
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		info, err := s.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %v", s.Addr, err)
		}
		fields := infoFields(info)
		if fields["cluster_state"] != "ok" || fields["cluster_slots_assigned"] != "16384" {
			return fmt.Errorf("%s: cluster_state %s, %s slots assigned", s.Addr, fields["cluster_state"], fields["cluster_slots_assigned"])
		}
		if known := fields["cluster_known_nodes"]; known != strconv.Itoa(len(c.Nodes)) {
			return fmt.Errorf("%s knows %s nodes of %d", s.Addr, known, len(c.Nodes))
		}
		repl, err := s.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %v", s.Addr, err)
		}
		if r := infoFields(repl); r["role"] == "slave" && r["master_link_status"] != "up" {
			return fmt.Errorf("%s: replica link to its master is %s", s.Addr, r["master_link_status"])
		}
	}
	return nil
}

// Masters returns the addresses of the nodes that currently serve slots, as
// the first running node sees them.
func (c *Cluster) Masters() ([]string, error) {
	for _, s := range c.Nodes {
		if !s.running() {
			continue
		}
		out, err := s.Do("CLUSTER", "NODES")
		if err != nil {
			return nil, err
		}
		var masters []string
		for _, line := range strings.Split(out, "\n") {
			// <id> <ip:port@cport> <flags> <master> <ping> <pong> <epoch> <link> <slot>...
			f := strings.Fields(line)
			if len(f) < 9 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			masters = append(masters, strings.SplitN(f[1], "@", 2)[0])
		}
		return masters, nil
	}
	return nil, fmt.Errorf("no running node")
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// infoFields parses the "name:value" lines of INFO and CLUSTER INFO.
func infoFields(info string) map[string]string {
	m := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}
