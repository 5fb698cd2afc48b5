package redislimit

import (
	"cmp"
	"crypto/tls"
	"errors"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/pkg/option"
)

// ClientConfig describes how to reach Redis, in the terms of the reference
// server's REDIS_* settings.
type ClientConfig struct {
	// URL is where Redis is. For Type "single": redis://[user:pass@]host:port[/db],
	// rediss://... (TLS), unix:///path, host:port, or a socket path
	// starting with '/'. For "sentinel": "master,host:port,..." (the master
	// name, then the sentinels), or only the sentinels with SentinelMaster.
	// For "cluster": a comma-separated list of seed nodes' host:port.
	URL string
	// Type is "single" (the default when empty), "sentinel" or "cluster".
	Type string
	// SentinelMaster is the master name for Type "sentinel" when URL lists
	// only the sentinels.
	SentinelMaster string
	// Username and Password authenticate to Redis (ACL; an empty Username
	// is the default user), overriding credentials in URL.
	Username, Password string
	// SentinelPassword authenticates to the Sentinels themselves; only for
	// Type "sentinel".
	SentinelPassword string
	// TLS, when not nil, connects with TLS, to the Sentinels too; so does
	// a rediss:// URL. An empty ServerName checks each node against the
	// address dialed.
	TLS *tls.Config
	// PoolSize is the number of connections per node; 0 means go-redis's
	// default.
	PoolSize int
	// DialTimeout, ReadTimeout and WriteTimeout bound connecting, reading
	// and writing one command; 0 means go-redis's defaults.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// DB is the database index for "single" and "sentinel"; 0 keeps the one
	// in URL. A Cluster has database 0 only.
	DB int
}

