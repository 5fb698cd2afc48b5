package memcachedtest

import (
	"context"
	"crypto/tls"
	"testing"

	"github.com/floodgate/floodgate/internal/testcert"
)

func TestStartRestart(t *testing.T) {
	s := Start(t)
	if _, err := s.Do("set k 0 0 1\r\nv"); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Get("k"); err != nil || !ok || got != "v" {
		t.Fatalf("get k = %q, %v, %v; want v", got, ok, err)
	}
	if _, err := s.Do("incr k 1"); err == nil {
		t.Fatal("incr of a non-numeric value: no error")
	}
	s.Restart()
	if got, ok, err := s.Get("k"); err != nil || ok {
		t.Fatalf("after restart get k = %q, %v, %v; want none", got, ok, err)
	}
	s.Stop()
	if _, err := s.Do("version"); err == nil {
		t.Fatal("version after Stop succeeded")
	}
}

func TestStartTLS(t *testing.T) {
	ca := testcert.NewCA(t, "test CA")
	dir := t.TempDir()
	cert, key := ca.Issue(t, "memcached", testcert.Server, "127.0.0.1").Write(t, dir, "memcached")
	s := StartTLS(t, TLSFiles{CertFile: cert, KeyFile: key})
	conn, err := tls.Dial("tcp", s.TLSAddr, &tls.Config{RootCAs: ca.Pool()})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("version\r\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:8]) != "VERSION " {
		t.Fatalf("version over TLS = %q, %v", buf[:n], err)
	}
}

func TestDNS(t *testing.T) {
	d := StartDNS(t)
	d.SetSRV("_memcache._tcp.floodgate.test", SRV{"localhost.", 11211}, SRV{"cache-1.floodgate.test.", 11212})
	_, addrs, err := d.Resolver().LookupSRV(context.Background(), "", "", "_memcache._tcp.floodgate.test.")
	if err != nil {
		t.Fatal(err)
	}
	if len(addrs) != 2 {
		t.Fatalf("%d records, want 2", len(addrs))
	}
	if _, _, err := d.Resolver().LookupSRV(context.Background(), "", "", "_other._tcp.floodgate.test."); err == nil {
		t.Fatal("unknown name resolved")
	}
}
