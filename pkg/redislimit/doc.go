// Package redislimit decides rate limits in Redis, as a limit.Limiter
// that any number of processes can share.
//
// What it promises:
//
//   - Atomic decisions on one clock. One Lua call decides all the hits of a
//     request, all-or-nothing, on the clock of the Redis node that holds
//     the counters (Redis TIME), so processes with different clocks share
//     one exact limit. The scripts in lua/ translate package limit's
//     algorithms step for step, and limit.Memory is the twin they are
//     tested against, decision for decision, to the microsecond.
//   - A documented key layout. A counter is one key, prefix + "{" + 16 hex
//     digits of the counter's 64-bit FNV-1a hash + "}" + the counter (see
//     Key). Distinct counters never share a key, and every key expires when
//     its state becomes equivalent to no state, so idle counters vanish.
//   - Redis Cluster through hash tags. The braces put each counter in one
//     slot and spread counters over all slots. A request whose hits span
//     several slots is one call per slot, run concurrently; if one slot
//     denies, the others get their consumption back by a second call, so
//     for about one round trip another request may see it taken. A Split
//     over two Redis (REDIS_PERSECOND) is decided the same way.
//   - Failures are errors, never answers. When Redis cannot decide
//     (unreachable, too slow, an error reply), Evaluate returns an error
//     wrapping ErrStore and the caller applies its failure policy. A
//     circuit breaker per Redis master then fails calls at once, wrapping
//     limit.ErrCircuitOpen too, until a probe succeeds. A call is sent at
//     most once after it may have reached Redis: a lost reply is an
//     error, never a second charge.
//
// The Lua code runs as a Redis Functions library named after its hash
// (Script), so two versions sharing a Redis each call their own; a
// Redis without functions (before 7), or whose ACL denies them, gets the
// same code with EVALSHA. On a single node or Sentinel, concurrent calls
// share round trips (BatchOptions), each still decided as if sent alone.
package redislimit
