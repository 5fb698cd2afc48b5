package xds

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/floodgate/floodgate/internal/testcert"
	"github.com/floodgate/floodgate/internal/testlog"
	"github.com/floodgate/floodgate/internal/xdstest"
	"github.com/floodgate/floodgate/pkg/rules"
)

// fastOptions reconnect within milliseconds, so that tests are quick.
func fastOptions(addr string, logs *testlog.Buffer) Options {
	return Options{ServerURL: addr, NodeID: "test-node", RetryInterval: 20 * time.Millisecond,
		BackoffInitial: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

// runClient starts a Client feeding a new Feed, stopped when the test
// ends, and returns the Feed.
func runClient(t *testing.T, opts Options) *rules.Feed { return startClient(t, opts).feed }

// startClient starts a Client feeding a new Feed, stopped when the test
// ends.
func startClient(t *testing.T, opts Options) *Client {
	t.Helper()
	feed := rules.NewFeed(rules.Options{}, opts.Logger, "source", "xds")
	c, err := New(feed, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run = %v, want context.Canceled", err)
		}
	})
	return c
}

// limitOf returns the requests_per_unit of the first limit of the rule
// that domain and the entries match in the feed's rules, or -1 for none.
func limitOf(feed *rules.Feed, domain string, kv ...string) int {
	var entries []rules.Entry
	for i := 0; i+1 < len(kv); i += 2 {
		entries = append(entries, rules.Entry{Key: kv[i], Value: kv[i+1]})
	}
	r := feed.Current().Match(domain, entries)
	if r == nil || len(r.Limits) == 0 {
		return -1
	}
	return int(r.Limits[0].RequestsPerUnit)
}

// perMinute is a RateLimitConfig of one descriptor limited to n a minute.
func perMinute(name, domain, key string, n uint32) *rlsconf.RateLimitConfig {
	return &rlsconf.RateLimitConfig{Name: name, Domain: domain, Descriptors: []*rlsconf.RateLimitDescriptor{{
		Key: key, RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_MINUTE, RequestsPerUnit: n},
	}}}
}

// nackOf finds the NACK of version's response.
func nackOf(m *xdstest.Server, version string) *discovery.DiscoveryRequest {
	return m.WaitRequest("NACK of "+version, func(r *discovery.DiscoveryRequest) bool {
		return r.GetErrorDetail() != nil && r.GetResponseNonce() != "" && strings.Contains(r.GetErrorDetail().GetMessage(), "xds/")
	})
}

