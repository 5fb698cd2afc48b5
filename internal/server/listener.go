package server

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// connListener is a listener that knows its open connections, so that a
// shutdown can close them whatever state their protocol is in, and that
// bounds how many are open at once. Over the bound, a new connection is
// closed at once rather than left in the backlog: its client can try
// another replica instead of waiting for a slot.
type connListener struct {
	net.Listener
	name   string
	max    int // 0: no bound
	logger *slog.Logger

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	// refused counts the connections closed at accept for being over max.
	refused atomic.Uint64
	// lastLog is when a refusal was last logged (unix nanoseconds).
	lastLog atomic.Int64
}

// refusalLogInterval is the least time between two logs of refused
// connections on one listener.
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
			// Counted before the close, so that a client that sees its
			// connection closed finds it counted.
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

// open returns the number of open connections.
func (l *connListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// silentGrace is how long a connection must have been open without
// sending a byte to be taken for silent: a real client sends at once, but
// its first bytes may still be in flight when a shutdown begins.
const silentGrace = time.Second

// closeConns closes the open connections, or only the silent ones when
// silentOnly: those carry no request, and a server waiting for their
// handshake would wait as long as their client stays quiet. It returns
// how many it closed.
func (l *connListener) closeConns(silentOnly bool) int { return l.closeConnsAt(silentOnly, time.Now()) }

// closeConnsAt is closeConns at time now: silent are the connections that
// have sent nothing and were accepted more than silentGrace before now.
func (l *connListener) closeConnsAt(silentOnly bool, now time.Time) int {
	quietSince := now.Add(-silentGrace)
	return l.closeWhere(func(c *trackedConn) bool {
		return !silentOnly || !c.spoke.Load() && c.accepted.Before(quietSince)
	})
}

// closeHandshaking closes the connections still in gRPC's handshake
// silentGrace after they were accepted, silent or not: they carry no
// request, and GracefulStop sends the others their GOAWAY only once every
// handshake has ended.
func (l *connListener) closeHandshaking() int {
	since := time.Now().Add(-silentGrace)
	return l.closeWhere(func(c *trackedConn) bool {
		return !c.handshaken.Load() && c.accepted.Before(since)
	})
}

// closeWhere closes the open connections for which victim is true and
// returns how many.
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

// trackedConn is a connection of a connListener: it leaves the
// listener's set when closed, and records whether its client sent
// anything.
type trackedConn struct {
	net.Conn
	l        *connListener
	accepted time.Time
	spoke    atomic.Bool
	// handshaken is set once gRPC has finished its handshake on the
	// connection, which it marks by clearing the handshake's deadline
	// (SetDeadline with the zero time; see grpc.Server.handleRawConn).
	handshaken atomic.Bool
	once       sync.Once
}

// SetDeadline sets the connection's deadlines and notes the end of gRPC's
// handshake (see handshaken).
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
