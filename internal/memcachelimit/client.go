package memcachelimit

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A small client of Memcached's text protocol: the commands the limiter
// needs, pipelined over a pool of connections per server.

// Kinds of command.
const (
	cmdIncr    = iota // "incr key delta"; with delta 0, a read in order with the connection's other commands
	cmdDecr           // "decr key delta" (never below 0)
	cmdAddIncr        // "add key 0 exp 1 / 0" then "incr key delta": create at 0 with its expiry if missing, then add
	cmdVersion        // "version", a probe
	cmdDelete         // "delete key": found when the key existed
)

// command is one command and, once run, its reply.
type command struct {
	kind  uint8
	key   string
	delta uint64
	exp   int64 // add's expiry (cmdAddIncr): seconds from now, or a Unix time beyond 30 days
	srv   *server

	// The reply: done once the server answered; value and found for incr,
	// decr and delete.
	done  bool
	found bool
	value uint64
}

// replyError is an error Memcached answered a command with (ERROR,
// CLIENT_ERROR ..., SERVER_ERROR ...): the server is up and the
// connection still usable.
type replyError struct{ line string }

func (e *replyError) Error() string { return "memcached answered " + e.line }

// server is one Memcached server and its idle connections.
type server struct {
	addr    string
	hash    uint32 // of addr, for rendezvous hashing
	idle    chan *conn
	removed atomic.Bool // no longer in the server list: connections are closed, not kept
	failing atomic.Bool // since a failure, until the next answer (Limiter.Healthy)
}

// conn is one connection to a server.
type conn struct {
	nc net.Conn
	r  *bufio.Reader
	w  *bufio.Writer
}

// pool holds the servers and dials them.
type pool struct {
	servers atomic.Pointer[[]*server] // sorted by address; never empty once set
	dialer  net.Dialer
	tls     *tls.Config
	maxIdle int
}

// setServers makes addrs the server list, keeping the idle connections of
// servers that stay and closing those of servers that leave.
func (p *pool) setServers(addrs []string) {
	addrs = slices.Compact(slices.Sorted(slices.Values(addrs)))
	var old []*server
	if cur := p.servers.Load(); cur != nil {
		old = *cur
	}
	next := make([]*server, 0, len(addrs))
	for _, a := range addrs {
		i := slices.IndexFunc(old, func(s *server) bool { return s.addr == a })
		if i >= 0 {
			next = append(next, old[i])
			continue
		}
		next = append(next, &server{addr: a, hash: crc32.ChecksumIEEE([]byte(a)), idle: make(chan *conn, p.maxIdle)})
	}
	p.servers.Store(&next)
	for _, s := range old {
		if !slices.Contains(next, s) {
			s.removed.Store(true)
			s.drain()
		}
	}
}

// list returns the servers in force.
func (p *pool) list() []*server { return *p.servers.Load() }

// pick returns the server of key by rendezvous hashing (highest score
// wins): the same in every process with the same servers, whatever their
// order, and a server joining or leaving moves only the keys it wins or
// held.
func pick(servers []*server, key string) *server {
	kh := uint64(crc32.ChecksumIEEE([]byte(key))) << 32
	var best *server
	var bestScore uint64
	for _, s := range servers {
		score := mix64(kh | uint64(s.hash))
		if best == nil || score > bestScore || score == bestScore && s.addr < best.addr {
			best, bestScore = s, score
		}
	}
	return best
}

// mix64 is SplitMix64's finalizer, so that one key's scores on different
// servers are independent.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// dial opens a connection to s, with TLS when configured.
func (p *pool) dial(ctx context.Context, s *server) (*conn, error) {
	var nc net.Conn
	var err error
	if p.tls != nil {
		// Without a ServerName, each server is verified for the host dialed.
		d := tls.Dialer{NetDialer: &p.dialer, Config: p.tls}
		nc, err = d.DialContext(ctx, "tcp", s.addr)
	} else {
		nc, err = p.dialer.DialContext(ctx, "tcp", s.addr)
	}
	if err != nil {
		return nil, err
	}
	return &conn{nc: nc, r: bufio.NewReader(nc), w: bufio.NewWriter(nc)}, nil
}

// run sends cmds, all for server s, in one write, by ctx's deadline, and
// reads their replies. The error is the server's failure (some commands
// may have been applied) or the first error it answered.
func (p *pool) run(ctx context.Context, s *server, cmds []*command) error {
	err := p.roundTrip(ctx, s, cmds)
	switch {
	case err == nil || isReplyError(err):
		s.failing.Store(false)
	case ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded):
		// A missed deadline is the server's failure; a caller gone is not.
		s.failing.Store(true)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.addr, err)
	}
	return nil
}

func (p *pool) roundTrip(ctx context.Context, s *server, cmds []*command) error {
	var c *conn
	select {
	case c = <-s.idle:
	default:
		var err error
		if c, err = p.dial(ctx, s); err != nil {
			return withContext(ctx, err)
		}
	}
	dl, _ := ctx.Deadline() // the zero time, no deadline, when there is none
	_ = c.nc.SetDeadline(dl)
	// A caller that goes away ends the round trip at once.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	err := c.exchange(cmds)
	fired := !stop()
	if !fired && (err == nil || isReplyError(err)) {
		s.put(c)
		return err
	}
	// Its deadline may be past or its stream broken: not reused.
	c.nc.Close()
	if err != nil && ctx.Err() == nil {
		// The server went away: its other idle connections likely did too.
		s.drain()
	}
	return withContext(ctx, err)
}

