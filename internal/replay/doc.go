// Package replay rehearses an edit of the rules: it runs recorded traffic
// through two rule sets (the rules in force and the edited ones) and
// reports what the edit changes, rule by rule and request by request.
//
// Traffic is a file of JSON lines (Reader): either floodgate's own format,
// the body of a /json request plus its time, which Capture writes from a
// running server; or Envoy's JSON access log with the rate-limit filter's
// dynamic metadata (examples/envoy-access-log.yaml). Run replays it on the
// in-memory store (limit.Memory) behind the real service (envoy.Service),
// one of each per rule set, on a virtual clock set to each request's time:
// every algorithm and rule feature decides as in production, and a day of
// traffic replays in seconds. Report holds the outcome and writes it as
// text, JSON or HTML.
//
// It imports envoy, limit and rules; nothing imports it but cmd/server.
package replay
