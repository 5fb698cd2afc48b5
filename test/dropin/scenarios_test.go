package dropin

import (
	"fmt"
	"slices"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/floodgate/floodgate/internal/harness/rlstest"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// usageSteps look and charge 600 a turn against both budgets: the user's
// is spent at the second charge, which both servers keep though it is over.
func usageSteps() []step {
	look := req("llm", descHits(d("user", "u"), 0), descHits(d("org", "o"), 0))
	charge := req("llm", descHits(d("user", "u"), 600), descHits(d("org", "o"), 600))
	var steps []step
	for range 3 {
		steps = append(steps, one("a look before the request", look), one("the charge at its end", charge))
	}
	return cat(steps,
		one("a charge larger than the budget", req("llm", descHits(d("user", "w"), 5000))),
		one("spent by it", req("llm", descHits(d("user", "w"), 0))),
		// The request's own hits_addend is no usage report: refused, it
		// charges nothing.
		one("a request of 1500 hits", withHits(req("llm", d("user", "v")), 1500)),
		differ(rejected(".overallCode", ".statuses[0].code", ".statuses[0].limitRemaining"),
			one("after it", req("llm", descHits(d("user", "v"), 0)))),
	)
}

var shop = map[string]string{"shop.yaml": shopRules}

// configMap lays files out as Kubernetes mounts a ConfigMap: in a
// timestamped directory that ..data links to, each reached through a link
// of its own name (symlinks, as writeRules makes them).
func configMap(files map[string]string) map[string]string {
	const dir = "..2026_01_02_03_04_05.678"
	out := map[string]string{"..data": symlinkTo + dir}
	for name, text := range files {
		out[dir+"/"+name] = text
		out[name] = symlinkTo + "..data/" + name
	}
	return out
}

// aMonth fills a limit of a month, which the reference on Memcached
// enforces only without expiry jitter.
var aMonth = rep(3, "a month of 30 days", req("shop", d("month", "x")))

// The documented differences the steps show.
var (
	// A request refused for one limit charges none: the others' counts,
	// and so their limit_remaining, stay where they were.
	rejected = func(fields ...string) *documented {
		return &documented{row: "What differs: A rejected request", fields: fields}
	}
	// The reference on Memcached enforces no year limit (nor a month's
	// with expiry jitter) and counts nothing for a request with a space
	// in a value.
	onMemcache = func(fields ...string) *documented {
		return &documented{row: "Environment variables: BACKEND_TYPE", fields: fields}
	}
	// The reference joins keys and values with "_", to look rules up and
	// to name counters.
	joined = func(fields ...string) *documented {
		return &documented{row: "What differs: Rules and counters whose joined `key_value` strings meet", fields: fields}
	}
	// Without RUNTIME_IGNOREDOTFILES=true the reference reads a
	// ConfigMap's files twice, and loads nothing.
	configMapTwice = &documented{row: "What differs: Kubernetes' `..data` entries of a mounted ConfigMap", fields: []string{"code", ""}}
	// With Redis down the reference answers an error, floodgate by each
	// rule's failure_mode, allow by default.
	redisDown     = &documented{row: "What differs: Redis slow or down", fields: []string{"code", ""}}
	emptyRequest  = &documented{row: "What differs: Empty domain, no descriptors, an empty key (gRPC)", fields: []string{"code"}}
	retryAfter    = &documented{row: "Environment variables: LIMIT_RESPONSE_HEADERS_ENABLED", fields: []string{".responseHeadersToAdd"}}
	shadowCharges = &documented{row: "Environment variables: SHADOW_MODE", fields: []string{".statuses[1].limitRemaining"}}
)

// healthFromRedis made the reference's health wait for Redis to answer,
// which with Memcached it never does.
var healthFromRedis = &change{
	commit: "b8d893f", date: time.Date(2026, 5, 27, 17, 31, 36, 0, time.UTC),
	why: "feat: add retry in init phase instead of panic directly (envoyproxy/ratelimit#1144)",
}

// oldQuota is the answers to quotas over their limit of a reference built
// before quotaFix.
func oldQuota(fields ...string) *documented {
	slices.Sort(fields)
	return &documented{row: "What differs: A quota over its limit", fields: fields, before: quotaFix}
}

// quotaFix made the reference refuse a request whose every quota is over,
// and answer OVER_LIMIT for each quota over, as floodgate does.
var quotaFix = &change{
	commit: "05c08d0", date: time.Date(2026, 3, 18, 1, 40, 34, 0, time.UTC),
	why: "Fix quota result when all limits were exceeded (envoyproxy/ratelimit#1059), which floodgate's quotas follow",
}

var scenarios = []scenario{
	{name: "answers", files: shop, steps: answersSteps()},
	{name: "headers", files: shop, steps: headersSteps(), env: []string{
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left",
	}},
	{name: "shadow-mode", files: shop, env: []string{"SHADOW_MODE=true"}, steps: cat(
		rep(3, "one limit", req("shop", d("client", "s"))),
		// Passed only for shadow mode, the request charges nothing.
		differ(shadowCharges, rep(2, "every limit in shadow mode", req("shop", d("blocked", "x"), d("client", "s2")))),
	)},
	{name: "quota", files: map[string]string{"quota.yaml": quotaRules}, steps: quotaSteps()},
	{name: "usage", files: map[string]string{"llm.yaml": usageRules}, steps: usageSteps()},
	{name: "quota-mode", files: shop, env: []string{"QUOTA_MODE=true"}, steps: cat(
		rep(3, "every limit a quota", req("shop", d("client", "q"))),
		differ(oldQuota(quotaOver(0)...), rep(2, "a quota over and one that passes", req("shop", d("blocked", "q"), d("client", "q2")))),
	)},
	{name: "metadata", files: shop, env: []string{"RESPONSE_DYNAMIC_METADATA=true"}, steps: cat(
		rep(2, "limited", req("shop", d("client", "m"), d("open", "m"))),
		one("unknown domain", req("elsewhere", d("client", "m"))),
	),
		// The reference of REFERENCE_VERSION also sent quotaModeEnabled
		// (false without quotas); it no longer does since 3728d99.
		ignore: []string{".dynamicMetadata.quotaModeEnabled"},
	},
	{name: "statsd", files: shop, statsd: true, steps: cat(statsdSteps(), aMonth), env: []string{"EXTRA_TAGS=cluster:east,zone:b"}},
	{name: "dogstatsd", files: shop, statsd: true, steps: cat(statsdSteps(), aMonth), env: []string{
		"USE_STATSD=false", "USE_DOG_STATSD=true", "EXTRA_TAGS=cluster:east",
	}},
	// Without jitter, the reference's Memcached keys of a month live a
	// month; with it (300 s by default) they expire at once, but for one
	// in 300, so that a month's limit is enforced by chance.
	{name: "memcache", files: shop, store: memcache, steps: memcacheSteps(), env: []string{"EXPIRATION_JITTER_MAX_SECONDS=0"}},
	{name: "memcache-statsd", files: shop, store: memcache, statsd: true, steps: cat(statsdSteps(), aMonth), env: []string{"EXPIRATION_JITTER_MAX_SECONDS=0"}},
	{name: "sentinel", files: shop, store: sentinel, steps: cat(
		rep(4, "any value", req("shop", d("client", "a"))),
		rep(2, "several descriptors", req("shop", d("client", "b"), d("path", "/api/b"))),
	)},
	{name: "cluster", files: shop, store: cluster, steps: cat(
		rep(4, "any value", req("shop", d("client", "a"))),
		rep(2, "several descriptors, several slots", req("shop", d("client", "b"), d("path", "/api/b"), d("tier", "free", "user", "b"))),
		differ(rejected(".statuses[0].limitRemaining"), one("several descriptors, two over", req("shop", d("client", "b"), d("path", "/api/b"), d("tier", "free", "user", "b")))),
		rep(2, "the request's hits_addend", withHits(req("shop", d("client", "c")), 2)),
	)},
	{name: "edges", files: map[string]string{"edges.yaml": edgeRules}, steps: edgeSteps()},
	{name: "overrides-and-depth", files: map[string]string{"deep.yaml": deepRules}, steps: cat(
		rep(2, "a parent's limit", req("deep", d("org", "o1"))),
		rep(3, "the child's limit, below the parent's", req("deep", d("org", "o1", "team", "t1"))),
		one("a rule with an empty value is the key alone", req("deep", d("empty", "anything"))),
		rep(2, "a descriptor's hits_addend of 0", req("deep", descHits(d("org", "o2"), 0))),
		rep(2, "an override of a month", req("deep", override(d("org", "m"), 2, typev3.RateLimitUnit_MONTH))),
		rep(2, "an override of a year", req("deep", override(d("org", "y"), 2, typev3.RateLimitUnit_YEAR))),
		rep(2, "an override of a day on a nested rule", req("deep", override(d("org", "o3", "team", "t"), 1, typev3.RateLimitUnit_DAY))),
		one("a large hits_addend", withHits(req("deep", d("org", "big")), 1000)),
	)},
	{name: "yaml-corners", files: map[string]string{"c.yaml": yamlCorners, "d.yaml": "domain: onlydomain\n",
		"crlf.yaml": "domain: crlf\r\ndescriptors:\r\n  - key: k\r\n    rate_limit: {unit: minute, requests_per_unit: 1}\r\n"}, steps: cat(
		rep(2, "requests_per_unit missing", req("my.domain/x", d("norpu", "a"))),
		rep(2, "a number as value", req("my.domain/x", d("num", "123"))),
		rep(2, "a boolean as value", req("my.domain/x", d("boolval", "true"))),
		rep(3, "unlimited: false", req("my.domain/x", d("explicit", "a"))),
		rep(3, "a YAML anchor", req("my.domain/x", d("anchor", "a"))),
		rep(3, "its alias", req("my.domain/x", d("alias", "a"))),
		one("detailed_metric without a limit", req("my.domain/x", d("detailonly", "a"))),
		one("an empty descriptors list", req("my.domain/x", d("emptydescs", "a", "x", "y"))),
		one("a domain without descriptors", req("onlydomain", d("k", "v"))),
		rep(2, "CRLF line ends", req("crlf", d("k", "v"))),
	)},
	{name: "rule-files", files: map[string]string{
		"a.yaml": oneRule("fa"), "b.conf": oneRule("fb"), "c": oneRule("fc"), "sub/d.yaml": oneRule("fd"), ".e.yaml": oneRule("fe"),
		".sub/f.yaml": oneRule("ff"), "g.json": `{"domain": "fg", "descriptors": [{"key": "k", "rate_limit": {"unit": "minute", "requests_per_unit": 1}}]}`,
	}, steps: cat(
		rep(2, "a.yaml", req("fa", d("k", "v"))),
		rep(2, "b.conf", req("fb", d("k", "v"))),
		rep(2, "a file without extension", req("fc", d("k", "v"))),
		rep(2, "a subdirectory", req("fd", d("k", "v"))),
		rep(2, "a dot file", req("fe", d("k", "v"))),
		rep(2, "a dot directory", req("ff", d("k", "v"))),
		rep(2, "JSON", req("fg", d("k", "v"))),
	)},
	// What Kubernetes mounts, read as the reference's users are told to
	// read it; without RUNTIME_IGNOREDOTFILES=true the reference reads
	// ..2026_… besides the links, and refuses the repeated domains.
	{name: "configmap", files: configMap(map[string]string{"a.yaml": oneRule("ca"), ".b.yaml": oneRule("cb")}),
		env: []string{"RUNTIME_IGNOREDOTFILES=true"}, steps: cat(
			rep(2, "a file", req("ca", d("k", "v"))),
			rep(2, "a dot file, skipped by both", req("cb", d("k", "v"))),
		)},
	{name: "configmap-dotfiles", files: configMap(map[string]string{"a.yaml": oneRule("ca"), ".b.yaml": oneRule("cb")}), steps: differ(configMapTwice, cat(
		one("a file", req("ca", d("k", "v"))),
		one("a dot file", req("cb", d("k", "v"))),
	))},
	{name: "per-second", files: map[string]string{"s.yaml": perSecondRules}, window: time.Second, perSecond: true, steps: cat(
		rep(3, "a second", req("ps", d("s", "x"))),
		rep(3, "a minute beside it", req("ps", d("m", "x"), d("s", "y"))),
	)},
	{name: "xds", xds: xdsRules(), steps: cat(
		rep(4, "any value", req("pushed", d("client", "a"))),
		rep(2, "an exact value", req("pushed", d("client", "vip"))),
		rep(3, "wildcard", req("pushed", d("path", "/api/x"))),
		rep(3, "at its depth", req("pushed", d("tier", "free", "user", "u"))),
		rep(2, "shadow mode", req("pushed", d("shadow", "x"))),
		rep(2, "replaced, and unlimited", req("pushed", d("named", "x"), d("replacer", "y"), d("open", "z"))),
		one("another resource", req("other", d("k", "v"))),
	)},
	{name: "reload", files: map[string]string{"r.yaml": reloadRules(1, 3), "old.yaml": oneRule("old")}, steps: cat(
		rep(2, "before", req("reload", d("client", "a"))),
		one("another file, before", req("old", d("k", "v"))),
		step{name: "a limit raised, a rule and a file removed", req: req("reload", d("version", "2")),
			write: map[string]string{"r.yaml": reloadRules(2, 5), "old.yaml": ""}},
		rep(4, "after", req("reload", d("client", "a"))),
		one("a rule removed", req("reload", d("path", "/"))),
		one("a file removed", req("old", d("k", "v"))),
	)},
	// The environment of the reference's own docker-compose.yml: the root
	// watched for a swap of its link (RUNTIME_WATCH_ROOT unset), and a
	// Memcached address the Redis backend never reads.
	{name: "reference-compose", files: shop, unset: []string{"RUNTIME_WATCH_ROOT"},
		env: []string{"LOG_LEVEL=debug", "MEMCACHE_HOST_PORT=127.0.0.1:1"}, steps: cat(
			rep(4, "any value", req("shop", d("client", "a"))),
			rep(2, "nested", req("shop", d("tier", "free", "user", "u"))),
		)},
	// The reference's REDIS_TIMEOUT short, so that its error comes at
	// once; for floodgate it bounds the connect alone.
	{name: "redis-down", files: shop, env: []string{"REDIS_TIMEOUT=200ms"}, steps: cat(
		rep(2, "Redis up", req("shop", d("client", "a"))),
		step{name: "Redis down", req: req("shop", d("client", "a")), storeDown: true, differs: redisDown},
		differ(redisDown, one("Redis still down", req("shop", d("client", "a")))),
		one("no limit needs Redis", req("shop", d("open", "x"))),
	)},
	{name: "mutual-tls", files: shop, tls: true, steps: cat(
		rep(2, "the client the servers accept", req("shop", d("client", "a"))),
		step{name: "a client certificate for another name", req: req("shop", d("client", "a")), as: "other-name"},
		step{name: "no client certificate", req: req("shop", d("client", "a")), as: "no-certificate"},
		one("the client the servers accept, again", req("shop", d("client", "a"))),
	)},
	// The reference's counter keys join the domain, keys and values with
	// "_": distinct rules whose joined strings meet share one counter.
	{name: "joined-keys", files: map[string]string{"d.yaml": joinedRules, "da.yaml": oneRuleKey("d_a", "b")}, steps: cat(
		one("a=x_b, c=v", req("d", d("a", "x_b", "c", "v"))),
		differ(joined(".overallCode", ".statuses[0].code"), one("a=x, b_c=v: another rule, one key", req("d", d("a", "x", "b_c", "v")))),
		one("domain d, a_b=v", req("d", d("a_b", "v"))),
		differ(joined(".overallCode", ".statuses[0].code"), one("domain d_a, b=v: another domain, one key", req("d_a", d("b", "v")))),
	)},
	// And it looks rules up by the same joined strings: {a, b_c} beside
	// {a_b, c} is one rule twice, and the file is refused.
	{name: "joined-rules", files: map[string]string{"d.yaml": "domain: d\ndescriptors:\n  - key: a\n    value: b_c\n    rate_limit: {unit: minute, requests_per_unit: 1}\n  - key: a_b\n    value: c\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"},
		steps: cat(
			differ(joined("code", ""), one("a=b_c", req("d", d("a", "b_c")))),
			differ(joined("code", ""), one("a_b=c", req("d", d("a_b", "c")))),
		)},
	// Envoy Gateway's environment for Prometheus (USE_PROMETHEUS=true, its
	// mapping), then the reference's own mapping.
	{name: "prometheus-envoy-gateway", files: shop, prometheus: envoyGateway, steps: prometheusSteps()},
	{name: "prometheus", files: shop, prometheus: referenceMapping, steps: prometheusSteps()},
	{name: "merge", env: []string{"MERGE_DOMAIN_CONFIG=true"}, files: map[string]string{
		"a.yaml": "domain: shop\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
		"b.yaml": "domain: shop\ndescriptors:\n  - key: path\n    rate_limit: {unit: minute, requests_per_unit: 1}\n",
	}, steps: cat(
		rep(2, "from one file", req("shop", d("client", "a"))),
		rep(2, "from the other", req("shop", d("path", "/"))),
	)},
}

func answersSteps() []step {
	return cat(
		everyKind(),
		one("another value counts apart", req("shop", d("client", "b"))),
		one("exact value, no limit", req("shop", d("path", "/api/public"))),
		one("wildcard, another value", req("shop", d("path", "/api/y"))),
		one("above the limit's depth", req("shop", d("tier", "free"))),
		one("deeper than the rules", req("shop", d("tier", "free", "user", "u", "extra", "z"))),
		one("no rule", req("shop", d("tier", "gold", "user", "u"))),
		rep(3, "a week", req("shop", d("week", "x"))),
		rep(3, "a month of 30 days", req("shop", d("month", "x"))),
		rep(3, "a year", req("shop", d("year", "x"))),
		rep(3, "detailed_metric", req("shop", d("stats", "doc/a"))),
		rep(2, "value_to_metric", req("shop", d("stats", "v1"))),
		rep(2, "the request's hits_addend", withHits(req("shop", d("client", "c")), 2)),
		one("a hits_addend of 0 is 1", withHits(req("shop", d("client", "c0")), 0)),
		zeroLooked,
		rep(2, "the descriptor's hits_addend", req("shop", descHits(d("client", "d"), 3))),
		one("an override without a rule", req("shop", override(d("nothing", "e"), 1, typev3.RateLimitUnit_MINUTE))),
		refusedCharges(),
		one("unknown domain", req("elsewhere", d("client", "a"))),
		differ(emptyRequest, one("no descriptors", req("shop"))),
		differ(emptyRequest, one("empty domain", req("", d("client", "a")))),
		step{name: "/json", json: `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`},
		step{name: "/json again", json: `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"j"}]}],"hits_addend":3}`},
		step{name: "/json, an unknown domain", json: `{"domain":"elsewhere","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`},
		step{name: "/json, over", json: `{"domain":"shop","descriptors":[{"entries":[{"key":"blocked","value":"j"}]}]}`},
		step{name: "/healthcheck", get: "/healthcheck"},
		health(""), health("ratelimit"),
	)
}

// everyKind reaches every kind of shopRules' rules, one hit at a time:
// what every store and every stats sink must answer alike.
func everyKind() []step {
	return cat(
		rep(4, "any value", req("shop", d("client", "a"))),
		rep(2, "an exact value", req("shop", d("client", "vip"))),
		rep(3, "wildcard", req("shop", d("path", "/api/x"))),
		rep(3, "at its depth", req("shop", d("tier", "free", "user", "u"))),
		one("a limit of 0", req("shop", d("blocked", "x"))),
		one("unlimited", req("shop", d("open", "x"))),
		rep(2, "shadow mode", req("shop", d("shadow", "x"))),
		rep(2, "replaced", req("shop", d("named", "x"), d("replacer", "y"))),
		rep(2, "share_threshold", req("shop", d("stats", "img/a"))),
		rep(2, "share_threshold, another value shares", req("shop", d("stats", "img/b"))),
		rep(2, "a limit override", req("shop", override(d("client", "e"), 10, typev3.RateLimitUnit_HOUR))),
	)
}

// refusedCharges are requests refused for client=a, over after
// everyKind, and what they charged client=f.
func refusedCharges() []step {
	return cat(
		differ(rejected(".statuses[1].limitRemaining"), rep(2, "several, the first over", req("shop", d("client", "a"), d("client", "f")))),
		differ(rejected(".statuses[0].limitRemaining"), one("what the refused requests charged", req("shop", d("client", "f")))),
	)
}

// statsdSteps reach every kind of rule, one hit at a time or within the
// limit: where a request crosses its limit with several hits, or is
// refused for another descriptor, floodgate's counters differ by design
// (docs/operations.md, Metrics and alerts: not_charged, a crossing
// request's hits all over).
func statsdSteps() []step {
	return cat(
		everyKind(),
		one("exact value, no limit", req("shop", d("path", "/api/public"))),
		rep(3, "detailed_metric", req("shop", d("stats", "doc/a"))),
		rep(2, "value_to_metric", req("shop", d("stats", "v1"))),
		one("the descriptor's hits_addend", req("shop", descHits(d("client", "d"), 2))),
	)
}

// prometheusSteps are statsdSteps' calls, then a rule load, a call over
// /json, a call that is an error and a health check: what every series
// the servers serve to Prometheus counts.
func prometheusSteps() []step {
	return cat(
		statsdSteps(),
		step{name: "a rule file added", load: map[string]string{"added.yaml": oneRule("added")}},
		one("the added rule", req("added", d("k", "v"))),
		step{name: "/json", json: `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`},
		differ(emptyRequest, one("an error: no descriptors", req("shop"))),
		health(""),
	)
}

// memcacheSteps are answersSteps' calls on Memcached.
func memcacheSteps() []step {
	return cat(
		everyKind(),
		rep(3, "a week", req("shop", d("week", "x"))),
		aMonth,
		longWindow("a year", req("shop", d("year", "x"))),
		rep(2, "the request's hits_addend", withHits(req("shop", d("client", "c")), 2)),
		rep(2, "the descriptor's hits_addend", req("shop", descHits(d("client", "d"), 3))),
		zeroLooked,
		refusedCharges(),
		// The reference answers a request with a space in a value OK,
		// counting nothing.
		one("a value with a space", req("shop", d("client", "a b"))),
		differ(onMemcache(".statuses[0].limitRemaining"), one("a value with a space, again", req("shop", d("client", "a b")))),
		step{name: "/json", json: `{"domain":"shop","descriptors":[{"entries":[{"key":"client","value":"j"}]}]}`},
		health(""),
		differ(&documented{row: "Environment variables: BACKEND_TYPE", fields: []string{""}, since: healthFromRedis}, health("ratelimit")),
		differ(&documented{row: "Environment variables: BACKEND_TYPE", fields: []string{"code", ""}, since: healthFromRedis}, step{name: "/healthcheck", get: "/healthcheck"}),
	)
}

// zeroLooked looks at a limit of 0 (a descriptor's hits_addend of 0): OK,
// with the time left in its window, as when it refuses.
var zeroLooked = one("a limit of 0, looked at", req("shop", descHits(d("blocked", "look"), 0)))

// longWindow is three calls to a limit of 2 of a year, which the
// reference on Memcached never enforces (its key expires at once).
func longWindow(name string, r *pb.RateLimitRequest) []step {
	return cat(
		one(name, r),
		differ(onMemcache(".statuses[0].limitRemaining"), one(name+", again", r)),
		differ(onMemcache(".overallCode", ".statuses[0].code", ".statuses[0].limitRemaining"), one(name+", over", r)),
	)
}

func edgeSteps() []step {
	return cat(
		rep(3, "value *", req("edges", d("any", "x"))),
		rep(2, "value *, an empty value", req("edges", d("any", ""))),
		rep(2, "a* before *", req("edges", d("pre", "abc"))),
		rep(2, "* before the key alone", req("edges", d("pre", "bcd"))),
		rep(2, "an empty value", req("edges", d("pre", ""))),
		rep(2, "the key alone, an empty value", req("edges", d("k", ""))),
		rep(2, "one counter twice in a request", req("edges", d("k", "twice"), d("k", "twice"))),
		one("after it", req("edges", d("k", "twice"))),
		rep(2, "an unlimited rule replaced", req("edges", d("unl", "x"), d("rep", "y"))),
		one("an unlimited rule, named", req("edges", d("unl", "x"))),
		one("a second of 1000", req("edges", d("second", "x"))),
		one("a key that differs in case", req("edges", d("K", "x"))),
		differ(&documented{row: emptyRequest.row, fields: []string{"code", ""}}, one("an entry with an empty key", req("edges", d("", "x")))),
		one("a descriptor without entries", req("edges", d())),
	)
}

func headersSteps() []step {
	return cat(
		rep(3, "one limit", req("shop", d("client", "h"))),
		differ(retryAfter, one("one limit, over", req("shop", d("client", "h")))),
		rep(2, "the least remaining", req("shop", d("client", "h2"), d("path", "/api/h"), d("open", "h"))),
		differ(retryAfter, one("a limit of 0", req("shop", d("blocked", "h")))),
		one("unlimited alone", req("shop", d("open", "h"))),
		one("no rule", req("shop", d("nothing", "h"))),
	)
}

func quotaSteps() []step {
	return cat(
		one("one quota", req("quota", d("plan", "p"))),
		differ(oldQuota(append(quotaOver(0), ".overallCode")...), one("one quota, over", req("quota", d("plan", "p")))),
		one("two quotas", req("quota", d("plan", "p2"), d("team", "t"))),
		differ(oldQuota(quotaOver(0)...), one("two quotas, one over", req("quota", d("plan", "p2"), d("team", "t")))),
		differ(oldQuota(append(append(quotaOver(0), quotaOver(1)...), ".overallCode")...), one("two quotas, both over", req("quota", d("plan", "p2"), d("team", "t")))),
		one("a quota and a limit", req("quota", d("plan", "p3"), d("burst", "b"))),
		differ(oldQuota(quotaOver(0)...), one("a quota and a limit, both over", req("quota", d("plan", "p3"), d("burst", "b")))),
		one("a quota and no rule", req("quota", d("plan", "p4"), d("none", "n"))),
		differ(oldQuota(append(quotaOver(0), ".overallCode")...), one("a quota and no rule, the quota over", req("quota", d("plan", "p4"), d("none", "n")))),
	)
}

// quotaOver are the fields of descriptor i's status that a reference
// before quotaFix left as for a quota within its limit.
func quotaOver(i int) []string {
	return []string{fmt.Sprintf(".statuses[%d].code", i), fmt.Sprintf(".statuses[%d].durationUntilReset", i)}
}

// differ marks steps as showing a documented difference.
func differ(doc *documented, steps any) []step {
	out := cat(steps)
	for i := range out {
		out[i].differs = doc
	}
	return out
}

func one(name string, r *pb.RateLimitRequest) step { return step{name: name, req: r} }

func health(service string) step {
	return step{name: "health " + service, health: &service}
}

func withHits(r *pb.RateLimitRequest, n uint32) *pb.RateLimitRequest {
	r.HitsAddend = n
	return r
}

func descHits(desc *rlv3.RateLimitDescriptor, n uint64) *rlv3.RateLimitDescriptor {
	desc.HitsAddend = wrapperspb.UInt64(n)
	return desc
}

func override(desc *rlv3.RateLimitDescriptor, perUnit uint32, unit typev3.RateLimitUnit) *rlv3.RateLimitDescriptor {
	desc.Limit = &rlv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: perUnit, Unit: unit}
	return desc
}

// cat joins steps and lists of steps.
func cat(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch v := p.(type) {
		case step:
			out = append(out, v)
		case []step:
			out = append(out, v...)
		default:
			panic("cat: a step or []step")
		}
	}
	return out
}

// d is a descriptor of the entries key, value, key, value….
var d = rlstest.Desc

// req is a ShouldRateLimit of domain.
var req = rlstest.Request

// rep is n steps of the same call, named name #1…#n.
func rep(n int, name string, r *pb.RateLimitRequest) []step {
	steps := make([]step, n)
	for i := range steps {
		steps[i] = step{name: fmt.Sprintf("%s #%d", name, i+1), req: r}
	}
	return steps
}
