// Package rules reads rate-limit rule files and says which limits apply to a
// request. What it promises:
//
//   - Schema: the YAML of envoyproxy/ratelimit's rule files, read as that
//     server reads them, plus the fields of floodgate's algorithms
//     (algorithm, burst, precision, calendar, timezone), metadata and
//     failure_mode. docs/rules.md lists every field.
//   - Validation: Load and Parse refuse a rule set whole when any file has a
//     problem, with a *LoadError that lists every problem as
//     "file:line:column: field: what is wrong". Rules that are legal but
//     doubtful are kept and reported by Set.Warnings.
//   - Matching: Set.Match follows a request descriptor level by level,
//     taking an exact value first, then the first matching wildcard in file
//     order, then the key-only descriptor, and matches only at the
//     descriptor's own depth. Set.Resolve adds a request's overrides, the
//     limits that replace others, and shadow and quota modes. Neither
//     allocates beyond the counter keys.
//   - Keys: counter keys are built here and nowhere else. A key depends on
//     what is counted (domain, descriptor path, the request's values where
//     they matter, algorithm, window, precision, calendar), never on the
//     limit's number, so a reload that changes only numbers keeps the
//     counters. A store may add its own namespace (a prefix, a hash tag)
//     and nothing more.
//   - Reload: a Watcher follows a rule file or directory (links, Kubernetes
//     ConfigMap swaps) and a Feed takes rule files pushed whole. Both put a
//     good new Set in force atomically and keep the current one when a new
//     one is refused.
//
// It knows nothing of Redis or gRPC: it imports package limit, the YAML
// parser and fsnotify.
package rules
