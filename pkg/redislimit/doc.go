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
// decision, to the microsecond. This package imports only limit from
// floodgate, and nothing of rules or the gRPC layer.
//
// # Scripts
//
// Each algorithm is a file in lua/ (fixed_window.lua, sliding_window.lua,
// sliding_log.lua, token_bucket.lua, leaky_bucket.lua, gcra.lua) whose
// header states its state's layout and exact semantics; lua/evaluate.lua is
// the driver that applies a request's hits in order to working copies of
// their counters and writes them only if no hit is denied. They are
// embedded and joined into one script, sent with EVALSHA; when Redis has
// lost it (a restart, a failover, SCRIPT FLUSH) the NOSCRIPT reply is
// answered by sending the script once with EVAL, which also caches it
// again, invisibly to the caller. The script works on Redis 6.2 and 7.
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
// not have consumed. Single nodes and Sentinel have none of this: one call
// per request.
//
// # Memory per counter
//
// MEMORY USAGE (SAMPLES 0) of one counter on Redis 7.0 (64-bit, jemalloc),
// limit 1000 per minute, from TestMemoryUsage (go test -v -run MemoryUsage):
//
//	algorithm                     after 1 hit   after 100 hits
//	fixed_window                        120 B            120 B
//	sliding_window (precision 1)        104 B            104 B
//	sliding_window (precision 60)           up to 584 B, all used
//	sliding_log                         136 B           3672 B   (O(limit): 1000 entries 119456 B)
//	token_bucket                        120 B            136 B
//	leaky_bucket                        120 B            136 B
//	gcra                                120 B            120 B
//
// A GCRA counter is a string "<arrival time>:<limit>" (about 20 bytes).
// Its arrival time is a whole number of grid units, and it keeps the limit
// it was written with so that a reload changing the limit carries the
// counter over instead of misreading it; 120 B is also what a fractional
// arrival time in µs took before (88 B only when it happened to be whole).
//
// # Performance
//
// A request costs one Redis round trip on a single node or Sentinel,
// whatever its number of descriptors and algorithms, and one per slot
// involved on Cluster (two when a denial must be compensated).
// BenchmarkEvaluate, 16 concurrent callers against a local redis-server
// 7.0 over loopback, client and server sharing 2 cores that other jobs
// also loaded (load average about 7), medians of 3 runs; "in Redis" is the
// script's own time per call from INFO commandstats, which bounds what one
// Redis core can serve:
//
//	algorithm        descriptors   ns/op   decisions/s   round trips/decision   µs in Redis per call
//	fixed_window          1        56960       17566            1                      18.5
//	fixed_window          3       141778       21185            0.33                   54.4
//	sliding_window        1        47856       20911            1                      17.9
//	sliding_window        3        78084       38450            0.33                   38.2
//	sliding_log           1        60206       16619            1                      28.8
//	sliding_log           3       116045       25870            0.33                   73.5
//	token_bucket          1        39839       25131            1                      20.7
//	token_bucket          3        52405       57280            0.33                   36.9
//	leaky_bucket          1        43019       23272            1                      22.5
//	leaky_bucket          3        63929       46977            0.33                   43.8
//	gcra                  1        39353       25428            1                      18.6
//	gcra                  3        57761       51974            0.33                   39.5
//
// Run them with: go test -run '^$' -bench . ./pkg/redislimit
package redislimit
