package store

import (
	"cmp"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/floodgate/floodgate/internal/memcachelimit"
	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
)

// Options says which store Open opens and how: Memcached when
// Memcache.Servers or Memcache.SRV is set, else Redis when Redis.URL is,
// else this process's memory. The zero value is memory with its defaults.
type Options struct {
	// Redis is the main Redis; an empty URL means no Redis.
	Redis RedisOptions
	// PerSecond is a second Redis for the limits whose window is shorter
	// than a minute; an empty URL means none.
	PerSecond RedisOptions
	// RedisTLSFiles are the TLS files of Redis and PerSecond, if TLS is on.
	RedisTLSFiles tlsclient.Files
	// Memcache, when its Servers or SRV is set, makes Memcached the store.
	Memcache MemcacheOptions
	// Deadline bounds each request's whole call to Redis or Memcached; 0
	// means limit.DefaultDeadline.
	Deadline time.Duration
	// KeyPrefix starts every key in Redis or Memcached.
	KeyPrefix string
	// MemoryMaxEntries bounds the counters the in-memory store holds; 0
	// means limit.MemoryOptions' default.
	MemoryMaxEntries int
	// DenyCache configures the deny cache in front of Redis.
	DenyCache DenyCacheOptions
	// Logger receives where the counters are kept and each change of the
	// store's health; nil discards them.
	Logger *slog.Logger
}

// TypeSingle is RedisOptions.Type's default: one node.
const TypeSingle = "single"

// RedisOptions describe one Redis deployment. Its zero value is no Redis.
type RedisOptions struct {
	// URL is where Redis is, as redislimit.ClientConfig.URL says.
	URL string
	// Type is TypeSingle (also when empty), "sentinel" or "cluster", in
	// any case.
	Type string
	// SentinelMaster is the master's name, when URL lists only Sentinels.
	SentinelMaster string
	// Auth is "password" or "user:password"; empty means URL's, if any.
	Auth string
	// SentinelAuth is the Sentinels' own password; Type "sentinel" only.
	SentinelAuth string
	// TLS connects to every node and Sentinel with TLS
	// (Options.RedisTLSFiles); a rediss:// URL implies it.
	TLS bool
	// PoolSize is the number of connections per node; 0 means 10 per CPU.
	PoolSize int
	// DialTimeout bounds connecting to a node; 0 means 5 s.
	DialTimeout time.Duration
	// PipelineWindow and PipelineLimit are redislimit.BatchOptions.Window
	// and MaxRequests; 0 means their defaults. Single and Sentinel only.
	PipelineWindow time.Duration
	PipelineLimit  int
}

// MemcacheOptions describe the Memcached servers. Its zero value is no
// Memcached.
type MemcacheOptions struct {
	// Servers are "host:port[,host:port...]", blanks around commas dropped.
	Servers string
	// SRV is a DNS SRV name listing the servers, instead of Servers.
	SRV string
	// SRVRefresh, when positive, resolves SRV again at this interval.
	SRVRefresh time.Duration
	// MaxIdleConns is the number of idle connections kept per server; 0 or
	// less means memcachelimit.DefaultMaxIdleConns.
	MaxIdleConns int
	// TLS connects to every server with TLS, verified as TLSFiles says.
	TLS      bool
	TLSFiles tlsclient.Files
}

// DenyCacheOptions configure the deny cache in front of Redis (package
// denycache): on with Redis unless Disabled, never with another store.
// MaxEntries bounds the denials held and MaxAge how long one is reused; 0
// means denycache's defaults.
type DenyCacheOptions struct {
	Disabled   bool
	MaxEntries int
	MaxAge     time.Duration
}

// Validate reports the first setting of o that Open would refuse, as an
// *option.Error naming its field, and the reference server's variable
// where operators set those. Settings that would do nothing (TLS files
// without TLS) are refused too: whoever set them meant something else.
func (o Options) Validate() error {
	if err := cmp.Or(o.Redis.validate("Redis"), o.PerSecond.validate("PerSecond"), o.Memcache.validate(),
		o.validateBounds(), o.validateRedis()); err != nil {
		return err
	}
	if o.Memcache.on() {
		// What the limiter would refuse at the start, refused here, so
		// that floodgate check sees it too.
		if err := o.memcacheOptions(nil).Validate(); err != nil {
			return asOwn("memcache", err, memcacheFields)
		}
	}
	if m := o.Memcache; m.on() && o.Redis.URL != "" {
		field := "Memcache.Servers" // not both: Memcache.validate refuses that
		if m.SRV != "" {
			field = "Memcache.SRV"
		}
		return &option.Error{Options: "store.Options", Field: field, With: []string{"Redis.URL"},
			Want: "and %s (BACKEND_TYPE=memcache and REDIS_URL): counters are kept in one store; unset one"}
	}
	return nil
}

