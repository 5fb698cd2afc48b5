package redistest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
)

// SentinelMasterName is the name under which a Sentinel group from
// StartSentinel monitors its master.
const SentinelMasterName = "floodgate"

// Sentinel is a replicated Redis watched by Sentinel processes
// (`redis-server --sentinel`), owned by a test.
type Sentinel struct {
	// Data are the data nodes: Data[0] is the first master, the others its
	// replicas. After a failover another one is the master (see Master).
	Data []*Server
	// Sentinels are the Sentinel processes.
	Sentinels []*Server
}

// StartSentinel starts a master, replicas replicas of it and sentinels
// Sentinel processes monitoring it under SentinelMasterName with a quorum
// of a majority, which consider the master down after downAfter without an
// answer (Sentinel's down-after-milliseconds) and may retry a failover after
// 2·downAfter (failover-timeout; at least a second). It returns once every
// replica's link is up and every Sentinel knows every replica and every
// other Sentinel, so that killing the master is followed by a promotion
// (with no replica there is none: such a group is for finding the master).
// Everything is stopped when the test ends.
func StartSentinel(t testing.TB, replicas, sentinels int, downAfter time.Duration) *Sentinel {
	t.Helper()
	return startSentinel(t, replicas, sentinels, downAfter, nil)
}

// StartSentinelTLS is StartSentinel for a group that also serves TLS as
// tls says: the data nodes and the Sentinels on their TLS ports
// (TLSURL), replication and the Sentinels' own links over TLS, and the
// master known to the Sentinels by its TLS address, so that a client that
// asks them is sent there.
func StartSentinelTLS(t testing.TB, replicas, sentinels int, downAfter time.Duration, tls *TLS) *Sentinel {
	t.Helper()
	return startSentinel(t, replicas, sentinels, downAfter, tls)
}

func startSentinel(t testing.TB, replicas, sentinels int, downAfter time.Duration, tls *TLS) *Sentinel {
	t.Helper()
	if replicas < 0 || sentinels < 1 || downAfter < time.Millisecond {
		t.Fatalf("redistest: StartSentinel(%d replicas, %d sentinels, %v): a group needs a sentinel and a positive down-after", replicas, sentinels, downAfter)
	}
	bin := harness.Require(t, "redis-server")
	g := &Sentinel{}
	sp := sentinelParts{
		data: func(args []string) (*Server, error) { return startNode(t, tls, args), nil },
		sentinel: func(master string) (*Server, []string, error) {
			port := harness.FreePort(t)
			s := &Server{t: t, Dir: t.TempDir(), bin: bin, Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port))}
			var lines []string
			if tls != nil {
				tlsPort := harness.FreePort(t)
				s.TLSAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(tlsPort))
				lines = tls.sentinelLines(t, tlsPort)
			}
			t.Cleanup(s.Stop)
			return s, lines, nil
		},
		tls: tls != nil,
	}
	if err := g.start(sp, replicas, sentinels, downAfter); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return g
}

