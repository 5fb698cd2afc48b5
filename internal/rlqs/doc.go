// Package rlqs serves Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3.RateLimitQuotaService): Envoy's
// rate_limit_quota filter reports, per bucket, the requests it allowed and
// denied, and enforces locally the assignment it is sent back (allow all,
// deny all, or a token bucket, each with a time to live).
//
// It decides from the same rules and counters as the RLS service, so RLS
// and RLQS traffic share one limit. A bucket_id is matched as a descriptor
// of the stream's domain (bucket.go); reports are charged to the bucket's
// counters and to the fleet's demand (ledger.go); a stream gets its
// demand's share of what the limit has left (policy.go); assignments are
// pushed when they change and before they run out, and idle buckets are
// abandoned (stream.go). docs/rlqs.md says what Envoy 1.40 does with them.
package rlqs