// NewClient returns a go-redis client for cfg (a *redis.ClusterClient for
// a Cluster) that honours context deadlines and never retries a command on
// its own. It does not contact Redis. A refused field is an *option.Error.
func NewClient(cfg ClientConfig) (redis.UniversalClient, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tc := cfg.TLS.Clone()
	if tc == nil && strings.HasPrefix(cfg.URL, "rediss://") {
		tc = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch cfg.Type {
	case "", "single":
		return singleClient(cfg, tc)
	case "sentinel":
		return sentinelClient(cfg, tc)
	case "cluster":
		return clusterClient(cfg, tc)
	}
	return nil, refusedConfig("Type", cfg.Type, "want single, sentinel or cluster")
}

// singleClient returns the client of a single node; tc is the TLS
// configuration, nil for none. What cfg sets overrides the URL.
func singleClient(cfg ClientConfig, tc *tls.Config) (redis.UniversalClient, error) {
	o, err := singleOptions(cfg.URL)
	if err != nil {
		return nil, err
	}
	o.Username = cmp.Or(cfg.Username, o.Username)
	o.Password = cmp.Or(cfg.Password, o.Password)
	o.DB = cmp.Or(cfg.DB, o.DB)
	if tc != nil {
		if o.Network == "unix" {
			return nil, &option.Error{Options: "redislimit.ClientConfig", Field: "TLS",
				Want: "over a unix socket (%s): connect to a TCP address for TLS, or turn TLS off", With: []string{"URL"}}
		}
		if o.TLSConfig != nil {
			// A rediss:// URL's ?skip_verify=true means what it says.
			tc.InsecureSkipVerify = tc.InsecureSkipVerify || o.TLSConfig.InsecureSkipVerify
		}
		o.TLSConfig = tc
	}
	o.PoolSize = cmp.Or(cfg.PoolSize, o.PoolSize)
	o.DialTimeout = cmp.Or(cfg.DialTimeout, o.DialTimeout)
	o.ReadTimeout = cmp.Or(cfg.ReadTimeout, o.ReadTimeout)
	o.WriteTimeout = cmp.Or(cfg.WriteTimeout, o.WriteTimeout)
	o.ContextTimeoutEnabled = true
	o.DialerRetries = dialAttempts
	o.MaxRetries = noRetries
	return redis.NewClient(o), nil
}

// sentinelClient returns the failover client of a Sentinel group.
func sentinelClient(cfg ClientConfig, tc *tls.Config) (redis.UniversalClient, error) {
	addrs := splitList(cfg.URL)
	master := cfg.SentinelMaster
	if master == "" {
		master, addrs = addrs[0], addrs[1:]
	}
	if master == "" {
		return nil, refusedConfig("URL", redactURL(cfg.URL), `no master name (want "master,host:port,...")`)
	}
	if err := checkAddrs(cfg.URL, addrs); err != nil {
		return nil, err
	}
	u := common(cfg, tc)
	u.Addrs, u.MasterName, u.SentinelPassword = addrs, master, cfg.SentinelPassword
	return redis.NewFailoverClient(u.Failover()), nil
}

// clusterClient returns the client of a Redis Cluster.
func clusterClient(cfg ClientConfig, tc *tls.Config) (redis.UniversalClient, error) {
	if cfg.DB != 0 {
		return nil, refusedConfig("DB", cfg.DB, "a cluster has database 0 only")
	}
	addrs := splitList(cfg.URL)
	if err := checkAddrs(cfg.URL, addrs); err != nil {
		return nil, err
	}
	u := common(cfg, tc)
	u.Addrs = addrs
	o := u.Cluster()
	// A dead master answers no MOVED: without a periodic refresh of the
	// slot map its slots would keep going to it for a minute after a
	// replica took over.
	o.ClusterStateReloadInterval = time.Second
	// Routing policies need COMMAND INFO, which a new client fetches under
	// a lock every command waits on, bounded by ReadTimeout rather than the
	// caller's deadline: one master not answering would hold every
	// master's calls. Every call here is routed by its keys' slot.
	o.DisableRoutingPolicies = true
	return redis.NewClusterClient(o), nil
}

// common returns the options Sentinel and Cluster clients take from cfg,
// with context deadlines honoured and go-redis's own retries off, as
// singleClient sets them.
func common(cfg ClientConfig, tc *tls.Config) *redis.UniversalOptions {
	return &redis.UniversalOptions{
		Username: cfg.Username, Password: cfg.Password, DB: cfg.DB, PoolSize: cfg.PoolSize, TLSConfig: tc,
		DialTimeout: cfg.DialTimeout, ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout,
		ContextTimeoutEnabled: true, DialerRetries: dialAttempts, MaxRetries: noRetries,
	}
}

// validate refuses the fields that are wrong whatever the deployment.
func (cfg ClientConfig) validate() error {
	switch {
	case cfg.PoolSize < 0:
		return refusedConfig("PoolSize", cfg.PoolSize, "must not be negative")
	case cfg.DB < 0:
		return refusedConfig("DB", cfg.DB, "must not be negative")
	case strings.TrimSpace(cfg.URL) == "":
		return &option.Error{Options: "redislimit.ClientConfig", Field: "URL", Want: "is empty"}
	case cfg.SentinelPassword != "" && cfg.Type != "sentinel":
		return &option.Error{Options: "redislimit.ClientConfig", Field: "SentinelPassword", Want: "needs %s sentinel", With: []string{"Type"}}
	}
	return nil
}

// refusedConfig is the error of a ClientConfig field refused for its
// value.
func refusedConfig(field string, v any, want string) error {
	return &option.Error{Options: "redislimit.ClientConfig", Field: field, Value: v, Want: want}
}

// dialAttempts is how many times go-redis dials before a call fails: its
// default, 5, outlasts the store deadline; the breaker and probes retry.
const dialAttempts = 1

// noRetries turns off go-redis's retries of a failed command: they too
// outlast the deadline, and may charge a script's hits twice.
const noRetries = -1

// singleOptions parses the URL of a single node.
func singleOptions(raw string) (*redis.Options, error) {
	switch {
	case strings.Contains(raw, "://"):
		o, err := redis.ParseURL(raw)
		if err != nil {
			// A *url.Error quotes the password: keep only its reason.
			var ue *url.Error
			if errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, &option.Error{Options: "redislimit.ClientConfig", Field: "URL", Value: redactURL(raw), Err: err}
		}
		return o, nil
	case strings.HasPrefix(raw, "/"):
		return &redis.Options{Network: "unix", Addr: raw}, nil
	default:
		if err := checkAddrs(raw, []string{raw}); err != nil {
			return nil, err
		}
		return &redis.Options{Network: "tcp", Addr: raw}, nil
	}
}

// redactURL hides the password of a URL, even one that does not parse.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndex(rest, "@")
	if !ok || at < 0 {
		return raw
	}
	if user, _, hasPass := strings.Cut(rest[:at], ":"); hasPass {
		return scheme + "://" + user + ":xxxxx@" + rest[at+1:]
	}
	// A lone user information is a password to go-redis.
	return scheme + "://xxxxx@" + rest[at+1:]
}

// splitList splits a comma-separated list, trimming blanks around items.
func splitList(s string) []string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = strings.TrimSpace(p)
	}
	return parts
}

// checkAddrs refuses addrs, of URL raw, if none or one is not host:port.
func checkAddrs(raw string, addrs []string) error {
	if len(addrs) == 0 {
		return refusedConfig("URL", redactURL(raw), "no host:port given")
	}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil || host == "" || port == "" {
			return refusedConfig("URL", redactURL(a), "want host:port")
		}
	}
	return nil
}