// TestPushes follows one subscription through the versions of the issue:
// a good set, a changed limit, a broken set, two domains, and a fix.
func TestPushes(t *testing.T) {
	var logs testlog.Buffer
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set("test-node", "v1", perMinute("api", "api", "user", 10))
	feed := runClient(t, fastOptions(m.Addr, &logs))

	// A good set: in force, version 1, ACKed with its version.
	waitFor(t, "v1 in force", func() bool { return limitOf(feed, "api", "user", "u1") == 10 })
	if st := feed.Status(); st.Version != 1 || st.Origin != "v1" || st.Failures != 0 || st.LastError != nil {
		t.Errorf("after v1: status %+v, want version 1 from v1, no failure", st)
	}
	m.WaitRequest("ACK of v1", func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "v1" && r.GetErrorDetail() == nil && r.GetNode().GetId() == "test-node"
	})

	// A changed limit is in effect within a second.
	changed := feed.Changed()
	m.Set("test-node", "v2", perMinute("api", "api", "user", 20))
	took := waitFor(t, "v2 in force", func() bool { return limitOf(feed, "api", "user", "u1") == 20 })
	if took > time.Second {
		t.Errorf("a changed limit took %v to be in force, want under a second", took)
	}
	t.Logf("a changed limit was in force %v after the snapshot was set", took)
	select {
	case <-changed:
	default:
		t.Error("Changed was not closed by a new version")
	}
	if st := feed.Status(); st.Version != 2 || st.Reloads != 1 || st.Origin != "v2" {
		t.Errorf("after v2: status %+v, want version 2 after 1 reload", st)
	}

	// A broken set is NACKed with the validation errors; the old rules
	// serve on and the NACK keeps the last good version.
	broken := perMinute("api", "api", "user", 30)
	broken.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	m.Set("test-node", "v3", broken, perMinute("api-2", "api", "other", 5))
	nack := nackOf(m, "v3")
	if msg := nack.GetErrorDetail().GetMessage(); !strings.Contains(msg, "xds/api") || !strings.Contains(msg, "unit") {
		t.Errorf("NACK error_detail = %q, want the validation errors naming resource api and its unit", msg)
	}
	if nack.GetVersionInfo() != "v2" {
		t.Errorf("NACK version_info = %q, want the last good v2", nack.GetVersionInfo())
	}
	if got := limitOf(feed, "api", "user", "u1"); got != 20 {
		t.Errorf("after the broken v3 the limit is %d, want v2's 20 still", got)
	}
	st := feed.Status()
	if st.Version != 2 || st.Failures != 1 || st.LastError == nil || !strings.Contains(st.LastError.Error(), "unit") || st.LastErrorAt.IsZero() {
		t.Errorf("after v3: status %+v, want version 2, 1 failure with the unit error", st)
	}
	if !strings.Contains(logs.String(), "reload refused") || !strings.Contains(logs.String(), "origin=v3") {
		t.Errorf("the refusal of v3 was not logged with its version:\n%s", logs.String())
	}

	// Two domains, one resource each, as Envoy Gateway sends them.
	m.Set("test-node", "v4", perMinute("api", "api", "user", 40), perMinute("admin", "admin", "path", 4))
	waitFor(t, "v4 in force", func() bool {
		return limitOf(feed, "api", "user", "u") == 40 && limitOf(feed, "admin", "path", "/x") == 4
	})
	if st := feed.Status(); st.Version != 3 || st.LastError != nil || st.Failures != 1 || st.Reloads != 3 {
		t.Errorf("after v4: status %+v, want version 3, error cleared, 3 reloads of which 1 failed", st)
	}
	if got := feed.Current().Domains(); len(got) != 2 {
		t.Errorf("domains %v, want api and admin", got)
	}

	// A domain removed from the snapshot is gone: the snapshot is the
	// whole state.
	m.Set("test-node", "v5", perMinute("admin", "admin", "path", 4))
	waitFor(t, "v5 in force", func() bool { return !feed.Current().HasDomain("api") })
}

// TestEnvoyGatewayShape pushes resources as Envoy Gateway builds them: one
// RateLimitConfig per listener, named and with a domain after it, route
// descriptors whose key and value are the route's name, nested rule and
// header-match descriptors, a shared limit, and a version counter.
func TestEnvoyGatewayShape(t *testing.T) {
	var logs testlog.Buffer
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	route := "httproute/default/backend/rule/0/match/0/www_example_com"
	listener := "default/eg/http"
	rl := func(n uint32, u rlsconf.RateLimitUnit) *rlsconf.RateLimitPolicy {
		return &rlsconf.RateLimitPolicy{RequestsPerUnit: n, Unit: u}
	}
	m.Set("envoy-ratelimit", "1", &rlsconf.RateLimitConfig{
		Name: listener, Domain: listener,
		Descriptors: []*rlsconf.RateLimitDescriptor{{
			Key: route, Value: route,
			Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "rule-0-match-0", Value: "x-user-id", Descriptors: []*rlsconf.RateLimitDescriptor{
					{Key: "rule-0-match-1", RateLimit: rl(3, rlsconf.RateLimitUnit_HOUR)},
				}},
				{Key: "rule-1-match--1", Value: "rule-1-match--1", RateLimit: rl(100, rlsconf.RateLimitUnit_SECOND)},
			},
		}},
	})
	opts := fastOptions(m.Addr, &logs)
	opts.NodeID = "envoy-ratelimit"
	feed := runClient(t, opts)
	waitFor(t, "Envoy Gateway's rules in force", func() bool {
		return limitOf(feed, listener, route, route, "rule-0-match-0", "x-user-id", "rule-0-match-1", "alice") == 3
	})
	if got := limitOf(feed, listener, route, route, "rule-1-match--1", "rule-1-match--1"); got != 100 {
		t.Errorf("shared rule limit = %d, want 100", got)
	}
	if got := feed.Status().Origin; got != "1" {
		t.Errorf("origin %q, want Envoy Gateway's version 1", got)
	}
}

