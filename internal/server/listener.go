package server

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connListener is a listener that knows its open connections, so that a
// shutdown can close them whatever their protocol's state, and bounds how
// many are open: one over the bound is closed at once rather than left in
// the backlog, so that its client tries another replica.
type connListener struct {
	net.Listener
	name   string
	max    int // 0: no bound
	logger *slog.Logger

	mu      sync.Mutex
	conns   map[*trackedConn]struct{}
	refused atomic.Uint64 // connections closed at accept, over max
	lastLog atomic.Int64  // when a refusal was last logged (unix ns)
}

// refusalLogInterval spaces the logs of refused connections.
const refusalLogInterval = 10 * time.Second

func newConnListener(l net.Listener, name string, max int, logger *slog.Logger) *connListener {
	return &connListener{Listener: l, name: name, max: max, logger: logger, conns: map[*trackedConn]struct{}{}}
}

// Accept returns the next connection within the bound, closing those over
// it.
func (l *connListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.max > 0 && len(l.conns) >= l.max {
			l.mu.Unlock()
			// Counted before the close, which the client sees.
			n := l.refused.Add(1)
			c.Close()
			now := time.Now().UnixNano()
			if last := l.lastLog.Load(); now-last >= int64(refusalLogInterval) && l.lastLog.CompareAndSwap(last, now) {
				l.logger.Warn("connection refused: the listener has its maximum of open connections",
					"listener", l.name, "max", l.max, "refused_total", n, "remote", c.RemoteAddr().String())
			}
			continue
		}
		tc := &trackedConn{Conn: c, l: l, accepted: time.Now()}
		l.conns[tc] = struct{}{}
		l.mu.Unlock()
		return tc, nil
	}
}

func (l *connListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// silentGrace is how long a connection must have been open without
// sending a byte to be taken for silent: a real client sends at once.
const silentGrace = time.Second

// closeSilent closes the connections that have sent nothing silentGrace
// after they were accepted, as of now: they carry no request.
func (l *connListener) closeSilent(now time.Time) int {
	quietSince := now.Add(-silentGrace)
	return l.closeWhere(func(c *trackedConn) bool { return !c.spoke.Load() && c.accepted.Before(quietSince) })
}

func (l *connListener) closeAll() int { return l.closeWhere(func(*trackedConn) bool { return true }) }

// closeHandshaking closes the connections still in gRPC's handshake
// silentGrace after they were accepted: they carry no request.
func (l *connListener) closeHandshaking() int {
	since := time.Now().Add(-silentGrace)
	return l.closeWhere(func(c *trackedConn) bool {
		return !c.handshaken.Load() && c.accepted.Before(since)
	})
}

// closeWhere closes the connections for which victim is true.
func (l *connListener) closeWhere(victim func(*trackedConn) bool) int {
	l.mu.Lock()
	var victims []*trackedConn
	for c := range l.conns {
		if victim(c) {
			victims = append(victims, c)
		}
	}
	l.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
	return len(victims)
}

// trackedConn is a connection of a connListener: it leaves the listener's
// set when closed, and records whether its client sent anything.
type trackedConn struct {
	net.Conn
	l        *connListener
	accepted time.Time
	spoke    atomic.Bool
	// handshaken is set once gRPC has cleared the handshake's deadline
	// (SetDeadline with the zero time; see grpc.Server.handleRawConn).
	handshaken atomic.Bool
	once       sync.Once
}

// SetDeadline sets the connection's deadlines and notes handshaken.
func (c *trackedConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.handshaken.Store(true)
	}
	return c.Conn.SetDeadline(t)
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.spoke.Load() {
		c.spoke.Store(true)
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}