// RunSentinel starts a group as StartSentinel does (without TLS), with its
// files under dir, for a program that is not a test (cmd/bench): it does
// not look at the tier, and the caller stops it (Stop).
func RunSentinel(dir string, replicas, sentinels int, downAfter time.Duration) (*Sentinel, error) {
	if replicas < 0 || sentinels < 1 || downAfter < time.Millisecond {
		return nil, fmt.Errorf("redistest: RunSentinel(%d replicas, %d sentinels, %v): a group needs a sentinel and a positive down-after", replicas, sentinels, downAfter)
	}
	bin, err := harness.Find("redis-server")
	if err != nil {
		return nil, err
	}
	var n int
	subdir := func() (string, error) {
		n++
		d := filepath.Join(dir, "node"+strconv.Itoa(n))
		return d, os.MkdirAll(d, 0o755)
	}
	g := &Sentinel{}
	sp := sentinelParts{
		data: func(args []string) (*Server, error) {
			d, err := subdir()
			if err != nil {
				return nil, err
			}
			return Run(d, args...)
		},
		sentinel: func(string) (*Server, []string, error) {
			d, err := subdir()
			if err != nil {
				return nil, nil, err
			}
			addr, err := harness.FreeAddr()
			return &Server{Dir: d, bin: bin, Addr: addr}, nil, err
		},
	}
	if err := g.start(sp, replicas, sentinels, downAfter); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

// sentinelParts starts the processes of a group: data starts a data node
// with extra directives; sentinel returns a Sentinel not yet started, with
// the lines its configuration file needs beyond the monitoring ones.
type sentinelParts struct {
	data     func(args []string) (*Server, error)
	sentinel func(master string) (*Server, []string, error)
	tls      bool
}

// start starts the master, its replicas and the Sentinels, and waits for
// the group to settle.
func (g *Sentinel) start(sp sentinelParts, replicas, sentinels int, downAfter time.Duration) error {
	// A full sync starts at once instead of waiting 5 s for more replicas.
	master, err := sp.data([]string{"--repl-diskless-sync-delay", "0"})
	if err != nil {
		return err
	}
	g.Data = []*Server{master}
	masterAddr := master.Addr
	if sp.tls {
		masterAddr = master.TLSAddr
	}
	_, masterPort, _ := net.SplitHostPort(masterAddr)
	for range replicas {
		r, err := sp.data([]string{"--replicaof", "127.0.0.1", masterPort, "--repl-diskless-sync-delay", "0"})
		if err != nil {
			return err
		}
		g.Data = append(g.Data, r)
	}
	for range sentinels {
		s, err := startSentinelOn(sp, masterPort, sentinels/2+1, downAfter)
		if err != nil {
			return err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	return g.waitSettled(replicas, sentinels, 30*time.Second)
}

// startSentinelOn starts one Sentinel of sp's on a free port, trying new
// ports when one was taken (harness.PortTaken), as startNode does.
func startSentinelOn(sp sentinelParts, masterPort string, quorum int, downAfter time.Duration) (*Server, error) {
	for attempt := 1; ; attempt++ {
		s, lines, err := sp.sentinel(masterPort)
		if err != nil {
			return nil, err
		}
		err = startSentinelProcess(s, masterPort, quorum, downAfter, lines)
		if err == nil || attempt == harness.PortAttempts || !harness.PortTaken(s.Log()) {
			return s, err
		}
	}
}

// startSentinelProcess writes s's configuration, monitoring the master on
// masterPort with quorum, plus lines, and starts it.
func startSentinelProcess(s *Server, masterPort string, quorum int, downAfter time.Duration, lines []string) error {
	_, port, _ := net.SplitHostPort(s.Addr)
	// Sentinel rewrites its configuration file, so it must be a file of
	// its own rather than command-line directives.
	conf := filepath.Join(s.Dir, "sentinel.conf")
	lines = append([]string{
		"port " + port,
		"bind 127.0.0.1",
		"dir " + s.Dir,
		"logfile " + filepath.Join(s.Dir, "redis.log"),
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s %d", SentinelMasterName, masterPort, quorum),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", SentinelMasterName, downAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", SentinelMasterName, max(2*downAfter, time.Second).Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", SentinelMasterName),
	}, lines...)
	if err := os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	s.args = []string{conf, "--sentinel"}
	if err := s.launch(); err != nil {
		return fmt.Errorf("sentinel: %w", err)
	}
	return nil
}

// Stop stops every process of the group.
func (g *Sentinel) Stop() {
	for _, s := range append(slices.Clone(g.Sentinels), g.Data...) {
		s.Stop()
	}
}

// URL is the group as floodgate's -redis flag takes it with -redis-type
// sentinel: "master,host:port,..." listing every Sentinel.
func (g *Sentinel) URL() string {
	parts := []string{SentinelMasterName}
	for _, s := range g.Sentinels {
		parts = append(parts, s.Addr)
	}
	return strings.Join(parts, ",")
}

// TLSURL is URL with the Sentinels' TLS addresses, for a group started
// with StartSentinelTLS.
func (g *Sentinel) TLSURL() string {
	parts := []string{SentinelMasterName}
	for _, s := range g.Sentinels {
		parts = append(parts, s.TLSAddr)
	}
	return strings.Join(parts, ",")
}

// Master returns the address of the master as the first running Sentinel
// reports it.
func (g *Sentinel) Master() (string, error) {
	for _, s := range g.Sentinels {
		if !s.running() {
			continue
		}
		out, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName)
		if err != nil {
			return "", err
		}
		hostPort := strings.Split(out, "\n")
		if len(hostPort) != 2 {
			return "", fmt.Errorf("%s: master address %q", s.Addr, out)
		}
		return net.JoinHostPort(hostPort[0], hostPort[1]), nil
	}
	return "", fmt.Errorf("no running sentinel")
}

// Node returns the data node listening on addr (its plain or its TLS
// address), or nil.
func (g *Sentinel) Node(addr string) *Server {
	for _, s := range g.Data {
		if s.Addr == addr || s.TLSAddr == addr {
			return s
		}
	}
	return nil
}

// WaitFailover waits until every running Sentinel names a master other
// than old, and that node answers as a master, or timeout passes. It
// returns the new master's address.
func (g *Sentinel) WaitFailover(old string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		addr, err := g.agreedMaster()
		switch {
		case err != nil:
			last = err
		case addr == old:
			last = fmt.Errorf("sentinels still name %s", old)
		default:
			repl, err := Do(addr, "INFO", "replication")
			if err == nil && infoFields(repl)["role"] == "master" {
				return addr, nil
			}
			last = fmt.Errorf("%s, named master, is not one yet: %v", addr, err)
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no failover after %v: %v", timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agreedMaster returns the master every running Sentinel names.
func (g *Sentinel) agreedMaster() (string, error) {
	var agreed string
	for _, s := range g.Sentinels {
		if !s.running() {
			continue
		}
		out, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMasterName)
		if err != nil {
			return "", fmt.Errorf("%s: %v", s.Addr, err)
		}
		addr := strings.Replace(out, "\n", ":", 1)
		if agreed != "" && addr != agreed {
			return "", fmt.Errorf("sentinels disagree: %s and %s", agreed, addr)
		}
		agreed = addr
	}
	if agreed == "" {
		return "", fmt.Errorf("no running sentinel")
	}
	return agreed, nil
}

// waitSettled waits until replicas are linked and every Sentinel has
// discovered them and its peers.
func (g *Sentinel) waitSettled(replicas, sentinels int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := g.settled(replicas, sentinels)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled after %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (g *Sentinel) settled(replicas, sentinels int) error {
	for _, s := range g.Data[1:] {
		repl, err := s.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("%s: %v", s.Addr, err)
		}
		if st := infoFields(repl)["master_link_status"]; st != "up" {
			return fmt.Errorf("replica %s: link %s", s.Addr, st)
		}
	}
	for _, s := range g.Sentinels {
		out, err := s.Do("SENTINEL", "MASTER", SentinelMasterName)
		if err != nil {
			return fmt.Errorf("sentinel %s: %v", s.Addr, err)
		}
		f := pairs(out)
		if f["num-slaves"] != strconv.Itoa(replicas) || f["num-other-sentinels"] != strconv.Itoa(sentinels-1) {
			return fmt.Errorf("sentinel %s knows %s replicas and %s other sentinels", s.Addr, f["num-slaves"], f["num-other-sentinels"])
		}
	}
	return nil
}

// pairs reads a flat name/value array reply (as Do joins it) into a map.
func pairs(reply string) map[string]string {
	f := strings.Split(reply, "\n")
	m := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		m[f[i]] = f[i+1]
	}
	return m
}

// Freeze suspends the server process (SIGSTOP): the kernel still completes
// TCP handshakes on its port but nothing is answered, as with a hung host
// or a network partition that drops packets. Thaw resumes it; Stop kills it
// even while frozen.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a server suspended by Freeze.
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if !s.running() {
		s.t.Fatalf("redistest: %s is not running", s.Addr)
	}
	if err := s.proc.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %s: %v", s.Addr, err)
	}
}

// Info returns the fields of INFO section (e.g. "replication",
// "errorstats") as a map.
func (s *Server) Info(section string) (map[string]string, error) {
	out, err := s.Do("INFO", section)
	if err != nil {
		return nil, err
	}
	return infoFields(out), nil
}
