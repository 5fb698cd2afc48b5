// Package rules owns the rule files: their YAML schema (a superset of
// envoyproxy/ratelimit's), validation with file:line:column errors,
// compilation into an immutable Set that matches request descriptors without
// allocating, the stable identity of every limit's counters, and live reload
// of a rule directory.
//
// It knows nothing of Redis or gRPC: it imports only package limit (for the
// Spec each compiled limit carries), the YAML parser and fsnotify. The gRPC
// service asks a Set which limits apply; a limiter evaluates them.
package rules
