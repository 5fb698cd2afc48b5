// Package envoy answers Envoy's rate-limit calls
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit).
//
// It owns the request path, from the request's bytes to the answer's, and
// only that. Codec decodes a gRPC request without reflection into pooled
// storage (codec.go, wire.go) and refuses, naming the problem, one that
// does not decode; DecodeJSON reads /json's. Service.ShouldRateLimit then
// validates the request against its bounds (bounds.go), asks the current
// rules.Set what applies to it in one call (Set.Resolve: matching,
// replaces, Envoy's limit overrides, counter keys and each descriptor's
// mode), turns the counted limits into one []limit.Hit for the whole
// request, and asks the Limiter once, which decides the request in that
// one call, quota rule included (all or nothing: a rejected request
// consumes nothing but its usage reports, the descriptors carrying their
// own hits_addend, which are charged whatever the answer), and says
// whether it blocked it. It applies the failure policy and builds the
// response from the resolved limits: one status per descriptor, the
// overall code, and the optional response headers and body; an answer of
// the failure policy says so, with the cause, in its dynamic metadata
// (failure.go). Codec encodes the answer. The service logs each answer at
// debug level (debuglog.go), and tells Options.Metrics what each request
// did (the Metrics interface; the binary counts it in Prometheus and
// statsd, in internal/rlsmetrics).
//
// It imports rules (which limits apply), limit (the Limiter contract and
// its Hit and Decision types), tracing (its spans) and option (the error
// of an option it refuses), never a store: the limit.Limiter
// (limit.Memory, redislimit.Limiter, ...) is chosen by the caller. The
// listeners, the settings and the store's assembly are the binary's
// (internal/server, internal/settings, internal/store, cmd/server); a
// program embedding the service serves it with its own gRPC server, built
// with grpc.ForceServerCodecV2(codec), on which codec.Register registers
// it.
package envoy