// TestExtensions pushes a floodgate rule file in RuleFileField: every
// extension compiles as from a file, and a rule file whose domain is not
// its resource's is NACKed.
func TestExtensions(t *testing.T) {
	var logs testlog.Buffer
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	shop := []byte(`domain: shop
descriptors:
  - key: api_key
    rate_limits:
      - unit: second
        requests_per_unit: 10
        algorithm: token_bucket
        burst: 50
      - unit: day
        requests_per_unit: 100000
        algorithm: sliding_window
        precision: 24
  - key: plan
    value: free
    rate_limit:
      unit: month
      requests_per_unit: 10000
      calendar: true
      timezone: America/New_York
`)
	withDomain := RuleFile("shop", shop)
	withDomain.Domain = "shop" // as a resource that also serves envoyproxy/ratelimit would
	m.Set("test-node", "e1", withDomain, perMinute("plain", "plain", "k", 7))
	feed := runClient(t, fastOptions(m.Addr, &logs))
	waitFor(t, "the rule file in force", func() bool { return limitOf(feed, "plain", "k", "v") == 7 })
	r := feed.Current().Match("shop", []rules.Entry{{Key: "api_key", Value: "k1"}})
	if r == nil || len(r.Limits) != 2 || r.Limits[0].Spec.Burst != 50 {
		t.Fatalf("api_key rule = %+v, want two limits, the first a token bucket of burst 50", r)
	}
	if got := r.Limits[1].Describe(); !strings.Contains(got, "sliding_window") {
		t.Errorf("second limit %q, want a sliding window", got)
	}
	if r := feed.Current().Match("shop", []rules.Entry{{Key: "plan", Value: "free"}}); r == nil || !strings.Contains(r.Limits[0].Describe(), "America/New_York") {
		t.Errorf("plan rule = %v, want a calendar month in New York", r)
	}

	// Positions in errors are the rule file's own lines.
	bad := RuleFile("shop", []byte("domain: shop\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n"))
	m.Set("test-node", "e2", bad)
	if msg := nackOf(m, "e2").GetErrorDetail().GetMessage(); !strings.Contains(msg, "xds/shop:5:") || !strings.Contains(msg, "fortnight") {
		t.Errorf("NACK of a bad rule file = %q, want its line 5 and the bad unit", msg)
	}

	other := RuleFile("shop", shop)
	other.Domain = "not-shop"
	m.Set("test-node", "e3", other)
	m.WaitRequest("NACK of e3", func(r *discovery.DiscoveryRequest) bool {
		return strings.Contains(r.GetErrorDetail().GetMessage(), `domain "shop" differs from the resource's "not-shop"`)
	})
	if feed.Status().Version != 1 || limitOf(feed, "plain", "k", "v") != 7 {
		t.Errorf("after two bad pushes: version %d, want e1's rules still", feed.Status().Version)
	}
}

// TestServerRestarted stops the management server: the rules keep serving
// while it is away; a new server on the same port with a new snapshot is
// reconnected to, subscribed to again with the version last ACKed, and its
// rules put in force.
func TestServerRestarted(t *testing.T) {
	var logs testlog.Buffer
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set("test-node", "r1", perMinute("api", "api", "user", 10))
	opts := fastOptions(m.Addr, &logs)
	opts.StallWarning = 20 * time.Millisecond
	c := startClient(t, opts)
	feed := c.feed
	waitFor(t, "r1 in force", func() bool { return limitOf(feed, "api", "user", "u") == 10 })
	m.WaitRequest("ACK of r1", func(r *discovery.DiscoveryRequest) bool { return r.GetVersionInfo() == "r1" })

	m.Stop()
	waitFor(t, "the lost stream logged", func() bool { return strings.Contains(logs.String(), "stream to the management server ended") })
	// Away until the client has failed to connect again (grpc keeps the
	// channel in TRANSIENT_FAILURE from the first failed attempt on) and
	// has twice warned that it cannot reach the server: everything it does
	// while the server is away has run, and the rules serve on.
	waitFor(t, "a failed reconnection in Status().Source", func() bool {
		return strings.Contains(feed.Status().Source, "not connected (TRANSIENT_FAILURE)")
	})
	away := regexp.MustCompile(`msg="xds: cannot reach the management server" .* rules="version \\"r1\\" stays in force"`)
	waitFor(t, "two warnings that r1 stays in force", func() bool { return len(away.FindAllString(logs.String(), -1)) >= 2 })
	if got := limitOf(feed, "api", "user", "u"); got != 10 || feed.Status().Failures != 0 {
		t.Fatalf("while the server is away: limit %d, status %+v; want r1's 10, no failure", got, feed.Status())
	}

	m2 := xdstest.Start(t, m.Addr, nil)
	m2.Set("test-node", "r2", perMinute("api", "api", "user", 25))
	first := m2.WaitRequest("a new subscription", func(*discovery.DiscoveryRequest) bool { return true })
	if first.GetVersionInfo() != "r1" || first.GetTypeUrl() != TypeURL || first.GetResponseNonce() != "" {
		t.Errorf("first request to the new server: version %q type %q nonce %q; want r1, %s, no nonce",
			first.GetVersionInfo(), first.GetTypeUrl(), first.GetResponseNonce(), TypeURL)
	}
	waitFor(t, "r2 in force", func() bool { return limitOf(feed, "api", "user", "u") == 25 })
	if st := feed.Status(); st.Version != 2 || st.Origin != "r2" || st.Failures != 0 {
		t.Errorf("after the restart: status %+v, want version 2 from r2, no failure", st)
	}
}

