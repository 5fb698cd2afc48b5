// Package redislimit decides rate limits inside Redis: every limit of a
// request is evaluated by one Lua script, atomically, on the clock of the
// Redis node that holds the counter (Redis TIME), so any number of floodgate
// instances share one exact limit whatever their own clocks say.
//
// It owns the Lua scripts (one .lua file per algorithm, embedded), the
// Redis key encoding (Key), and the construction of go-redis clients for a
// single node, Sentinel or Cluster (NewClient). The semantics of the
// algorithms are package limit's; limit.Memory is the in-memory twin the
// scripts are tested against, decision for decision. This package imports
// only limit from floodgate, and nothing of rules or the gRPC layer.
package redislimit
