// Package memcachelimit decides fixed-window limits in Memcached, for
// deployments that ran the reference server with BACKEND_TYPE=memcache.
// Memcached's only atomic read-modify-write is incr and decr on a decimal
// counter: enough for a fixed window and nothing else, so Supports refuses
// the other algorithms when rules load. What a fixed window means is
// package limit's.
//
// # A call
//
// Each counter window is one key (AppendKey) on one server, chosen by
// rendezvous hashing so that a server joining or leaving moves only the
// windows it gains or held. A call sends, in one round trip per server,
// "add" (create at 0, expiring a second after the window ends) then "incr"
// by the cost for each consuming hit, and "incr" by 0 to read any other;
// the replies decide with limit's arithmetic. A blocked call
// (limit.Blocked) "decr"s what it added in a second round trip; an
// allowed one gives back only its denied hits' increments and applies its
// refunds. Usage hits are counted whatever the replies and never given
// back; unlike limit.Memory, a counter is not capped at limit.MaxCount.
//
// # What is exact
//
// Without concurrent calls on its counters a Limiter decides as
// limit.Memory, to the microsecond (TestMatchesMemory), except that
// refunds apply after the call's other hits. Under concurrency a counter
// never admits more than its limit, but a refused call's increments are
// seen by others until its decr, about one round trip, or until the
// window ends if Memcached fails in between (Evaluate then returns an
// error wrapping ErrStore). docs/operations.md (Memcached) says what this
// means for users, and why incr and decr rather than gets and cas.
//
// Windows follow this process's clock (Options.Now), as in the reference:
// keep instances synchronized. Expiry follows Memcached's.
//
// # Failures
//
// Every failure of Memcached is an error wrapping ErrStore, naming the
// servers that failed, so that the service applies each rule's
// failure_mode. A call waits at most Options.Timeout, or its context's
// sooner deadline. There is no circuit breaker.
package memcachelimit