// TestTLS subscribes over mutual TLS, the server's name checked against
// the SAN option, as Envoy Gateway's rate-limit deployment connects.
func TestTLS(t *testing.T) {
	var logs testlog.Buffer
	ca := testcert.NewCA(t, "xds CA")
	srvPair := ca.Issue(t, "envoy-gateway", testcert.Server, "envoy-gateway.envoy-gateway-system.svc")
	cliPair := ca.Issue(t, "envoy-ratelimit", testcert.Client)
	m := xdstest.Start(t, "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{srvPair.TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert, ClientCAs: ca.Pool(),
	})
	m.Set("test-node", "t1", perMinute("api", "api", "user", 10))
	opts := fastOptions(m.Addr, &logs)
	opts.TLS = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cliPair.TLS(t)},
		ServerName: "envoy-gateway.envoy-gateway-system.svc"}
	feed := runClient(t, opts)
	waitFor(t, "rules over mTLS", func() bool { return limitOf(feed, "api", "user", "u") == 10 })

	// A server whose certificate does not hold the name is not trusted:
	// the handshake fails, which the client reports, and nothing is
	// loaded.
	opts.TLS = &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{cliPair.TLS(t)}, ServerName: "other.example"}
	var logs2 testlog.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&logs2, nil))
	wrong := runClient(t, opts)
	waitFor(t, "the refused handshake in Status().Source", func() bool {
		return strings.Contains(wrong.Status().Source, "x509: certificate is valid for envoy-gateway.envoy-gateway-system.svc, not other.example")
	})
	if st := wrong.Status(); st.Version != 0 || !strings.Contains(st.Source, "nothing ACKed yet") {
		t.Errorf("a server not matching the SAN: version %d, source %q; want none loaded", st.Version, st.Source)
	}
}

// TestCheckTarget accepts the targets grpc dials as meant.
func TestCheckTarget(t *testing.T) {
	for _, target := range []string{"eg:18000", "10.0.0.1:18000", "[::1]:18000", "dns:///eg.svc:18000",
		"dns://10.0.0.10/eg.svc:18000", "passthrough:///eg:1", "unix:/run/xds.sock", "unix:///run/xds.sock"} {
		if err := checkTarget(target); err != nil {
			t.Errorf("checkTarget(%q) = %v, want nil", target, err)
		}
	}
}

