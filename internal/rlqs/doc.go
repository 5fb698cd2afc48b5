// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas):
// the bidirectional stream over which Envoy's rate_limit_quota filter
// reports, per bucket, how many requests it allowed and denied, and
// receives the assignment it enforces locally until the next one (allow
// all, deny all, or a token bucket, each with a time to live).
//
// It decides from the same rules and the same counters as the RLS service
// (package envoy), so RLS and RLQS traffic share one limit:
//
//   - The stream's domain is the rule domain; a bucket_id is one
//     descriptor whose entries are the bucket's key/value pairs, matched by
//     rules.Set as a request descriptor is (bucket.go says in which order).
//     A bucket no rule limits is assigned allow-all.
//   - The allowed requests each report carries are charged to the counters
//     of the bucket's limits, the counters RLS decides with, and every
//     report's demand (allowed + denied) is added to a per-limit demand
//     counter of the current report interval (a slot), so every floodgate
//     instance sharing the store sees the fleet's (ledger.go).
//   - A stream's assignment is its share of what the limit has left,
//     proportional to its demand over the fleet's in the last slot, paced
//     over the rest of the window, and deny-all once the window is spent
//     (policy.go). It is pushed when it changes, when a spent window
//     resets, and before its time to live runs out; idle buckets are
//     abandoned (stream.go).
//
// What Envoy 1.40 does and does not do shaped it: reports every 5 s
// whatever reporting_interval says, durations in whole seconds, no
// requests_per_time_unit, a token bucket kept (tokens and rate) when only
// its fill_interval's seconds change, buckets never dropped unless
// abandoned; see docs/rlqs.md.
//
// Bounds (Options) cap streams, buckets and bucket ids, so memory stays
// bounded whatever clients send; metrics (Metrics) count streams,
// buckets, reports, assignments and refusals.
//
// It imports rules (matching, counter keys), limit (the Limiter
// contract) and option (the error of an option it refuses), never a store
// or a listener: the binary registers the
// Service on its gRPC server (internal/server), and a program embedding
// it registers it on its own.
package rlqs
