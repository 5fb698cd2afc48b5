package main

import (
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
)

// defaultGOGC is the garbage collector's target (GOGC) when the
// environment sets none. floodgate's live heap is small (rules, counters
// of the in-memory store, connection buffers: a few MiB) while every
// request allocates, so at Go's default of 100 the collector runs very
// often for little gain; 400 lets the heap grow to five times the live
// heap between collections, a few tens of MiB, and cut the server's CPU
// per decision (docs/benchmarks.md, "Server CPU per decision"). A
// GOMEMLIMIT (the Helm chart and the Kubernetes example set one from the
// container's limit) still makes the collector run sooner when memory runs
// short.
const defaultGOGC = 400

// gcDefault returns the GOGC floodgate applies and true when the
// environment does not set GOGC; when it does (even to "off"), the Go
// runtime has already applied it and gcDefault returns false, so the
// operator's value wins.
func gcDefault(env lookupFunc) (gogc int, apply bool) {
	if v, ok := env("GOGC"); ok && v != "" {
		return 0, false
	}
	return defaultGOGC, true
}

// applyGCDefault sets the process's GC target to defaultGOGC unless the
// environment sets GOGC. It changes process-wide state, so only main
// calls it, before anything allocates much.
func applyGCDefault(env lookupFunc) {
	if gogc, ok := gcDefault(env); ok {
		debug.SetGCPercent(gogc)
	}
}

// gcInEffect returns the runtime's GC target in percent (-1: off) and its
// memory limit in bytes (-1: none), read back from the runtime so that the
// log shows what is in force whoever set it.
func gcInEffect() (gogc, memLimit int64) {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}, {Name: "/gc/gomemlimit:bytes"}}
	metrics.Read(s)
	gogc, memLimit = -1, -1
	if s[0].Value.Kind() == metrics.KindUint64 {
		if v := s[0].Value.Uint64(); v <= math.MaxInt32 {
			gogc = int64(v)
		}
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		if v := s[1].Value.Uint64(); v < math.MaxInt64 {
			memLimit = int64(v)
		}
	}
	return gogc, memLimit
}

// logGC logs the garbage collector's settings in force and where the GC
// target came from, once at start.
func logGC(logger *slog.Logger, env lookupFunc) {
	gogc, memLimit := gcInEffect()
	from := "GOGC"
	if _, ok := gcDefault(env); ok {
		from = "default"
	}
	limit := "none"
	if memLimit >= 0 {
		limit = slog.Int64Value(memLimit).String()
	}
	logger.Info("garbage collector", "gogc", gogc, "gogc_from", from, "gomemlimit_bytes", limit)
}