// withContext makes err, met under ctx, wrap ctx's error when ctx is
// done, so that a caller who gave up is told from a server that failed. A
// socket timeout at ctx's deadline is that deadline, even before ctx's own
// timer fires.
func withContext(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	cerr := ctx.Err()
	if dl, ok := ctx.Deadline(); cerr == nil && ok && errors.Is(err, os.ErrDeadlineExceeded) && !time.Now().Before(dl) {
		cerr = context.DeadlineExceeded
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w", cerr, err)
	}
	return err
}

func isReplyError(err error) bool {
	var re *replyError
	return errors.As(err, &re)
}

// put keeps c for later use, or closes it when enough are kept.
func (s *server) put(c *conn) {
	if s.removed.Load() {
		c.nc.Close()
		return
	}
	select {
	case s.idle <- c:
	default:
		c.nc.Close()
	}
}

// drain closes the idle connections.
func (s *server) drain() {
	for {
		select {
		case c := <-s.idle:
			c.nc.Close()
		default:
			return
		}
	}
}

// exchange writes cmds and reads their replies: a *replyError is the
// first error answered, any other error breaks the stream.
func (c *conn) exchange(cmds []*command) error {
	// A bufio.Writer keeps its first error, which Flush returns.
	for _, cmd := range cmds {
		switch cmd.kind {
		case cmdIncr, cmdDecr:
			fmt.Fprintf(c.w, "%s %s %d\r\n", [...]string{cmdIncr: "incr", cmdDecr: "decr"}[cmd.kind], cmd.key, cmd.delta)
		case cmdAddIncr:
			fmt.Fprintf(c.w, "add %s 0 %d 1\r\n0\r\nincr %s %d\r\n", cmd.key, cmd.exp, cmd.key, cmd.delta)
		case cmdVersion:
			fmt.Fprint(c.w, "version\r\n")
		case cmdDelete:
			fmt.Fprintf(c.w, "delete %s\r\n", cmd.key)
		}
	}
	if err := c.w.Flush(); err != nil {
		return err
	}
	var answered error
	for _, cmd := range cmds {
		err := c.readReply(cmd)
		if err != nil && !isReplyError(err) {
			return err
		}
		if answered == nil {
			answered = err
		}
	}
	return answered
}

// readReply reads the reply to cmd.
func (c *conn) readReply(cmd *command) error {
	if cmd.kind == cmdAddIncr {
		line, err := c.line()
		if err != nil {
			return err
		}
		if line != "STORED" && line != "NOT_STORED" {
			// The incr's reply follows all the same.
			if err := c.readReply(&command{kind: cmdIncr}); err != nil && !isReplyError(err) {
				return err
			}
			return unexpected("add", line)
		}
	}
	line, err := c.line()
	if err != nil {
		return err
	}
	switch {
	case cmd.kind == cmdVersion:
		if !strings.HasPrefix(line, "VERSION ") {
			return unexpected("version", line)
		}
	case cmd.kind == cmdDelete && line == "DELETED":
		cmd.found = true
	case cmd.kind == cmdDelete && line != "NOT_FOUND":
		return unexpected("delete", line)
	case line == "NOT_FOUND" && cmd.kind == cmdAddIncr:
		// Evicted between the add and the incr: nothing was charged.
		return &replyError{line: "NOT_FOUND right after add"}
	case line == "NOT_FOUND":
	default:
		v, err := strconv.ParseUint(line, 10, 64)
		if err != nil {
			return unexpected("incr or decr", line)
		}
		cmd.found, cmd.value = true, v
	}
	cmd.done = true
	return nil
}

// unexpected turns an error reply into a *replyError, and anything else
// into an error that breaks the stream.
func unexpected(what, line string) error {
	if line == "ERROR" || strings.HasPrefix(line, "CLIENT_ERROR ") || strings.HasPrefix(line, "SERVER_ERROR ") {
		return &replyError{line: line}
	}
	return fmt.Errorf("unexpected reply to %s: %q", what, line)
}

// line reads one reply line without its "\r\n".
func (c *conn) line() (string, error) {
	b, err := c.r.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\r\n"), nil
}

// runAll runs cmds in one round trip per server, the servers
// concurrently. The error names every server that failed.
func (p *pool) runAll(ctx context.Context, cmds []*command) error {
	switch len(cmds) {
	case 0:
		return nil
	case 1:
		return p.run(ctx, cmds[0].srv, cmds)
	}
	var groups [][]*command
	for _, cmd := range cmds {
		i := slices.IndexFunc(groups, func(g []*command) bool { return g[0].srv == cmd.srv })
		if i < 0 {
			groups = append(groups, nil)
			i = len(groups) - 1
		}
		groups[i] = append(groups[i], cmd)
	}
	if len(groups) == 1 {
		return p.run(ctx, cmds[0].srv, cmds)
	}
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups[1:] {
		wg.Go(func() { errs[i+1] = p.run(ctx, g[0].srv, g) })
	}
	errs[0] = p.run(ctx, groups[0][0].srv, groups[0])
	wg.Wait()
	return errors.Join(errs...)
}

// resolveSRV returns the host:port of name's SRV records; none is an
// error.
func resolveSRV(ctx context.Context, r *net.Resolver, name string) ([]string, error) {
	_, records, err := r.LookupSRV(ctx, "", "", name)
	if err != nil {
		return nil, fmt.Errorf("SRV %s: %w", name, err)
	}
	if len(records) == 0 {
		return nil, fmt.Errorf("SRV %s: no records", name)
	}
	addrs := make([]string, len(records))
	for i, rec := range records {
		addrs[i] = net.JoinHostPort(strings.TrimSuffix(rec.Target, "."), strconv.Itoa(int(rec.Port)))
	}
	return addrs, nil
}
