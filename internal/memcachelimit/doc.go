// Package memcachelimit decides fixed-window limits in Memcached, for
// deployments that run the reference server with BACKEND_TYPE=memcache.
// It owns the Memcached keys (AppendKey), a small client of Memcached's
// text protocol (incr, decr, add, delete, version; pipelined, TLS, a pool of
// connections per server, servers from a list or from DNS SRV records),
// and the check that a limit asks only for what Memcached can decide
// (Supports). The meaning of a fixed window is package limit's; this
// package imports limit and option (the error of an option it refuses)
// alone of floodgate's packages.
//
// # What Memcached can decide
//
// Memcached has no scripts and no transactions: the only atomic
// read-modify-write it offers is incr and decr on a decimal counter. That
// is a fixed window, and nothing else: the other algorithms read a state
// and write one computed from it. A Limiter refuses them (ErrUnsupported),
// and Supports says so of each limit that uses one, so that the rule loader
// refuses them when they are loaded instead of each request failing.
//
// # A call
//
// Each hit's counter is one key per window: KeyPrefix, the window's start,
// and the hit's key (see AppendKey). Windows are those of limit's fixed
// window, calendar windows included (limit.Spec.WindowAt). A call sends,
// in one write and one round trip per server (the servers concurrently),
// for each consuming hit "add" (creating its counter at 0, expiring a
// little after the window ends, when missing) then "incr" by its cost,
// and for any other hit an "incr" by 0, which reads the counter in order
// with the rest. The replies decide with limit's arithmetic: a hit is
// allowed when the count before it plus its cost is at most the limit.
// When the replies block the call (limit.Blocked: an enforced hit denied,
// or every quota over), a second round trip "decr"s what the call added,
// so the call consumes nothing; when they do not, the second round trip
// gives back only the increments of denied hits (advisory ones, and those
// of a quota that is over while another is not), and applies the refunds
// (limit.Hit.Refund, envoy's is_negative_hits) with "decr", which stops
// at 0. Usage hits (limit.Hit.Usage: charges reported after the fact) are
// incremented whatever the replies say and never given back, past the
// limit when they do not fit, and their refunds are applied even in a
// call that blocks; unlike limit.Memory, a counter is not capped at
// limit.MaxCount (Memcached counts up to 2^64 − 1), which changes no
// decision, only what a later refund leaves. Most calls, allowed and
// without refunds, take one round trip; a
// denied one takes two (a quota that is over too: its increment is given
// back, visible meanwhile as below). An enforced hit that blocks whatever
// the counters hold (cost above the limit, or a limit of 0) makes the call
// read only, in one round trip.
//
// # What is exact, and what is not
//
// Without concurrent calls on the same counters a Limiter decides exactly
// as limit.Memory, decision for decision and to the microsecond (see
// TestMatchesMemory), but for one thing: refunds are applied after the
// call's other hits, so a hit of the same call on the same counter after
// a refund does not see it.
//
// With concurrent calls:
//   - A counter never admits more than its limit in a window: every
//     admitted hit saw, in its incr's reply, a count at most the limit
//     that includes everything admitted before it. N callers of cost 1 on
//     one counter admit exactly the limit.
//   - A refused call's increments stay visible for about one round trip,
//     until its decr: a call that would have fit in that moment may be
//     refused. This needs a refused cost above 1 on a nearly full counter,
//     or a call with several counters refused by one of them while holding
//     the others. Requests of cost 1 on one counter (the reference's whole
//     use) never see it: a refused increment of 1 means the counter was
//     already full.
//   - Hits of one call on different counters are all or nothing in effect
//     (a refused call's increments are given back) but not in isolation: for
//     that round trip, others see them.
//   - If Memcached fails between the two round trips (or the second misses
//     its deadline), a refused call's increments stay until the window
//     ends: its counters deny early. Evaluate then returns an error wrapping
//     ErrStore. The second round trip runs even when the caller has given
//     up, under a deadline of its own (Options.Timeout), so that this
//     happens only when Memcached fails.
//   - If the first round trip fails on some servers, what the others
//     answered is given back at once, and a server that failed may or may
//     not have applied the increments it was sent.
//   - A refund racing with a refused call on the same counter may be partly
//     absorbed by that call's decr, which stops at 0.
//   - Memcached evicts items under memory pressure: an evicted counter
//     starts again from 0. Give it the memory its counters need (one item
//     of 100 to 200 bytes each, by key length), or run it with -M so that it refuses writes instead.
//
// The alternative, gets and cas (read, decide, write if unchanged), would
// make each counter exact under concurrency but retries every write that
// meets another: on a popular counter, which is what rate limits guard,
// callers retry each other round after round. It still could not make
// several counters change together. incr and decr keep one round trip per
// call and never over-admit.
//
// # Compared with the reference server
//
// The reference (envoyproxy/ratelimit, BACKEND_TYPE=memcache) reads the
// counters (GetMulti), decides from what it read, and increments them
// afterwards, asynchronously, every matched counter, refused requests
// included. So concurrent requests that read the same count are all
// admitted (it can admit many times the limit in a burst), and a refused
// request consumes quota (its issues #185, #1060). Here the decision
// comes from the increment itself and a refused request consumes nothing.
// Both keep one key per window with the window's start in it; the
// reference creates a key with add when incr misses it (and incr again
// when another add won), this package sends add before every incr; the
// reference expires a key one unit after it was created, this package a
// little after its window ends. Keys are
// not the reference's: the two cannot share counters during a migration.
//
// # Time
//
// Memcached has no clock a command could read atomically with an incr, so
// the window a hit falls in comes from this process's clock (Options.Now),
// as in the reference: instances whose clocks disagree near a window's
// boundary count a few hits in different windows. Keep them synchronized
// (NTP). Expiry uses Memcached's clock: a counter expires a second after
// its window ends (whole seconds, rounded up, plus one for Memcached's
// coarse clock), given as seconds from now, or, for windows ending more
// than 30 days ahead, as a Unix time with a minute more for the clocks'
// disagreement. A counter outliving its window only holds memory, since
// the next window has another key.
//
// # Servers
//
// A counter window lives on one server, chosen by rendezvous hashing of
// its key over the servers' addresses: every instance given the same
// servers picks the same one, in any order, and a server joining or
// leaving moves only the windows it gains or held (the reference's client
// takes a CRC32 modulo the number of servers, which moves most keys).
// Successive windows of one counter land on different servers, which
// spreads a popular counter's load. With an SRV name, the records are
// resolved by New and again every SRVRefresh; a refresh that fails keeps
// the servers in force. Memcached servers share nothing: a server that
// restarts or is replaced starts its windows again from 0.
//
// # Reset
//
// Limiter.Reset deletes a counter for an operator: the keys of the window
// holding this process's now and of the windows just before and after it,
// since other instances whose clocks disagree a little near a boundary
// count in those.
//
// # Failures
//
// Every failure of Memcached is an error wrapping ErrStore, naming the
// servers that failed, so that the service applies each rule's
// failure_mode. A call waits at most for its context's deadline, or
// Options.Timeout when sooner. A connection that fails is closed along
// with the server's idle ones, which a restart has broken too. Healthy
// reports whether the latest exchange with each server got an answer;
// Probe asks every server. Unlike the Redis store there is no circuit
// breaker: a call to a server that refuses connections fails at once, and
// one to a server that does not answer waits for its deadline.
//
// # Performance
//
// Measured figures are in docs/benchmarks.md.
//
// Run it with: go test -run '^$' -bench . ./internal/memcachelimit
package memcachelimit