// TestNewRefuses checks that options that cannot work are refused by New.
func TestNewRefuses(t *testing.T) {
	feed := rules.NewFeed(rules.Options{}, nil)
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no server", Options{}, "Options.ServerURL is empty"},
		{"backoff max below initial", Options{ServerURL: "x:1", BackoffInitial: time.Minute, BackoffMax: time.Second}, "xds.Options.BackoffInitial 1m0s: want at most xds.Options.BackoffMax (1s)"},
		{"backoff max below initial by default", Options{ServerURL: "x:1", BackoffInitial: 2 * time.Minute}, "xds.Options.BackoffInitial 2m0s: want at most xds.Options.BackoffMax (1m0s)"},
		{"random factor", Options{ServerURL: "x:1", BackoffRandomFactor: 2}, "Options.BackoffRandomFactor 2: want a number from 0 to 1"},
		{"negative retry", Options{ServerURL: "x:1", RetryInterval: -time.Second}, "Options.RetryInterval -1s: must not be negative"},
		{"negative size", Options{ServerURL: "x:1", MaxMessageBytes: -1}, "Options.MaxMessageBytes -1: must not be negative"},
		{"an http URL", Options{ServerURL: "http://eg:18000"}, "http:// is not a gRPC target"},
		{"no port", Options{ServerURL: "eg"}, "missing port"},
		{"no host", Options{ServerURL: ":18000"}, "no host"},
		{"a port not a number", Options{ServerURL: "dns:///eg:xds"}, `port "xds"`},
	} {
		if _, err := New(feed, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestRefusedVersionReused pushes a broken version "5", then restarts the
// management server with good rules also versioned "5", as Envoy Gateway's
// counter does after a restart: the new stream compiles them and puts them
// in force, while on the first stream the repeats of the refused content
// were refused without compiling them again.
func TestRefusedVersionReused(t *testing.T) {
	var logs testlog.Buffer
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set("test-node", "4", perMinute("api", "api", "user", 10))
	feed := runClient(t, fastOptions(m.Addr, &logs))
	waitFor(t, "4 in force", func() bool { return limitOf(feed, "api", "user", "u") == 10 })

	broken := perMinute("api", "api", "user", 30)
	broken.Descriptors[0].RateLimit.Unit = rlsconf.RateLimitUnit_UNKNOWN
	m.Set("test-node", "5", broken)
	nackOf(m, "5")
	// The cache sends the refused snapshot again after each NACK: wait
	// for a repeat's NACK, which must not count as a new failure.
	waitFor(t, "a repeated NACK", func() bool {
		n := 0
		for _, r := range m.Requests() {
			if r.GetErrorDetail() != nil {
				n++
			}
		}
		return n >= 2
	})
	if st := feed.Status(); st.Failures != 1 {
		t.Errorf("after repeats of the refused 5: %d failures, want 1 (repeats are not compiled again)", st.Failures)
	}

	m.Stop()
	m2 := xdstest.Start(t, m.Addr, nil)
	m2.Set("test-node", "5", perMinute("api", "api", "user", 50))
	waitFor(t, "the good 5 from the restarted server in force", func() bool { return limitOf(feed, "api", "user", "u") == 50 })
	if st := feed.Status(); st.Origin != "5" || st.LastError != nil {
		t.Errorf("after the good 5: status %+v, want origin 5 and no error", st)
	}
	m2.WaitRequest("ACK of the good 5", func(r *discovery.DiscoveryRequest) bool {
		return r.GetVersionInfo() == "5" && r.GetErrorDetail() == nil && r.GetResponseNonce() != ""
	})
}

// TestStallsReported runs clients that get no rules: one whose server
// refuses connections, one whose server holds no snapshot for its node id.
// Each logs a periodic warning naming the connection's state, the error
// and how long it has waited, and shows that state in Status().Source; the
// warnings are spaced by StallWarning, not one per attempt to connect.
func TestStallsReported(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set("test-node", "1", perMinute("api", "api", "user", 10))

	for _, tc := range []struct {
		name, addr, node string
		log, source      []string
	}{
		{"refused", dead, "test-node",
			[]string{"cannot reach the management server", "state=TRANSIENT_FAILURE", "connection refused", "waited=", `rules="none received yet"`},
			[]string{"xds " + dead + " node test-node: not connected (TRANSIENT_FAILURE) since", "connection refused", "nothing ACKed yet"}},
		{"wrong node id", m.Addr, "no-such-node",
			[]string{"connected to the management server, but it sends no rules", "node=no-such-node", "waited="},
			[]string{"connected, but no rules received since", "nothing ACKed yet"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testlog.Buffer
			opts := fastOptions(tc.addr, &logs)
			opts.NodeID = tc.node
			opts.StallWarning = 100 * time.Millisecond
			feed := runClient(t, opts)
			waitFor(t, "a stall warning", func() bool { return strings.Count(logs.String(), "level=WARN msg=\"xds: c") >= 2 })
			for _, want := range tc.log {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the warnings do not say %q:\n%s", want, logs.String())
				}
			}
			waitFor(t, "the state in Status().Source", func() bool { return strings.Contains(feed.Status().Source, tc.source[0]) })
			for _, want := range tc.source[1:] {
				if got := feed.Status().Source; !strings.Contains(got, want) {
					t.Errorf("Status().Source = %q, want it to say %q", got, want)
				}
			}
		})
	}

	// Once rules arrive the warnings stop and Source says so. The ticker
	// never fires here: the test looks itself, with nothing under way.
	var logs testlog.Buffer
	opts := fastOptions(m.Addr, &logs)
	opts.StallWarning = time.Hour
	c := startClient(t, opts)
	feed := c.feed
	waitFor(t, "rules", func() bool { return limitOf(feed, "api", "user", "u") == 10 })
	waitFor(t, "receiving in Source", func() bool {
		return strings.Contains(feed.Status().Source, `receiving rules; last ACK "1" at`)
	})
	n := strings.Count(logs.String(), "level=WARN")
	c.lookForStall()
	c.lookForStall()
	if got := strings.Count(logs.String(), "level=WARN"); got != n {
		t.Errorf("%d warnings while receiving rules, want none:\n%s", got-n, logs.String())
	}
}

// TestContentKey checks that a response's key ignores the order of its
// resources, which the snapshot cache sends in map order, and changes with
// the version or any resource.
func TestContentKey(t *testing.T) {
	a := &anypb.Any{TypeUrl: TypeURL, Value: []byte("a")}
	b := &anypb.Any{TypeUrl: TypeURL, Value: []byte("b")}
	resp := func(version string, rs ...*anypb.Any) *discovery.DiscoveryResponse {
		return &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: TypeURL, Resources: rs}
	}
	base := contentKey(resp("5", a, b))
	if contentKey(resp("5", b, a)) != base {
		t.Error("the order of the resources changed the key")
	}
	for name, r := range map[string]*discovery.DiscoveryResponse{
		"another version":   resp("6", a, b),
		"another resource":  resp("5", a, &anypb.Any{TypeUrl: TypeURL, Value: []byte("c")}),
		"one resource less": resp("5", a),
		"split differently": resp("5", &anypb.Any{TypeUrl: TypeURL, Value: []byte("ab")}),
	} {
		if contentKey(r) == base {
			t.Errorf("%s: same key", name)
		}
	}
}

