// Package envoy answers Envoy's rate-limit calls
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) from a set
// of rules and a limit.Limiter.
//
// What it promises:
//
//   - Request in, response out. Service.ShouldRateLimit checks the request
//     (InvalidArgument naming the field when it is malformed or beyond
//     Options.Bounds), finds what the current rules.Set applies to each
//     descriptor, and asks the Limiter once for the whole request, which
//     is charged all or nothing. The answer has one status per descriptor,
//     in request order, and an overall code: OVER_LIMIT when a descriptor
//     is over its limit (quota descriptors: when all of them are), OK
//     otherwise, and OK for a domain no rule declares.
//   - Headers and body on request: Options.Headers adds the reference
//     server's RateLimit-* headers or the IETF draft's, with Retry-After
//     on OVER_LIMIT; Options.OverLimitBody adds a JSON body.
//   - A failing store never fails silently. The failure mode of the
//     descriptor's rule, else Options.FailureMode, decides: allow (the
//     default) lets the request pass, deny answers OVER_LIMIT, unavailable
//     answers the gRPC error Unavailable so that Envoy's failure_mode_deny
//     decides. An answer so given says it, with the cause, in its
//     dynamic_metadata, and in Options.StoreFailureHeader when set.
//
// The package holds no store and starts no server: the caller chooses the
// Limiter (limit.Memory, redislimit.Limiter, ...) and serves the Service
// on its own gRPC server, built with grpc.ForceServerCodecV2(codec), on
// which codec.Register registers it (see the Example). Codec decodes
// requests without reflection and answers InvalidArgument to one that does
// not decode; codec.JSONHandler serves the reference server's /json
// endpoint on an HTTP server of the caller's. Options.Metrics, Options.Logger and Options.TracerProvider
// receive what each request did.
package envoy
