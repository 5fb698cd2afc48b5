package redislimit

import (
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClientConfig describes how to reach Redis, in the terms of the reference
// server's settings (REDIS_URL, REDIS_TYPE, REDIS_AUTH, ...).
type ClientConfig struct {
	// URL is where Redis is. For Type "single": redis://[user:pass@]host:port[/db],
	// rediss://... (TLS), unix:///path/to/socket, or plain host:port. For
	// "sentinel": "master,host:port,host:port" (the master name first, then
	// the sentinels), or only the sentinels when SentinelMaster is set. For
	// "cluster": a comma-separated list of host:port seed nodes.
	URL string
	// Type is "single" (the default when empty), "sentinel" or "cluster".
	Type string
	// SentinelMaster is the master name for Type "sentinel" when URL lists
	// only the sentinels.
	SentinelMaster string
	// Username and Password authenticate (Redis ACL; Username empty means
	// the default user). They override credentials in URL when set.
	Username, Password string
	// TLS connects with TLS (as a rediss:// URL does).
	TLS bool
	// PoolSize is the number of connections per node; 0 means go-redis's
	// default (10 per CPU).
	PoolSize int
	// DialTimeout, ReadTimeout and WriteTimeout bound connecting, reading and
	// writing; 0 means go-redis's defaults (5 s, 3 s, 3 s).
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// DB is the database index for "single" and "sentinel"; 0 keeps the one
	// in URL (itself 0 by default). Cluster has only database 0.
	DB int
}

// NewClient returns a client for cfg. It does not contact Redis.
func NewClient(cfg ClientConfig) (redis.UniversalClient, error) {
	return nil, errors.New("redislimit: NewClient not implemented yet")
}
