// Package rules owns the rule files: their YAML schema (a superset of
// envoyproxy/ratelimit's), validation with file:line:column errors,
// compilation into an immutable Set that matches request descriptors without
// allocating, what applies to a request (Set.Resolve: matching, replaces,
// overrides, modes), the counter keys, which it alone builds (a store may
// only put them under its own prefix), and live reload of a rule directory.
//
// It knows nothing of Redis or gRPC: it imports only package limit (for the
// Spec each compiled limit carries), the YAML parser and fsnotify. The gRPC
// service asks a Set what applies to a request; a limiter evaluates it.
package rules
