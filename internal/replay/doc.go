// Package replay rehearses an edit of the rules: it runs recorded traffic
// through two rule sets (the rules in force and the edited ones) and
// reports what the edit changes, and to whom: per domain, per rule, per
// descriptor value (a client's address, an API key) and request by
// request.
//
// Traffic is a file of JSON lines (Reader): either floodgate's own format,
// the body of a /json request plus its time, which Capture writes from a
// running server; or Envoy's JSON access log with the rate-limit filter's
// dynamic metadata (examples/envoy-access-log.yaml). Merge puts one or
// several inputs (the captures of several replicas) in time order, or
// fails: a request is never decided at another time than its own. Run
// replays the traffic on the in-memory store (limit.Memory) behind the
// real service (envoy.Service), one of each per rule set, on a virtual
// clock set to each request's time: every algorithm and rule feature
// decides as in production, and a day of traffic replays in seconds.
// Report holds the outcome and writes it as text, JSON or HTML.
//
// It imports envoy, limit, option and rules; nothing imports it but
// cmd/server.
package replay
