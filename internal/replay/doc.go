// Package replay rehearses an edit of the rules: it runs recorded traffic
// through the rules in force and the edited ones and reports what the edit
// changes, and to whom: per domain, per rule, per descriptor value and
// request by request.
//
// Traffic is JSON lines (Reader), written by a server's -capture
// (internal/capture) or taken from Envoy's
// access log; Merge puts several inputs in time order. Run replays them on
// the in-memory store behind the real service, one of each per rule set,
// on a virtual clock set to each request's time: every algorithm decides
// as in production, and a day of traffic replays in seconds. Report holds
// the outcome and writes it as text, JSON or HTML. Command is the
// floodgate-replay program (cmd/replay), which `floodgate replay` runs.
package replay
