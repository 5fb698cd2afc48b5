package redislimit_test

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness"
	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/redis/go-redis/v9"
)

func TestNewClientOptions(t *testing.T) {
	tests := []struct {
		name string
		cfg  redislimit.ClientConfig
		// want, for a single node
		network, addr, user, pass string
		db, pool                  int
		tls                       bool
		read                      time.Duration
	}{
		{name: "host:port", cfg: redislimit.ClientConfig{URL: "localhost:6380"},
			network: "tcp", addr: "localhost:6380"},
		{name: "redis URL with ACL user and db", cfg: redislimit.ClientConfig{URL: "redis://app:s3cret@10.0.0.1:6390/4"},
			network: "tcp", addr: "10.0.0.1:6390", user: "app", pass: "s3cret", db: 4},
		{name: "rediss URL", cfg: redislimit.ClientConfig{URL: "rediss://cache.example:6380", Type: "single"},
			network: "tcp", addr: "cache.example:6380", tls: true},
		{name: "a TLS configuration", cfg: redislimit.ClientConfig{URL: "cache.example:6380", TLS: &tls.Config{}},
			network: "tcp", addr: "cache.example:6380", tls: true},
		{name: "unix URL", cfg: redislimit.ClientConfig{URL: "unix:///run/redis.sock"},
			network: "unix", addr: "/run/redis.sock"},
		{name: "socket path", cfg: redislimit.ClientConfig{URL: "/run/redis.sock", Password: "pw"},
			network: "unix", addr: "/run/redis.sock", pass: "pw"},
		{name: "settings override the URL", cfg: redislimit.ClientConfig{URL: "redis://u:p@h:1/2", Username: "v", Password: "q", DB: 3, PoolSize: 7, ReadTimeout: 40 * time.Millisecond},
			network: "tcp", addr: "h:1", user: "v", pass: "q", db: 3, pool: 7, read: 40 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redislimit.NewClient(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			o := c.(*redis.Client).Options()
			if o.Network != tc.network || o.Addr != tc.addr || o.Username != tc.user || o.Password != tc.pass || o.DB != tc.db || (o.TLSConfig != nil) != tc.tls {
				t.Errorf("options %s %s user %q pass %q db %d tls %v; want %s %s user %q pass %q db %d tls %v",
					o.Network, o.Addr, o.Username, o.Password, o.DB, o.TLSConfig != nil, tc.network, tc.addr, tc.user, tc.pass, tc.db, tc.tls)
			}
			if tc.pool != 0 && o.PoolSize != tc.pool {
				t.Errorf("pool size %d, want %d", o.PoolSize, tc.pool)
			}
			if tc.read != 0 && o.ReadTimeout != tc.read {
				t.Errorf("read timeout %v, want %v", o.ReadTimeout, tc.read)
			}
			if !o.ContextTimeoutEnabled {
				t.Error("context deadlines not honoured")
			}
		})
	}

	c, err := redislimit.NewClient(redislimit.ClientConfig{Type: "cluster", URL: "a:1, b:2,c:3", PoolSize: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if o := c.(*redis.ClusterClient).Options(); strings.Join(o.Addrs, " ") != "a:1 b:2 c:3" || o.PoolSize != 5 {
		t.Errorf("cluster options: addrs %q pool %d", o.Addrs, o.PoolSize)
	}
}

// TestNewClientKeepsTheTLSConfig: a rediss:// URL's skip_verify applies to
// the client's copy of ClientConfig.TLS, never to the caller's, which other
// clients may share.
func TestNewClientKeepsTheTLSConfig(t *testing.T) {
	tc := &tls.Config{MinVersion: tls.VersionTLS13}
	c, err := redislimit.NewClient(redislimit.ClientConfig{URL: "rediss://h:1/?skip_verify=true", TLS: tc})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := c.(*redis.Client).Options().TLSConfig
	if got == tc || !got.InsecureSkipVerify || got.MinVersion != tls.VersionTLS13 {
		t.Errorf("the client's TLS: %+v, want a copy of the caller's with skip_verify", got)
	}
	if tc.InsecureSkipVerify {
		t.Error("NewClient changed the caller's tls.Config")
	}
}

func TestNewClientErrors(t *testing.T) {
	tests := []struct {
		cfg  redislimit.ClientConfig
		want string // in the error
	}{
		{redislimit.ClientConfig{URL: ""}, "redislimit.ClientConfig.URL is empty"},
		{redislimit.ClientConfig{URL: "h:1", Type: "ring"}, `redislimit.ClientConfig.Type "ring": want single, sentinel or cluster`},
		{redislimit.ClientConfig{URL: "http://h:1"}, "scheme"},
		{redislimit.ClientConfig{URL: "redis://u:hunter2@h:1/x"}, "database"},
		{redislimit.ClientConfig{URL: "localhost"}, `redislimit.ClientConfig.URL "localhost": want host:port`},
		{redislimit.ClientConfig{URL: "h:1", PoolSize: -1}, "redislimit.ClientConfig.PoolSize -1: must not be negative"},
		{redislimit.ClientConfig{URL: "h:1", DB: -1}, "redislimit.ClientConfig.DB -1: must not be negative"},
		{redislimit.ClientConfig{URL: "mymaster", Type: "sentinel"}, "no host:port"},
		{redislimit.ClientConfig{URL: ",h:1", Type: "sentinel"}, "no master name"},
		{redislimit.ClientConfig{URL: "mymaster,h", Type: "sentinel"}, `redislimit.ClientConfig.URL "h": want host:port`},
		{redislimit.ClientConfig{URL: "a:1,b:2", Type: "cluster", DB: 1}, "database 0 only"},
		{redislimit.ClientConfig{URL: "a:1,,b:2", Type: "cluster"}, `redislimit.ClientConfig.URL "": want host:port`},
		// URLs that do not parse are quoted without their password.
		{redislimit.ClientConfig{URL: "redis://admin:hunter2@h:notaport"}, `"redis://admin:xxxxx@h:notaport": invalid port`},
		{redislimit.ClientConfig{URL: "redis://hunter2@h:notaport"}, `"redis://xxxxx@h:notaport"`},
		{redislimit.ClientConfig{URL: "rediss://u:hunter2@[::1"}, `"rediss://u:xxxxx@[::1"`},
	}
	for _, tc := range tests {
		c, err := redislimit.NewClient(tc.cfg)
		if err == nil {
			c.Close()
			t.Errorf("NewClient(%+v): no error, want one containing %q", tc.cfg, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewClient(%+v) = %v, want an error containing %q", tc.cfg, err, tc.want)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error %q shows the password", err)
		}
	}
}

// ping connects with cfg and returns the error of PING.
func ping(t *testing.T, cfg redislimit.ClientConfig) error {
	t.Helper()
	c, err := redislimit.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Ping(ctx).Err()
}

// TestNewClientConnects reaches real servers over every kind of address,
// with ACL credentials and a database index.
func TestNewClientConnects(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "redis.sock")
	srv := redistest.Start(t, "--unixsocket", sock, "--unixsocketperm", "700")
	if _, err := srv.Do("ACL", "SETUSER", "floodgate", "on", ">s3cret", "~*", "+@all"); err != nil {
		t.Fatal(err)
	}
	ok := []redislimit.ClientConfig{
		{URL: srv.Addr},
		{URL: "redis://" + srv.Addr},
		{URL: "unix://" + sock},
		{URL: sock},
		{URL: "redis://floodgate:s3cret@" + srv.Addr + "/2"},
		{URL: srv.Addr, Username: "floodgate", Password: "s3cret", DB: 5, PoolSize: 2, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second},
	}
	for _, cfg := range ok {
		if err := ping(t, cfg); err != nil {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
	if err := ping(t, redislimit.ClientConfig{URL: srv.Addr, Username: "floodgate", Password: "wrong"}); err == nil {
		t.Error("wrong password accepted")
	}

	// The database index is the one written to.
	c, err := redislimit.NewClient(redislimit.ClientConfig{URL: "redis://floodgate:s3cret@" + srv.Addr + "/3"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if err := c.Set(ctx, "where", "db3", 0).Err(); err != nil {
		t.Fatal(err)
	}
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 3})
	defer db3.Close()
	if got := db3.Get(ctx, "where").Val(); got != "db3" {
		t.Errorf("GET in database 3 = %q, want db3", got)
	}
}

// TestNewClientSentinel finds the master through a sentinel, with the URL
// written as the reference server writes it: "master,host:port".
func TestNewClientSentinel(t *testing.T) {
	g := redistest.StartSentinel(t, 0, 1, time.Second)
	master, sentinelAddr := g.Data[0], g.Sentinels[0].Addr
	for _, cfg := range []redislimit.ClientConfig{
		{Type: "sentinel", URL: redistest.SentinelMasterName + "," + sentinelAddr},
		{Type: "sentinel", URL: sentinelAddr, SentinelMaster: redistest.SentinelMasterName},
	} {
		c, err := redislimit.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		if err := c.Set(ctx, "via", cfg.URL, 0).Err(); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		c.Close()
		if got, err := master.Do("GET", "via"); err != nil || got != cfg.URL {
			t.Errorf("%+v: the master holds %q, %v; want %q", cfg, got, err, cfg.URL)
		}
	}
}

// TestRefusedConnectionFailsAtOnce checks that a Redis refusing connections
// fails a call at once with the refusal, for every deployment type, rather
// than after dial retries that outlast the store deadline and turn the cause
// into a deadline.
func TestRefusedConnectionFailsAtOnce(t *testing.T) {
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(harness.FreePort(t)))
	for _, cfg := range []redislimit.ClientConfig{
		{URL: dead},
		{URL: "master," + dead, Type: "sentinel"},
		{URL: dead, Type: "cluster"},
	} {
		t.Run(cfg.Type, func(t *testing.T) {
			c, err := redislimit.NewClient(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			begin := time.Now()
			err = c.Ping(ctx).Err()
			if took := time.Since(begin); took > 300*time.Millisecond {
				t.Errorf("PING took %v, want the refusal at once (no dial retries)", took)
			}
			if err == nil || !strings.Contains(err.Error(), "refused") {
				t.Errorf("PING = %v, want the connection refused", err)
			}
		})
	}
}
