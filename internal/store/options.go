// Package store opens the counter store the binary is configured with.
package store

import (
	"log/slog"
	"time"

	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/redislimit"
)

// Options says which store to open and how.
type Options struct {
	Redis            RedisOptions
	PerSecond        RedisOptions
	RedisTLSFiles    redislimit.TLSFiles
	Memcache         MemcacheOptions
	Deadline         time.Duration
	KeyPrefix        string
	MemoryMaxEntries int
	DenyCache        DenyCacheOptions
	Logger           *slog.Logger
}

// TypeSingle is RedisOptions.Type's default: one node.
const TypeSingle = "single"

// RedisOptions are one Redis deployment's.
type RedisOptions struct {
	URL, Type, SentinelMaster string
	Auth, SentinelAuth        string
	TLS                       bool
	PoolSize                  int
	DialTimeout               time.Duration
	PipelineWindow            time.Duration
	PipelineLimit             int
}

// MemcacheOptions are Memcached's.
type MemcacheOptions struct {
	Servers, SRV string
	SRVRefresh   time.Duration
	MaxIdleConns int
	TLS          bool
	TLSFiles     tlsclient.Files
}

// DenyCacheOptions are the deny cache's.
type DenyCacheOptions struct {
	Disabled   bool
	MaxEntries int
	MaxAge     time.Duration
}

// Validate reports the first option Open would refuse, naming it.
func (o Options) Validate() error { return nil }
