// Package redislimit decides rate limits inside Redis: all the limits of a
// request are evaluated by one Lua script, atomically, on the clock of the
// Redis node that holds the counters (Redis TIME, seconds and
// microseconds), so any number of floodgate instances share one exact limit
// whatever their own clocks say.
//
// It owns the Lua scripts, the Redis key encoding (Key), and the
// construction of go-redis clients for a single node, Sentinel or Cluster
// (NewClient). The meaning of the algorithms is package limit's: each
// script is a line-by-line translation of limit's step functions, and
// limit.Memory is the twin the scripts are tested against, decision for
// decision, to the microsecond. Of floodgate it imports limit (the
// contract it implements), tracing (to say on the caller's store span
// how many requests shared a round trip) and option (the error of an
// option it refuses), and nothing of rules or the gRPC layer.
//
// # Scripts
//
// Each algorithm is a file in lua/ (fixed_window.lua, sliding_window.lua,
// sliding_log.lua, token_bucket.lua, leaky_bucket.lua, gcra.lua) whose
// header states its state's layout and exact semantics; lua/evaluate.lua is
// the driver that decides a batch of requests, each on its own: it applies
// a request's hits in order to working copies of their counters and writes
// them only if none of its hits is denied (a request of plain fixed
// windows is applied in place and taken back instead, see Performance).
// They are embedded and joined into one Redis Functions library, loaded
// once per node (FUNCTION LOAD; every master of a Cluster) and called with
// FCALL, so that Redis defines the functions of the Lua files once, not at
// every call. Its name, floodgate_ and the SHA-1 of the code
// (FunctionName), changes with the code, so two floodgate versions sharing
// a Redis each call their own.
// When a node has lost it (a restart without persistence, FUNCTION FLUSH,
// a failover to a node that never had it, a Cluster node added later) the
// "Function not found" reply is answered by loading it there and sending
// the call again, once, invisibly to the caller.
//
// A Redis without functions (before 7) or whose ACL denies FUNCTION LOAD or
// FCALL gets the same code as one script, sent with EVALSHA, which runs
// every definition again at each call; the first call (or Probe) decides
// which, once per Limiter, and Options.Logger says so. A lost script (the
// NOSCRIPT reply) is sent once with EVAL, which caches it again. The code
// works on Redis 6.2 (as a script) and 7.
//
// # Batching
//
// Concurrent Evaluate calls share round trips (BatchOptions; on by
// default on a single node or Sentinel, not on Cluster). A call is sent at
// once, alone, while fewer than 2 round trips are outstanding; otherwise
// it waits for one to end and goes with up to 63 other waiting calls in
// one script call. The script decides the requests one after the other,
// each all-or-nothing on its own, exactly as separate calls in that order
// would (a later request sees what an earlier one wrote), and reads Redis
// TIME once; one request's denial or error (a key holding another type,
// clocks disagreeing with a calendar) is its own. Invalid hits are refused
// in Go before they are queued. Each caller waits under its own context
// and returns when it ends; a queued call whose context has ended is
// dropped before sending, so it consumes nothing. A batch's deadline is
// Options.Timeout, or the latest of its callers' deadlines if that is
// sooner. The circuit breaker counts round trips: a failed batch is one
// failure, however many callers it had. Batches are bounded (64 requests,
// about 130 hits) so that one script call keeps Redis, which runs one
// script at a time, busy for well under a millisecond.
//
// Under load this trades a little latency for throughput: a call that
// queues waits for a round trip to end before its own starts. With few
// concurrent calls nothing queues and each goes at once, as without
// batching.
//
// # Keys
//
// A counter's key is prefix + "{" + 16 hex digits of the 64-bit FNV-1a hash
// of the counter + "}" + the counter (see Key). Given the prefix, the
// counter is the rest of the key, so distinct counters never share a key,
// whatever bytes they hold. The braces are a Redis Cluster hash tag: a
// counter lives in one slot, and counters spread over all slots.
//
// Every key expires at the instant its state becomes equivalent to no
// state (the end of a fixed window, a full token bucket, the last logged
// hit leaving the window, ...), rounded up to the millisecond: idle
// counters vanish, and their expiry never changes a decision.
//
// # Redis Cluster
//
// A script may only touch keys of one slot. On a *redis.ClusterClient the
// hits of a request are grouped by slot, each group is one script call
// (all-or-nothing within itself), and the groups run concurrently. If one
// group denies, every group that consumed gets its consumption back by a
// second call that refunds it. Between the two calls, for about one round
// trip, another request may see those counters as consumed and be denied
// though it would have passed; a refund never gives back more than was
// taken. Refund hits (limit.Hit.Refund) in a request denied by another slot
// are not undone, and a group whose call failed (a timeout, say) may or may
// not have consumed. Single nodes and Sentinel have none of this: one
// script call per request, shared with concurrent requests (see Batching).
//
// Each master has a circuit breaker of its own (see BreakerOptions and
// Limiter.Nodes): a master that dies, hangs or misses deadlines fails the
// calls on its slots, at once once its breaker is open, and the calls on
// the other masters' slots go on. The slot map itself (which master serves
// a slot) is the Limiter's home node: it fails only while no node can give
// one.
//
// # At most once
//
// A script call is sent at most once after it may have reached Redis: a
// reply lost with its connection may mean the script ran, and sending it
// again would charge (or refund) its hits twice. go-redis's retries are
// off on single nodes and Sentinel (NewClient), and the Cluster client's
// own loop, which re-sends after a dropped connection whatever MaxRetries
// says, is told not to for script calls. Replies that say Redis ran
// nothing are still followed: MOVED and ASK (by go-redis), TRYAGAIN (a few
// times, within the deadline), NOSCRIPT and "Function not found" (once).
//
// # Per-second Redis
//
// A Split keeps the counters of short windows (PerSecond: shorter than a
// minute, the reference server's REDIS_PERSECOND limits) in a Redis of
// their own and the others in the main one, each a Limiter of its own
// (single node, Sentinel or Cluster, with its breaker and batching). A
// request whose hits all go to one of them is that Limiter's call,
// unchanged. A request with hits on both is decided as the slots of a
// Cluster are, by the same code: both calls at once, and when one denies
// or fails, the other's consumption refunded by a second call, with the
// same window of about one round trip.
//
// # Reset
//
// Limiter.Reset deletes a counter's key (DEL, sent to its slot's master on
// a Cluster), and Split.Reset does it in the Redis the counter's window
// routes it to: an operator unblocking a client. A counter is one key
// whatever its algorithm, so nothing else is left of it.
//
// # Memory per counter
//
// MEMORY USAGE (SAMPLES 0) of one counter on Redis 7.0 (64-bit, jemalloc),
// limit 1000 per minute, from TestMemoryUsage (go test -v -run MemoryUsage):
//
//	algorithm                     after 1 hit   after 100 hits
//	fixed_window                         88 B             88 B
//	sliding_window (precision 1)        104 B            104 B
//	sliding_window (precision 60)           up to 584 B, all used
//	sliding_log                         136 B           3672 B   (one entry per instant that admitted hits: 2000 single-hit entries 236 KB; one hit of any cost: one entry)
//	token_bucket                        120 B            136 B
//	leaky_bucket                        120 B            136 B
//	gcra                                120 B            120 B
//
// A plain fixed window (no calendar) is one integer, tag × 2^33 + count,
// where the tag names the window (its index modulo 2^19 − 1, plus one):
// a hit under the limit is one INCRBY, the key keeping the TTL set when
// its window's first hit wrote it (SET PXAT); the fixed-window limit is at
// most 2^32 − 1, the rules' bound. A calendar window is the string
// "<window start>:<count>", a token or leaky bucket the string
// "<tokens or level, 17 digits>:<as of>": read with GET and written with
// SET PXAT, two commands where a hash took three (HMGET, HSET, PEXPIREAT),
// in the same memory (the bucket's 136 B once its value has 17 digits). A
// calendar window written again in its window keeps its TTL (SET KEEPTTL),
// every write in a window setting the same expiry.
//
// Upgrading: counters written by earlier versions are read: hashes (GET
// answers WRONGTYPE, and only then the hash is read) and plain fixed
// windows' strings "<window start>:<count>" (INCRBY refuses them, and the
// request is decided by the general path, which reads them); each becomes
// the current layout at its next write. An earlier version cannot read
// the newer layouts: during a rolling upgrade, its requests on a counter a
// newer instance has written fail with ErrStore (the failure policy
// applies) until it is replaced, and the same holds after a downgrade
// until the counters expire (at most one window, or a bucket's refill
// time).
//
// A GCRA counter is a string "<arrival time>:<limit>" (about 20 bytes).
// Its arrival time is a whole number of grid units, and it keeps the limit
// it was written with so that a reload changing the limit carries the
// counter over instead of misreading it; 120 B is also what a fractional
// arrival time in µs took before (88 B only when it happened to be whole).
//
// # Performance
//
// A request costs at most one Redis round trip on a single node or
// Sentinel, whatever its number of descriptors and algorithms, and
// concurrent requests share round trips (see Batching); on Cluster, one
// per slot involved (two when a denial must be compensated). The script
// reads TIME once per call; a plain fixed window's hit runs one command
// under the limit (INCRBY; its window's first hit adds a SET), a bucket's
// two (GET, SET), so a one-descriptor request costs Redis 1.1 to 2.1
// commands instead of 5 (EVALSHA, TIME, HMGET, HSET, PEXPIREAT). An FCALL
// costs Redis less than EVALSHA of the same code, which defines every
// function of the script again at each call.
//
// A request whose hits are all plain fixed windows (no calendar, refund,
// advisory or quota hit, cost within the capacity, distinct keys: an
// Envoy request over fixed-window rules) takes a fast path: each hit is
// applied in place to its integer counter (INCRBY) and taken back if the
// request turns out blocked, where the general path reads every counter
// into a working copy and writes it back, and builds tables per hit to do
// so. Both ways are fixed_window.lua's, decided by one rule (its judge,
// the twin of package limit's fixed window), and evaluate.lua drives
// either without deciding a hit itself, so a change to the fixed window's
// meaning is made in that one file (and in package limit). The two read,
// write and answer alike: TestFixedFastPath sends the same calls to the
// library and to a copy with the fast path off, and compares replies,
// values and expiries. A request's arguments are read once, by the check
// of the whole call, and a request of one hit, the most common, is
// decided without the arrays of a request of several.
//
// Measured figures (batching, script time per algorithm, the whole
// server before and after) and how to reproduce them are in
// docs/benchmarks.md.
//
// Run them with: go test -run '^$' -bench . ./pkg/redislimit
package redislimit