// TestHugeNACK: a push with very many problems is NACKed on its stream
// with an error_detail cut to maxNACKDetail (a management server takes
// messages of up to 4 MiB by default and ends a stream that sends more),
// and is compiled once, not again at every reconnection.
func TestHugeNACK(t *testing.T) {
	var logs testlog.Buffer
	m := xdstest.Start(t, "127.0.0.1:0", nil)
	m.Set("test-node", "1", perMinute("api", "api", "user", 10))
	c := startClient(t, fastOptions(m.Addr, &logs))
	feed := c.feed
	waitFor(t, "1 in force", func() bool { return limitOf(feed, "api", "user", "u") == 10 })

	// 2,000 limits without a unit: about 270 KB of problems, four times
	// the bound (at 30,000, past 4 MiB, the server ended the stream).
	const n = 2000
	ds := make([]*rlsconf.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = &rlsconf.RateLimitDescriptor{Key: "k" + itoa(i), RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 1}}
	}
	m.Set("test-node", "2", &rlsconf.RateLimitConfig{Name: "api", Domain: "api", Descriptors: ds})
	var detail string
	waitFor(t, "the NACK of 2 at the server", func() bool {
		for _, r := range m.Requests() {
			if d := r.GetErrorDetail(); d != nil {
				detail = d.GetMessage()
				return true
			}
		}
		return false
	})
	if len(detail) > maxNACKDetail+100 || !strings.Contains(detail, "more lines") {
		t.Errorf("error_detail of %d bytes ending %q, want at most about %d, saying what was left out", len(detail), detail[max(len(detail)-80, 0):], maxNACKDetail)
	}
	if full := feed.Status().LastError.Error(); len(full) <= len(detail) {
		t.Errorf("the feed's last error holds %d bytes, want every problem (more than the NACK's %d)", len(full), len(detail))
	}
	if f := feed.Status().Failures; f != 1 || strings.Contains(logs.String(), "stream to the management server ended") {
		t.Errorf("%d refusals of 2, want 1 on one stream; log:\n%s", f, logs.String())
	}
	if got := limitOf(feed, "api", "user", "u"); got != 10 {
		t.Errorf("limit %d after the refusal, want 1's 10 kept", got)
	}
}
