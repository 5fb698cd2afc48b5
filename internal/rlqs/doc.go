// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): Envoy's
// rate_limit_quota filter reports, per bucket, the requests it allowed and
// denied, and enforces locally the assignment it is sent back (allow all,
// deny all, or a token bucket, each with a time to live).
//
// It decides from the same rules and counters as the RLS service, so RLS
// and RLQS traffic share one limit. A bucket_id is matched as a descriptor
// of the stream's domain (bucket.go); a report's allowed requests are
// charged to the counters of the bucket's limits, and its demand to a
// per-limit demand counter that every instance sharing the store adds to
// (ledger.go). A stream gets the share of what the limit has left that its
// demand is of the fleet's, paced over the rest of the window (policy.go).
// Assignments are pushed when they change and before they run out; idle
// buckets are abandoned (stream.go). docs/rlqs.md says what Envoy 1.40
// does and does not do with them.
package rlqs
