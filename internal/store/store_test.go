package store

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/internal/tlsclient"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/floodgate/floodgate/pkg/option"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// Every refused setting is named as "store: Options.<Field>", the form
// settings.Config.Explain turns into the flag; the zero value opens the
// in-memory store.
func TestValidate(t *testing.T) {
	redis := RedisOptions{URL: "127.0.0.1:6379"}
	files := tlsclient.Files{CAFile: "ca.pem"}
	tests := []struct {
		name string
		opts Options
		want string // "" for none
	}{
		{"zero", Options{}, ""},
		{"Redis in any case", Options{Redis: RedisOptions{URL: "h:1", Type: "CLUSTER"}}, ""},
		{"a rediss URL with TLS files", Options{Redis: RedisOptions{URL: "rediss://h:1"}, RedisTLSFiles: files}, ""},
		{"per-second TLS alone", Options{Redis: redis, PerSecond: RedisOptions{URL: "h:2", TLS: true}, RedisTLSFiles: files}, ""},
		{"per-second type single", Options{PerSecond: RedisOptions{Type: "single"}}, ""},
		{"type", Options{Redis: RedisOptions{URL: "h:1", Type: "ring"}}, `store.Options.Redis.Type "ring": want single, sentinel or cluster`},
		{"pool size", Options{Redis: RedisOptions{URL: "h:1", PoolSize: -1}}, "store.Options.Redis.PoolSize -1: must not be negative"},
		{"per-second window", Options{Redis: redis, PerSecond: RedisOptions{URL: "h:2", PipelineWindow: -time.Second}}, "store.Options.PerSecond.PipelineWindow -1s: must not be negative"},
		{"pipeline limit", Options{Redis: RedisOptions{URL: "h:1", PipelineLimit: -2}}, "store.Options.Redis.PipelineLimit -2: must not be negative"},
		{"TLS without Redis", Options{Redis: RedisOptions{TLS: true}}, "store.Options.Redis.TLS needs store.Options.Redis.URL (REDIS_URL)"},
		{"TLS files without Redis", Options{RedisTLSFiles: files, Redis: RedisOptions{SentinelAuth: "pw"}}, "store.Options.Redis.SentinelAuth and store.Options.RedisTLSFiles.CAFile need store.Options.Redis.URL (REDIS_URL)"},
		{"sentinel auth without sentinel", Options{Redis: RedisOptions{URL: "h:1", SentinelAuth: "pw"}}, "store.Options.Redis.SentinelAuth needs store.Options.Redis.Type sentinel (REDIS_TYPE=sentinel)"},
		{"per-second settings without its URL", Options{Redis: redis, PerSecond: RedisOptions{PoolSize: 3}}, "store.Options.PerSecond.PoolSize needs store.Options.PerSecond.URL (REDIS_PERSECOND=true and REDIS_PERSECOND_URL)"},
		{"per-second cluster without its URL", Options{Redis: redis, PerSecond: RedisOptions{Type: "cluster", TLS: true}}, "store.Options.PerSecond.Type and store.Options.PerSecond.TLS need store.Options.PerSecond.URL (REDIS_PERSECOND=true and REDIS_PERSECOND_URL)"},
		{"per-second without Redis", Options{PerSecond: RedisOptions{URL: "h:2"}}, "store.Options.PerSecond.URL (REDIS_PERSECOND_URL) needs store.Options.Redis.URL (REDIS_URL): the per-second Redis holds only the limits whose window is shorter than a minute"},
		{"per-second sentinel auth", Options{Redis: redis, PerSecond: RedisOptions{URL: "h:2", SentinelAuth: "pw"}}, "store.Options.PerSecond.SentinelAuth needs store.Options.PerSecond.Type sentinel (REDIS_PERSECOND_TYPE=sentinel)"},
		{"TLS files without TLS", Options{Redis: redis, RedisTLSFiles: tlsclient.Files{CertFile: "c", KeyFile: "k"}}, "store.Options.RedisTLSFiles.CAFile, store.Options.RedisTLSFiles.CertFile, store.Options.RedisTLSFiles.KeyFile and store.Options.RedisTLSFiles.SkipHostnameVerification (REDIS_TLS_*) need store.Options.Redis.TLS (REDIS_TLS=true) or store.Options.PerSecond.TLS (REDIS_PERSECOND_TLS=true)"},
		{"Memcached TLS without Memcached", Options{Memcache: MemcacheOptions{TLS: true, SRVRefresh: time.Minute}}, "store.Options.Memcache.TLS and store.Options.Memcache.SRVRefresh need store.Options.Memcache.Servers or store.Options.Memcache.SRV (MEMCACHE_HOST_PORT or MEMCACHE_SRV with BACKEND_TYPE=memcache)"},
		{"Memcached servers and SRV", Options{Memcache: MemcacheOptions{Servers: "h:1", SRV: "_mc._tcp"}}, "store.Options.Memcache.Servers (MEMCACHE_HOST_PORT) and store.Options.Memcache.SRV (MEMCACHE_SRV): give one"},
		{"Memcached files without TLS", Options{Memcache: MemcacheOptions{Servers: "h:1", TLSFiles: tlsclient.Files{CAFile: "ca.pem"}}}, "store.Options.Memcache.TLSFiles.CAFile needs store.Options.Memcache.TLS (MEMCACHE_TLS=true)"},
		{"Memcached refresh without SRV", Options{Memcache: MemcacheOptions{Servers: "h:1", SRVRefresh: time.Minute}}, "store.Options.Memcache.SRVRefresh (MEMCACHE_SRV_REFRESH) needs store.Options.Memcache.SRV (MEMCACHE_SRV)"},
		{"Memcached refresh negative", Options{Memcache: MemcacheOptions{SRV: "_mc._tcp", SRVRefresh: -time.Minute}}, "store.Options.Memcache.SRVRefresh -1m0s: must not be negative"},
		{"Memcached server without port", Options{Memcache: MemcacheOptions{Servers: "h"}}, `store.Options.Memcache.Servers "h": want host:port: address h: missing port in address`},
		{"Memcached and Redis", Options{Redis: redis, Memcache: MemcacheOptions{SRV: "_mc._tcp"}}, "store.Options.Memcache.SRV and store.Options.Redis.URL (BACKEND_TYPE=memcache and REDIS_URL): counters are kept in one store; unset one"},
		{"deadline", Options{Deadline: -time.Millisecond}, "store.Options.Deadline -1ms: must not be negative"},
		{"memory", Options{MemoryMaxEntries: -1}, "store.Options.MemoryMaxEntries -1: must not be negative"},
		{"deny cache size", Options{DenyCache: DenyCacheOptions{MaxEntries: -1}}, "store.Options.DenyCache.MaxEntries -1: must not be negative"},
		{"deny cache age", Options{DenyCache: DenyCacheOptions{MaxAge: -time.Second}}, "store.Options.DenyCache.MaxAge -1s: must not be negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if got := errString(err); got != tc.want {
				t.Fatalf("Validate() = %q, want %q", got, tc.want)
			}
			if tc.want == "" {
				return
			}
			if _, err := Open(context.Background(), tc.opts); errString(err) != tc.want {
				t.Errorf("Open: %v, want Validate's error", err)
			}
		})
	}
}

