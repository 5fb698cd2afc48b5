package memcachedtest

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// SRV is one SRV record's target and port.
type SRV struct {
	// Target is a host name, written as DNS writes targets
	// ("localhost." or "cache-0.example."); Go's resolver refuses IP
	// addresses there.
	Target string
	Port   uint16
}

// DNS is a DNS server on a loopback UDP port that answers SRV queries from
// records the test sets (SetSRV) and every other query with NXDOMAIN, so
// that code resolving MEMCACHE_SRV goes through Go's real resolver
// (Resolver). It stops when the test ends.
type DNS struct {
	// Addr is the server's host:port.
	Addr string

	conn net.PacketConn
	mu   sync.Mutex
	srv  map[string][]SRV // by lower-case fully qualified name
}

// StartDNS starts a DNS server on a free loopback UDP port.
func StartDNS(t testing.TB) *DNS {
	t.Helper()
	conn, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("memcachedtest: DNS: %v", err)
	}
	d := &DNS{Addr: conn.LocalAddr().String(), conn: conn, srv: map[string][]SRV{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.serve()
	}()
	t.Cleanup(func() {
		conn.Close()
		<-done
	})
	return d
}

// SetSRV makes name (fully qualified or not) answer records, in this
// order; no records makes it answer NXDOMAIN again.
func (d *DNS) SetSRV(name string, records ...SRV) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.srv[fqdn(name)] = append([]SRV(nil), records...)
}

// Resolver returns a resolver that asks this server alone.
func (d *DNS) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dialer net.Dialer
		return dialer.DialContext(ctx, "udp", d.Addr)
	}}
}

func fqdn(name string) string {
	name = strings.ToLower(name)
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	return name
}

func (d *DNS) serve() {
	buf := make([]byte, 1500)
	for {
		n, from, err := d.conn.ReadFrom(buf)
		if err != nil {
			return // closed
		}
		if reply, ok := d.answer(buf[:n]); ok {
			_, _ = d.conn.WriteTo(reply, from)
		}
	}
}

// answer builds the reply to one query; ok is false for what is not a
// query worth answering.
func (d *DNS) answer(query []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, false
	}
	q, err := p.Question()
	if err != nil {
		return nil, false
	}
	d.mu.Lock()
	records, found := d.srv[strings.ToLower(q.Name.String())]
	d.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true}
	if q.Type != dnsmessage.TypeSRV || !found || len(records) == 0 {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	if rh.RCode == dnsmessage.RCodeSuccess {
		for _, r := range records {
			target, err := dnsmessage.NewName(fqdn(r.Target))
			if err != nil {
				return nil, false
			}
			rr := dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 1}
			if err := b.SRVResource(rr, dnsmessage.SRVResource{Priority: 10, Weight: 10, Port: r.Port, Target: target}); err != nil {
				return nil, false
			}
		}
	}
	reply, err := b.Finish()
	return reply, err == nil
}
