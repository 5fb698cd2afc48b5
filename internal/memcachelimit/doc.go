// Package memcachelimit decides fixed-window limits in Memcached, for
// deployments that ran the reference server with BACKEND_TYPE=memcache.
// It owns the Memcached keys (AppendKey), a small client of Memcached's
// text protocol, and the check that a limit asks only for what Memcached
// can decide (Supports). What a fixed window means is package limit's.
//
// Memcached's only atomic read-modify-write is incr and decr on a decimal
// counter: enough for a fixed window and for nothing else, so the other
// algorithms are refused (ErrUnsupported), by Supports when rules load.
//
// # A call
//
// Each counter window is one key (AppendKey), living on one server chosen
// by rendezvous hashing of the key, so that a server joining or leaving
// moves only the windows it gains or held. A call sends, in one round trip
// per server, "add" (create at 0, expiring a second after the window ends)
// then "incr" by the cost for each consuming hit, and "incr" by 0 to read
// any other. The replies decide with limit's arithmetic. When they block
// the call (limit.Blocked), a second round trip "decr"s what the call
// added; otherwise it gives back only the denied hits' increments and
// applies the refunds. Usage hits are incremented whatever the replies
// say and never given back; unlike limit.Memory, a counter is not capped
// at limit.Constants().MaxCount. Most calls take one round trip, a denied
// one two.
//
// # What is exact
//
// Without concurrent calls on the same counters a Limiter decides as
// limit.Memory, to the microsecond (TestMatchesMemory), except that
// refunds apply after the call's other hits. Under concurrency a counter
// never admits more than its limit, but a refused call's increments are
// visible to others for about one round trip, until its decr, and stay
// until the window ends if Memcached fails in between (then Evaluate
// returns an error wrapping ErrStore). docs/operations.md (Memcached) says
// what this means for users, and why incr and decr rather than gets and
// cas.
//
// The window a hit falls in comes from this process's clock (Options.Now),
// as in the reference: keep instances synchronized. Expiry uses
// Memcached's clock.
//
// # Failures
//
// Every failure of Memcached is an error wrapping ErrStore, naming the
// servers that failed, so that the service applies each rule's
// failure_mode. A call waits at most Options.Timeout, or its context's
// sooner deadline. Healthy reports whether the latest exchange with each
// server got an answer; Probe asks every server. There is no circuit
// breaker.
package memcachelimit