// TestOpenNamesItsField: a value the store's client refuses (a Redis URL,
// a key prefix) is refused as the field of Options that set it, so that
// the settings can name the flag and the variable.
func TestOpenNamesItsField(t *testing.T) {
	redis := RedisOptions{URL: "127.0.0.1:1"}
	for _, tc := range []struct {
		name  string
		opts  Options
		field string
		text  string
	}{
		{"not host:port", Options{Redis: RedisOptions{URL: "nohost"}}, "Redis.URL", `store.Options.Redis.URL "nohost": want host:port`},
		{"a cluster node", Options{Redis: redis, PerSecond: RedisOptions{URL: "h:1,x:", Type: "cluster"}}, "PerSecond.URL", `store.Options.PerSecond.URL "x:": want host:port`},
		{"a password kept out", Options{Redis: RedisOptions{URL: "redis://u:secret@h:1/x"}}, "Redis.URL", `store.Options.Redis.URL "redis://u:xxxxx@h:1/x": `},
		{"a Redis key prefix", Options{Redis: redis, KeyPrefix: "a{b"}, "KeyPrefix", `store.Options.KeyPrefix "a{b": must not contain '{' or '}'`},
		{"a Memcached server", Options{Memcache: MemcacheOptions{Servers: "nohost"}}, "Memcache.Servers", `store.Options.Memcache.Servers "nohost": want host:port`},
		{"a Memcached key prefix", Options{Memcache: MemcacheOptions{Servers: "127.0.0.1:1"}, KeyPrefix: "a b"}, "KeyPrefix", `store.Options.KeyPrefix "a b": holds byte 0x20`},
	} {
		st, err := Open(context.Background(), tc.opts)
		if err == nil {
			st.Close()
		}
		oe, ok := err.(*option.Error)
		if !ok || oe.Options != "store.Options" || oe.Field != tc.field || !strings.HasPrefix(err.Error(), tc.text) {
			t.Errorf("%s: Open = %v, want an option.Error of store.Options.%s starting %q", tc.name, err, tc.field, tc.text)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The in-memory store says what it is and counts its counters, and
// exposes its fill; it has no health to watch.
func TestMemoryStore(t *testing.T) {
	s, logs := openOn(t, systemClock{}, Options{MemoryMaxEntries: 100})
	const want = "counters in this process only: not shared with other instances, lost on restart; %d of at most 100 counters"
	if h := s.Health(); s.Name() != "memory" || h.Name != "memory" || !h.Healthy || !h.Reached || h.Detail != strings.Replace(want, "%d", "0", 1) {
		t.Errorf("%s health %+v", s.Name(), h)
	}
	hit := []limit.Hit{{Key: "k", Spec: limit.Spec{Limit: 1, Window: time.Minute}, Cost: 1}}
	if _, err := s.Limiter().Evaluate(context.Background(), hit, make([]limit.Decision, 1)); err != nil {
		t.Fatal(err)
	}
	if h := s.Health(); h.Detail != strings.Replace(want, "%d", "1", 1) {
		t.Errorf("detail %q after one counter", h.Detail)
	}
	v, help := metrics(t, s)
	if v["floodgate_memory_entries"] != 1 || help["floodgate_memory_refused_total"] == "" || help["floodgate_store_healthy"] != "" || help["floodgate_deny_cache_answers_total"] != "" {
		t.Errorf("metrics %v", v)
	}
	if !strings.Contains(logs.String(), `level=WARN msg="no Redis configured (-redis, REDIS_URL): counters are kept in this process's memory`) {
		t.Errorf("no warning that counters are in memory:\n%s", logs)
	}
}

// With Redis, the deny cache answers the calls after the one that used up
// the window, its counts are exposed, and a change of the rules empties
// it. Disabled, every call goes to Redis.
func TestDenyCache(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := openOn(t, systemClock{}, Options{Redis: RedisOptions{URL: srv.Addr}})
	hit := []limit.Hit{{Key: "k", Spec: limit.Spec{Limit: 1, Window: time.Minute}, Cost: 1}}
	decide := func(s *Store) bool {
		d := make([]limit.Decision, 1)
		if _, err := s.Limiter().Evaluate(context.Background(), hit, d); err != nil {
			t.Fatal(err)
		}
		return d[0].Allowed
	}
	if !decide(s) || decide(s) || decide(s) {
		t.Fatal("want allowed, then denied twice")
	}
	v, _ := metrics(t, s)
	if v["floodgate_deny_cache_answers_total"] != 2 || v["floodgate_deny_cache_misses_total"] != 1 || v["floodgate_deny_cache_entries"] != 1 {
		t.Fatalf("after the window was used up in Redis and two denials from the cache: %v", v)
	}

	calls := make(chan chan struct{}, 1)
	changed := func() <-chan struct{} {
		ch := make(chan struct{})
		calls <- ch
		return ch
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.FollowRules(ctx, changed); close(done) }()
	close(<-calls) // the rules change
	<-calls        // and FollowRules waits for the next change: flushed
	cancel()
	<-done
	if n := s.cache.Len(); n != 0 {
		t.Errorf("after a change of the rules the deny cache holds %d denials", n)
	}
	if decide(s) || s.cache.Stats().Evaluated != 2 {
		t.Errorf("after a change of the rules, want the call denied by Redis: %+v", s.cache.Stats())
	}

	off, _ := openOn(t, systemClock{}, Options{Redis: RedisOptions{URL: srv.Addr}, KeyPrefix: "off:", DenyCache: DenyCacheOptions{Disabled: true}})
	if _, ok := off.Limiter().(*redislimit.Limiter); !ok || off.cache != nil {
		t.Errorf("disabled, the limiter is %T", off.Limiter())
	}
	if _, help := metrics(t, off); help["floodgate_deny_cache_answers_total"] != "" || help["floodgate_store_healthy"] == "" {
		t.Errorf("disabled, metrics %v", help)
	}
	// FollowRules has nothing to do, and says so by returning.
	off.FollowRules(context.Background(), changed)
}

// Memcached refuses, at load, every limit but fixed windows, at the
// limit's position; Redis and memory serve them all.
func TestSupportsAtLoad(t *testing.T) {
	files := map[string][]byte{"r.yaml": []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: token_bucket, burst: 10}
`)}
	mc := Options{Memcache: MemcacheOptions{Servers: "h:1"}}
	_, err := rules.Parse(files, rules.Options{Supports: mc.Supports})
	var le *rules.LoadError
	const want = "r.yaml:6:17: rule d.b: algorithm token_bucket cannot be served by Memcached, which has no atomic read-modify-write but increments: use fixed_window, or keep the counters in Redis"
	if !errors.As(err, &le) || err.Error() != want {
		t.Errorf("Memcached: %v, want %q", err, want)
	}
	for _, o := range []Options{{}, {Redis: RedisOptions{URL: "h:1"}}} {
		if _, err := rules.Parse(files, rules.Options{Supports: o.Supports}); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// The start line names the pipeline settings when they are set, and says
// they do nothing on Cluster.
func TestPipelineSettingsLogged(t *testing.T) {
	for _, tc := range []struct {
		name    string
		redis   RedisOptions
		want    []string
		wantNot []string
	}{
		{"set", RedisOptions{PipelineWindow: 150 * time.Microsecond, PipelineLimit: 8},
			[]string{"pipeline_window=150µs", "pipeline_limit=8"}, []string{"no effect on Redis Cluster"}},
		{"unset", RedisOptions{}, nil, []string{"pipeline_", "no effect on Redis Cluster"}},
		{"cluster", RedisOptions{Type: "cluster", PipelineWindow: 150 * time.Microsecond},
			[]string{"pipeline_window=150µs", "no effect on Redis Cluster"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.redis.URL = deadAddr(t)
			_, logs := openOn(t, newFakeClock(), Options{Redis: tc.redis})
			out := logs.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("the start lines do not say %q:\n%s", w, out)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("the start lines say %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://user:pw@host:6379/0": "redis://***@host:6379/0",
		"pw@host:6379":                "***@host:6379",
		"host:6379":                   "host:6379",
		"master,s1:26379":             "master,s1:26379",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// The limiter a store hands the server ends each call within the store's
// deadline though the caller's context has none, in front of a Redis that
// answers nothing: through the deny cache, without it, and over a
// per-second split, whose two calls share one deadline. The server sets no
// timer of its own.
func TestLimiterBound(t *testing.T) {
	const deadline = 40 * time.Millisecond
	minute := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Minute}
	second := limit.Spec{Algorithm: limit.FixedWindow, Limit: 1000, Window: time.Second}
	for _, tc := range []struct {
		name  string
		split bool
		opts  func(main, ps string) Options
	}{
		{"redis, deny cache", false, func(main, _ string) Options { return Options{Redis: RedisOptions{URL: main}} }},
		{"redis, no deny cache", false, func(main, _ string) Options {
			return Options{Redis: RedisOptions{URL: main}, DenyCache: DenyCacheOptions{Disabled: true}}
		}},
		{"per-second split", true, func(main, ps string) Options {
			return Options{Redis: RedisOptions{URL: main}, PerSecond: RedisOptions{URL: ps}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			main, ps := redistest.Start(t), redistest.Start(t)
			opts := tc.opts(main.Addr, ps.Addr)
			opts.Deadline = deadline
			s, _ := openOn(t, systemClock{}, opts)
			hits := []limit.Hit{{Key: "m", Spec: minute, Cost: 1}, {Key: "s", Spec: second, Cost: 1}}
			if !tc.split {
				hits = hits[:1]
			}
			if _, err := s.Limiter().Evaluate(context.Background(), hits, make([]limit.Decision, len(hits))); err != nil {
				t.Fatal(err) // the script loaded, both Redis known
			}
			main.Freeze()
			ps.Freeze()
			defer main.Thaw()
			defer ps.Thaw()
			start := time.Now()
			_, err := s.Limiter().Evaluate(context.Background(), hits, make([]limit.Decision, len(hits)))
			// A second is far more than the deadline, yet far less than
			// a call that nothing bounds would take on a frozen Redis.
			timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
			if took := time.Since(start); !timedOut || took > time.Second {
				t.Fatalf("a call on a frozen Redis: %v after %v, want a deadline error within %v", err, took, deadline)
			}
		})
	}
}