// validate checks one deployment's own settings; name is its field.
func (r RedisOptions) validate(name string) error {
	switch {
	case !slices.Contains([]string{TypeSingle, "sentinel", "cluster"}, r.typ()):
		return refused(name+".Type", r.Type, "want single, sentinel or cluster")
	case r.PoolSize < 0:
		return refused(name+".PoolSize", r.PoolSize, "must not be negative")
	case r.PipelineWindow < 0:
		return refused(name+".PipelineWindow", r.PipelineWindow, "must not be negative")
	case r.PipelineLimit < 0:
		return refused(name+".PipelineLimit", r.PipelineLimit, "must not be negative")
	}
	return nil
}

// validateRedis checks how the two Redis deployments and their TLS files
// go together.
func (o Options) validateRedis() error {
	if o.Redis.URL == "" {
		set := setFields{{"Redis.TLS", o.Redis.TLS}, {"Redis.SentinelAuth", o.Redis.SentinelAuth != ""}}
		set = append(set, tlsFields("RedisTLSFiles", o.RedisTLSFiles)...)
		if err := need(set.names(), "%s (REDIS_URL)", "Redis.URL"); err != nil {
			return err
		}
	}
	if o.Redis.SentinelAuth != "" && o.Redis.typ() != "sentinel" {
		return need([]string{"Redis.SentinelAuth"}, "%s sentinel (REDIS_TYPE=sentinel)", "Redis.Type")
	}
	if o.PerSecond.URL == "" {
		if err := need(o.PerSecond.fields("PerSecond").names(), "%s (REDIS_PERSECOND=true and REDIS_PERSECOND_URL)", "PerSecond.URL"); err != nil {
			return err
		}
	}
	switch {
	case o.PerSecond.URL != "" && o.Redis.URL == "":
		return &option.Error{Options: "store.Options", Field: "PerSecond.URL", With: []string{"Redis.URL"},
			Want: "(REDIS_PERSECOND_URL) needs %s (REDIS_URL): the per-second Redis holds only the limits whose window is shorter than a minute"}
	case o.PerSecond.SentinelAuth != "" && o.PerSecond.typ() != "sentinel":
		return need([]string{"PerSecond.SentinelAuth"}, "%s sentinel (REDIS_PERSECOND_TYPE=sentinel)", "PerSecond.Type")
	case !o.Redis.tlsOn() && !o.PerSecond.tlsOn() && o.RedisTLSFiles != tlsclient.Files{}:
		// Named all four, as the reference's REDIS_TLS_* variables.
		return &option.Error{Options: "store.Options", Field: "RedisTLSFiles.CAFile",
			Also: []string{"RedisTLSFiles.CertFile", "RedisTLSFiles.KeyFile", "RedisTLSFiles.SkipHostnameVerification"},
			Want: "(REDIS_TLS_*) need %s (REDIS_TLS=true) or %s (REDIS_PERSECOND_TLS=true)", With: []string{"Redis.TLS", "PerSecond.TLS"}}
	}
	return nil
}

// validate checks the Memcached settings.
func (m MemcacheOptions) validate() error {
	files := tlsFields("Memcache.TLSFiles", m.TLSFiles)
	if !m.on() {
		set := append(setFields{{"Memcache.TLS", m.TLS}, {"Memcache.SRVRefresh", m.SRVRefresh != 0}}, files...)
		return need(set.names(), "%s or %s (MEMCACHE_HOST_PORT or MEMCACHE_SRV with BACKEND_TYPE=memcache)", "Memcache.Servers", "Memcache.SRV")
	}
	switch {
	case m.Servers != "" && m.SRV != "":
		return &option.Error{Options: "store.Options", Field: "Memcache.Servers", With: []string{"Memcache.SRV"},
			Want: "(MEMCACHE_HOST_PORT) and %s (MEMCACHE_SRV): give one"}
	case m.SRVRefresh != 0 && m.SRV == "":
		return &option.Error{Options: "store.Options", Field: "Memcache.SRVRefresh", With: []string{"Memcache.SRV"},
			Want: "(MEMCACHE_SRV_REFRESH) needs %s (MEMCACHE_SRV)"}
	case !m.TLS:
		return need(files.names(), "%s (MEMCACHE_TLS=true)", "Memcache.TLS")
	}
	return nil
}

