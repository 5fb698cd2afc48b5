// Package envoy answers Envoy's rate-limit calls
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit).
//
// It owns the request path, and only that: Service.ShouldRateLimit
// validates a request, asks the current rules.Set which limits each
// descriptor matches (Set.Match), drops the limits another matched limit
// replaces, turns the rest into one []limit.Hit for the whole request, asks
// the Limiter once (all or nothing: a rejected request consumes nothing),
// applies shadow mode, quota mode and the failure policy, and builds the
// response: one status per descriptor, the overall code, and the optional
// response headers and body. It also owns the counter keys of limits that
// Envoy overrides per request (key.go) and the request-path metrics.
//
// It imports rules (which limits apply) and limit (the Hit and Decision
// types), never a store: the Limiter is an interface satisfied by
// limit.Memory and redislimit.Limiter, chosen by the caller. Servers,
// listeners and configuration belong to package server and cmd/server.
package envoy
