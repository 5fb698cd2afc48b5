// Package twin holds the constants that pkg/limit's algorithms and their
// Lua twins in pkg/redislimit must agree on and that a program using
// either never needs: the script is generated from them (GCRA_EPOCH,
// MAX_DEBT), so that no Lua file spells them out. limit.MaxCount is not
// here: the Limiter contract states it and the binary's metrics cap a
// charge with it.
package twin

import "time"

// GCRAEpoch is the instant GCRA's arrival times count from, in µs since
// the Unix epoch (2024-01-01T00:00:00Z): from it, an arrival time in grid
// units of at most 1 µs stays an exact integer in a float64 for a century.
const GCRAEpoch int64 = 1704067200000000

// MaxDebt is the longest a bucket (token bucket, leaky bucket, GCRA)
// takes to pay back the usage charges that took it past its limit; a
// charge beyond is counted up to it. Every time it gives stays exact in
// µs.
const MaxDebt = 10 * 365 * 24 * time.Hour