// validateBounds checks the numbers that must not be negative; 0 is each
// one's default.
func (o Options) validateBounds() error {
	switch {
	case o.Deadline < 0:
		return refused("Deadline", o.Deadline, "must not be negative")
	case o.MemoryMaxEntries < 0:
		return refused("MemoryMaxEntries", o.MemoryMaxEntries, "must not be negative")
	case o.DenyCache.MaxEntries < 0:
		return refused("DenyCache.MaxEntries", o.DenyCache.MaxEntries, "must not be negative")
	case o.DenyCache.MaxAge < 0:
		return refused("DenyCache.MaxAge", o.DenyCache.MaxAge, "must not be negative")
	}
	return nil
}

// refused is the error of an option field refused for its value v.
func refused(field string, v any, want string) error {
	return &option.Error{Options: "store.Options", Field: field, Value: v, Want: want}
}

// asOwn returns a client's refusal of its options' fields as the refusal
// of the Options fields that set them, which own maps
// ("redislimit.Options.KeyPrefix" to "KeyPrefix"); any other error
// prefixed with what failed.
func asOwn(what string, err error, own map[string]string) error {
	oe, mapped := err.(*option.Error)
	if !mapped {
		return fmt.Errorf("%s: %w", what, err)
	}
	paths := func(fields []string) []string {
		out := make([]string, len(fields))
		for i, f := range fields {
			p, ok := own[oe.Options+"."+f]
			out[i], mapped = p, mapped && ok
		}
		return out
	}
	e := &option.Error{Options: "store.Options", Field: paths([]string{oe.Field})[0], Also: paths(oe.Also),
		Value: oe.Value, Want: oe.Want, With: paths(oe.With), Err: oe.Err}
	if !mapped {
		return fmt.Errorf("%s: %w", what, err)
	}
	return e
}

// setFields are fields by name, each with whether it is set.
type setFields []struct {
	name string
	set  bool
}

// names returns the names of the fields that are set.
func (fs setFields) names() []string {
	var out []string
	for _, f := range fs {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

// need is the error saying that fields need what, in which each %s names
// one of with; nil without fields.
func need(fields []string, what string, with ...string) error {
	if len(fields) == 0 {
		return nil
	}
	verb := "needs "
	if len(fields) > 1 {
		verb = "need "
	}
	return &option.Error{Options: "store.Options", Field: fields[0], Also: fields[1:], Want: verb + what, With: with}
}

// fields are the deployment's settings but its URL, under prefix.
func (r RedisOptions) fields(prefix string) setFields {
	return setFields{
		{prefix + ".Type", r.typ() != TypeSingle}, {prefix + ".SentinelMaster", r.SentinelMaster != ""},
		{prefix + ".Auth", r.Auth != ""}, {prefix + ".SentinelAuth", r.SentinelAuth != ""}, {prefix + ".TLS", r.TLS},
		{prefix + ".PoolSize", r.PoolSize != 0}, {prefix + ".DialTimeout", r.DialTimeout != 0},
		{prefix + ".PipelineWindow", r.PipelineWindow != 0}, {prefix + ".PipelineLimit", r.PipelineLimit != 0},
	}
}

// tlsFields are the fields of TLS files under prefix.
func tlsFields(prefix string, f tlsclient.Files) setFields {
	return setFields{
		{prefix + ".CAFile", f.CAFile != ""}, {prefix + ".CertFile", f.CertFile != ""},
		{prefix + ".KeyFile", f.KeyFile != ""}, {prefix + ".SkipHostnameVerification", f.SkipHostnameVerification},
	}
}

// Supports reports why the store o opens cannot serve limits of spec, or
// nil. It needs no open store, so that the rule loader uses it in -check.
func (o Options) Supports(spec limit.Spec) error {
	if o.Memcache.on() {
		return memcachelimit.Supports(spec)
	}
	return nil
}

// on reports whether Memcached is the store.
func (m MemcacheOptions) on() bool { return m.Servers != "" || m.SRV != "" }

// serverList returns Servers split at commas, blanks dropped.
func (m MemcacheOptions) serverList() []string {
	var out []string
	for _, s := range strings.Split(m.Servers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// typ is Type in lower case, "single" when empty.
func (r RedisOptions) typ() string {
	return strings.ToLower(cmp.Or(r.Type, TypeSingle))
}

// tlsOn reports whether the deployment is reached with TLS.
func (r RedisOptions) tlsOn() bool { return r.TLS || strings.HasPrefix(r.URL, "rediss://") }

// credentials splits Auth's "password" or "user:password".
func (r RedisOptions) credentials() (user, pass string) {
	if u, p, ok := strings.Cut(r.Auth, ":"); ok {
		return u, p
	}
	return "", r.Auth
}
